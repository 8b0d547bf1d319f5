"""Eager int8 modules (what ``torch.ao.quantization.convert`` makes): carried as handled leaves, their packed
weights as data.

An int8 ``Conv2d`` or ``Linear`` keeps its weight and bias packed in a TorchScript object
(``Conv2dPackedParamsBase``, ``LinearPackedParamsBase``); its int8 kernels (``quantized::conv2d``,
``quantized::add``, ...) have no implementation torch.export can trace. So:

- each int8 module of :data:`INT8` is a handled leaf (:mod:`torch2ir.handlers.quant` records its constructor
  arguments), traced as a **stand-in** (:func:`int8_stand_ins`): while exporting, its ``forward`` (and a
  ``QFunctional``'s methods) compute the output's shape and quantized dtype with float ops on a float tensor
  of the input's shape (the values are never used: a leaf's ops are its own business, and the rebuild runs
  the real class);
- its packed state is recorded **unpacked** (:func:`packed_state`): ``weight`` (a quantized tensor, per-tensor
  or per-channel), ``bias``, ``scale`` and ``zero_point``, as the module's own ``state_dict()`` holds them
  (:func:`common.state_dict.unpack_int8` gives a ``Linear``'s packed entry the same form);
- an int8 module outside :data:`INT8` (dynamic quantization, embeddings, LSTM, ...) is refused before tracing
  (:func:`refuse_int8`), naming it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq
import torch.nn.functional as F
from torch import fx, nn
from torch.ao.nn.quantized.modules.linear import LinearPackedParams

from common.errors import ConversionError

#: Module namespaces of eager int8 modules.
INT8_NAMESPACES = ("torch.ao.nn.quantized.", "torch.ao.nn.intrinsic.quantized.", "torch.nn.quantized.",
                   "torch.nn.intrinsic.quantized.")
#: Float modules living in those namespaces (``FloatFunctional`` computes in float until ``convert`` swaps it).
FLOAT_CLASSES = ("FloatFunctional", "FXFloatFunctional")

_CONVS: dict[type[nn.Module], int] = {
    nnq.Conv1d: 1, nnq.Conv2d: 2, nnq.Conv3d: 3, nniq.ConvReLU1d: 1, nniq.ConvReLU2d: 2, nniq.ConvReLU3d: 3}
_LINEARS: tuple[type[nn.Module], ...] = (nnq.Linear, nniq.LinearReLU)
#: Modules whose output has their input's shape.
_ELEMENTWISE: tuple[type[nn.Module], ...] = (
    nnq.Hardswish, nnq.ReLU6, nnq.LeakyReLU, nnq.Sigmoid, nnq.ELU, nnq.Softmax, nnq.BatchNorm2d, nnq.BatchNorm3d,
    nniq.BNReLU2d, nniq.BNReLU3d, nnq.Dropout)

#: Every int8 class carried (the others are refused by :func:`refuse_int8`).
INT8: tuple[type[nn.Module], ...] = (nnq.Quantize, nnq.DeQuantize, *_CONVS, *_LINEARS, *_ELEMENTWISE,
                                     nnq.QFunctional, LinearPackedParams)
#: Classes whose weight, bias, scale and zero point live outside parameters and buffers (:func:`packed_state`).
PACKED: tuple[type[nn.Module], ...] = (*_CONVS, *_LINEARS)


def int8_modules(model: nn.Module) -> list[tuple[str, str]]:
    """``(path, qualified class)`` of every eager int8 module of ``model``, in module order."""
    out = []
    for path, module in model.named_modules():
        cls = type(module)
        if cls.__module__.startswith(INT8_NAMESPACES) and cls.__name__ not in FLOAT_CLASSES and \
                not cls.__module__.startswith(("torch.ao.nn.quantized.reference", "torch.nn.quantized.reference")):
            out.append((path or "root", f"{cls.__module__}.{cls.__qualname__}"))
    return out


def refuse_int8(model: nn.Module) -> None:
    """Raise if ``model`` holds eager int8 modules of classes outside :data:`INT8`, or an int8 ``Linear`` whose
    packed weight is not ``qint8`` (dynamic quantization's ``float16``).

    Raises:
        ConversionError: naming the first ones and what to do instead.
    """
    modules = int8_modules(model)
    kernels = _int8_kernel_calls(model) if modules else []  # convert_fx's graphs hold int8 modules too
    if kernels:
        path, node, op = kernels[0]
        raise ConversionError(
            f"{len(kernels)} call{'s' if len(kernels) != 1 else ''} of int8 kernels in the graph of an fx GraphModule "
            f"(made by torch.ao's convert_fx): node {node!r} of {path} calls {op}, which torch.export cannot trace",
            implementation=path, node=node,
            hint="convert the model before convert_fx (prepared: observers with their statistics) and run convert_fx "
            "on the rebuild, or quantize in eager mode (tq.convert) or with PT2E (convert_pt2e), which convert")
    carried = set(INT8)
    found = [(path, cls) for path, cls in modules
             if type(model.get_submodule("" if path == "root" else path)) not in carried]
    found += [(path or "root", "packed float16 weights") for path, m in model.named_modules()
              if isinstance(m, LinearPackedParams) and m.dtype != torch.qint8]
    if not found:
        return
    named = ", ".join(f"{path} ({cls.rsplit('.', 1)[-1]})" for path, cls in found[:3])
    raise ConversionError(
        f"{len(found)} eager int8 module{'s' if len(found) != 1 else ''} of a class an IR does not carry: "
        f"{named}{', ...' if len(found) > 3 else ''}", implementation=found[0][0],
        hint="int8 models convert with " + ", ".join(sorted({c.__name__ for c in INT8 if c is not LinearPackedParams}))
        + "; for others convert the model before tq.convert (prepared or QAT-prepared: float weights, observers and "
        "fake-quantize modules with their statistics) and run tq.convert on the rebuilt model (docs/extending.md)")


def _int8_kernel_calls(model: nn.Module) -> list[tuple[str, str, str]]:
    """``(module path, node, operator)`` of every call of a ``quantized::`` operator in the graphs of ``model``'s
    fx ``GraphModule``s (FX graph mode quantization calls them as functions: ``quantized::add_relu``)."""
    out = []
    for path, module in model.named_modules():
        if not isinstance(module, fx.GraphModule):
            continue
        for node in module.graph.nodes:
            op = getattr(node.target, "_qualified_op_name", None) or (
                node.target.name() if isinstance(node.target, torch._ops.OpOverload) else "")
            if node.op == "call_function" and isinstance(op, str) and op.startswith("quantized::"):
                out.append((path or "root", node.name, op))
    return out


def packed_state(module: nn.Module) -> dict[str, torch.Tensor]:
    """The state of a :data:`PACKED` module or a ``QFunctional`` that is no parameter or buffer, as its
    ``state_dict()`` holds it (a ``Linear``'s unpacked): ``weight``, ``bias`` (when it has one), ``scale``
    (float32) and ``zero_point`` (int64); empty for any other module."""
    out: dict[str, torch.Tensor] = {}
    if isinstance(module, PACKED):
        weight, bias = module._weight_bias()
        out["weight"] = weight
        if bias is not None:
            out["bias"] = bias
    elif not isinstance(module, nnq.QFunctional):
        return out
    out["scale"] = torch.tensor(module.scale)
    out["zero_point"] = torch.tensor(module.zero_point)
    return out


def _float(x: torch.Tensor) -> torch.Tensor:
    """A float tensor of ``x``'s shape, made from ``x`` (so the call reads it). Not ``_float(x)``: torch.export
    records a second ``dequantize`` of one quantized tensor as reading the first one's result, which ties the
    stand-ins of two modules together (torch 2.13)."""
    return torch.zeros_like(x, dtype=torch.float32)


def _requantized(value: torch.Tensor, like: torch.Tensor | torch.dtype) -> torch.Tensor:
    dtype = like if isinstance(like, torch.dtype) else like.dtype
    return torch.quantize_per_tensor(value, 1.0, 0, dtype)


def _stand_in(module: nn.Module) -> Callable[..., Any] | None:
    """The forward a module of :data:`INT8` is traced as (shape and dtype of its output; see the module docstring),
    or None where its own forward traces."""
    cls = type(module)
    if cls in _CONVS:
        conv = (F.conv1d, F.conv2d, F.conv3d)[_CONVS[cls] - 1]
        shape = (module.out_channels, module.in_channels // module.groups, *module.kernel_size)
        stride, padding, dilation, groups = module.stride, module.padding, module.dilation, module.groups

        def conv_like(x: torch.Tensor) -> torch.Tensor:
            out = conv(_float(x), torch.zeros(shape), None, stride, padding, dilation, groups)
            return _requantized(out, torch.quint8)

        return conv_like
    if cls in _LINEARS:
        weight_shape = (module.out_features, module.in_features)

        def linear_like(x: torch.Tensor) -> torch.Tensor:
            return _requantized(F.linear(_float(x), torch.zeros(weight_shape)), torch.quint8)

        return linear_like
    if cls in _ELEMENTWISE:
        return lambda x: _requantized(_float(x), x)
    if cls is nnq.DeQuantize:
        return _float
    if cls is nnq.Quantize:
        dtype = module.dtype
        return lambda x: _requantized(x, dtype)
    return None


#: A ``QFunctional``'s methods as traced (the float op on float tensors of the inputs' shapes, quantized like the
#: first).
QFUNCTIONAL_STAND_INS: dict[str, Callable[..., Any]] = {
    "add": lambda self, x, y: _requantized(_float(x) + _float(y), x),
    "add_relu": lambda self, x, y: _requantized(torch.relu(_float(x) + _float(y)), x),
    "mul": lambda self, x, y: _requantized(_float(x) * _float(y), x),
    "add_scalar": lambda self, x, y: _requantized(_float(x) + y, x),
    "mul_scalar": lambda self, x, y: _requantized(_float(x) * y, x),
    "cat": lambda self, x, dim=0: _requantized(torch.cat([_float(t) for t in x], dim), x[0]),
    "matmul": lambda self, x, y: _requantized(_float(x) @ _float(y), x),
}


#: Instance flag of a ``QFunctional`` while it is traced: its method calls run :data:`QFUNCTIONAL_STAND_INS`.
TRACING = "_torch2ir_int8_tracing"


@contextlib.contextmanager
def int8_stand_ins(model: nn.Module, is_leaf: Callable[[nn.Module], bool]) -> Iterator[None]:
    """While exporting ``model``: every int8 leaf of :data:`INT8` whose forward cannot be traced is traced as its
    stand-in (an instance attribute ``forward``, removed after), and the packed parameters of int8 modules
    (TorchScript objects, which the stand-ins never read) are taken off them."""
    patched: list[nn.Module] = []
    hidden: list[tuple[nn.Module, str, Any]] = []
    try:
        for module in model.modules():
            if type(module) not in INT8:
                continue
            for name, value in list(vars(module).items()):  # export would make them fake objects, and cannot
                if isinstance(value, torch.ScriptObject):
                    hidden.append((module, name, vars(module).pop(name)))
            if "forward" not in vars(module) and is_leaf(module):
                if isinstance(module, nnq.QFunctional):  # its methods (torch2ir.frontend.functional_calls)
                    vars(module)[TRACING] = True
                    patched.append(module)
                    continue
                stand_in = _stand_in(module)
                if stand_in is not None:
                    module.forward = stand_in
                    patched.append(module)
        yield
    finally:
        for module in patched:
            vars(module).pop("forward", None)
            vars(module).pop(TRACING, None)
        for module, name, value in hidden:
            vars(module)[name] = value


def has_int8(model: nn.Module) -> bool:
    """True when ``model`` holds a module of :data:`INT8` (its trace holds stand-ins)."""
    return any(type(m) in INT8 for m in model.modules())


__all__ = ["INT8", "PACKED", "QFUNCTIONAL_STAND_INS", "TRACING", "has_int8", "int8_modules", "int8_stand_ins",
           "packed_state", "refuse_int8"]
