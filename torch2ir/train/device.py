"""Where the eager train-mode passes run (:func:`torch2ir.train.record.record_train_ops`): on ``meta`` copies, or
on CPU copies of the model's own values when that is cheaper.

A pass on ``meta`` allocates and computes nothing, but every ATen op goes through its meta kernel, and many of
those are Python decompositions (``layer_norm``, ``addmm``, ``gelu``, ``upsample_bicubic2d``): on a small model the
pass costs 10 to 30 % of an export, where the same forward on CPU costs a few milliseconds (YOLOS-tiny: 74 ms on
meta, 1.3 ms on CPU). The work of the forward is read from the eval export's graph just made (output sizes and
the multiply-adds of matrix products, convolutions and attention), and the pass runs on CPU copies only when its
estimated time there is below the meta pass's, the copies are small, and every tensor is a plain CPU tensor.
The record does not depend on the choice: on CPU, every read of a tensor's values into Python (``if x.sum() > 0``,
``.item()``, ``.tolist()``) and every op whose output size depends on values fails where it fails on meta
(:func:`guarded_call`), so Python control flow never follows the values of one example; and a pass that fails on
CPU runs again on meta.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from common.ste_ops import NAMESPACE as STE_NAMESPACE

#: conservative single-core rates on CPU, and what one op of the export's graph costs in a pass on meta, the
#: module calls and Python around it included (a lower bound: measured 270 us for ConvNeXt's, 800 us for YOLOS's)
FLOPS_PER_S = 2e9
ELEMENTS_PER_S = 2e8
BYTES_PER_S = 2e9
META_OP_S = 100e-6
#: the CPU copies (state, and the activations a pass keeps alive) stay below this
MAX_BYTES = 256 * 2**20

_MATMULS = {"mm": 0, "bmm": 0, "matmul": 0, "linear": 0, "addmm": 1, "baddbmm": 1, "addbmm": 1}
_ATTENTION = {"scaled_dot_product_attention", "_scaled_dot_product_flash_attention_for_cpu",
              "_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math"}


def pass_device(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, graph: fx.Graph) -> str:
    """``"cpu"`` when the train-mode passes over ``model(*args, **kwargs)`` cost less on CPU copies than on meta
    (``graph``: its eval export's graph, whose values carry the sizes), else ``"meta"``."""
    cost = _cpu_cost(model, args, kwargs, graph)
    return "cpu" if cost is not None and cost[0] < cost[1] * META_OP_S else "meta"


def cpu_possible(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, graph: fx.Graph) -> bool:
    """Whether a pass may run on CPU copies at all, whatever it costs: every tensor a plain CPU one, every op an
    ATen one, the copies and activations under :data:`MAX_BYTES`."""
    return _cpu_cost(model, args, kwargs, graph) is not None


def _cpu_cost(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, graph: fx.Graph
              ) -> tuple[float, int] | None:
    """``(estimated seconds of a pass on CPU copies, ops in the graph)``, or ``None`` when a pass may not run
    there (see :func:`cpu_possible`)."""
    state = {id(t): t for m in model.modules()  # what the pass copies: parameters, buffers, tensor attributes
             for t in (*m._parameters.values(), *m._buffers.values(), *vars(m).values())
             if isinstance(t, torch.Tensor)}
    inputs = [t for t in pytree.tree_leaves((args, dict(kwargs or {}))) if isinstance(t, torch.Tensor)]
    if not all(_plain_cpu(t) for t in (*state.values(), *inputs)):
        return None
    work = graph_work(graph)
    if work is None:
        return None
    flops, elements, ops = work
    state_bytes = sum(t.numel() * t.element_size() for t in state.values())
    if state_bytes > MAX_BYTES or elements * 4 > MAX_BYTES:
        return None
    return state_bytes / BYTES_PER_S + flops / FLOPS_PER_S + elements / ELEMENTS_PER_S, ops


def _plain_cpu(t: torch.Tensor) -> bool:
    return (type(t) in (torch.Tensor, nn.Parameter) and t.device.type == "cpu" and t.layout == torch.strided
            and not t.is_quantized)


def graph_work(graph: fx.Graph) -> tuple[float, int, int] | None:
    """``(flops, output elements, ops)`` of the ATen calls in ``graph`` (from each node's ``meta["val"]``), the
    bodies of its higher-order ops (``torch.no_grad()`` regions) included; ``None`` when a size is symbolic or
    missing, or an op is not an ATen one (a custom op's CPU kernel may cost anything, or do more than compute:
    the pass runs its meta kernel instead) nor one of :mod:`common.ste_ops` (elementwise ATen ops)."""
    flops = 0.0
    elements = 0
    ops = 0
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        ops += 1
        target = node.target
        if isinstance(target, torch._ops.HigherOrderOperator):
            bodies = [getattr(graph.owning_module, a.target, None) for a in node.args
                      if isinstance(a, fx.Node) and a.op == "get_attr"]
            for body in bodies:
                inner = graph_work(body.graph) if isinstance(body, fx.GraphModule) else None
                if inner is None:
                    return None
                flops, elements, ops = flops + inner[0], elements + inner[1], ops + inner[2]
        elif isinstance(target, torch._ops.OpOverload):
            if target.namespace not in ("aten", STE_NAMESPACE):  # brevitas' estimators: elementwise ATen ops
                return None
        elif getattr(target, "__module__", None) != "_operator":  # getitem, and arithmetic on sizes
            return None
        val = node.meta.get("val")
        outputs = ([val] if isinstance(val, torch.Tensor) else
                   [v for v in pytree.tree_leaves(val) if isinstance(v, torch.Tensor)] if val is not None else [])
        sizes = [_numel(t.shape) for t in outputs]
        if any(s is None for s in sizes):
            return None
        elements += sum(sizes)
        name = getattr(getattr(node.target, "_overloadpacket", None), "__name__", "")
        inputs = [a.meta.get("val") if isinstance(a, fx.Node) else None for a in node.args]
        extra = _flops(name, inputs, outputs, node.args)
        if extra is None:
            return None
        flops += extra
    return flops, elements, ops


def _numel(shape: Iterable[Any]) -> int | None:
    sizes = list(shape)
    return math.prod(sizes) if all(type(s) is int for s in sizes) else None


def _flops(name: str, inputs: list[Any], outputs: list[torch.Tensor], args: tuple) -> float | None:
    """Multiply-adds (times two) of a matrix product, convolution, attention or einsum; 0 for other ops."""
    if not outputs:
        return 0.0
    out = _numel(outputs[0].shape) or 0
    if name in _MATMULS:
        first = inputs[_MATMULS[name]] if len(inputs) > _MATMULS[name] else None
        if not isinstance(first, torch.Tensor) or not first.shape:
            return None
        return 2.0 * out * _size(first.shape[-1])
    if name in ("convolution", "conv1d", "conv2d", "conv3d", "_convolution", "conv_transpose1d",
                "conv_transpose2d", "conv_transpose3d"):
        weight = inputs[1] if len(inputs) > 1 else None
        if not isinstance(weight, torch.Tensor):
            return None
        per = _numel(weight.shape[1:])
        transposed = "transpose" in name or (name in ("convolution", "_convolution") and len(args) > 6
                                             and args[6] is True)
        if per is None:
            return None
        if transposed:  # every input element meets the whole kernel of each output channel
            source = inputs[0]
            if not isinstance(source, torch.Tensor) or _numel(source.shape) is None:
                return None
            return 2.0 * _numel(source.shape) * per
        return 2.0 * out * per
    if name in _ATTENTION:
        query, key = [*inputs, None, None][:2]
        if not isinstance(query, torch.Tensor) or not isinstance(key, torch.Tensor):
            return None
        return 4.0 * (_numel(query.shape) or 0) * _size(key.shape[-2])
    if name == "einsum":
        return _einsum_flops(args, inputs)
    return 0.0


def _size(value: Any) -> int:
    return value if type(value) is int else 0


def _einsum_flops(args: tuple, inputs: list[Any]) -> float | None:
    """Two times the product of every index's size in ``torch.einsum(equation, operands)``."""
    equation, operands = (*args, None, None)[:2]
    if not isinstance(equation, str) or not isinstance(operands, (list, tuple)):
        return None
    values = [o.meta.get("val") if isinstance(o, fx.Node) else None for o in operands]
    terms = equation.split("->")[0].split(",")
    if len(terms) != len(values) or "." in equation:
        return None
    sizes: dict[str, int] = {}
    for term, value in zip(terms, values):
        if not isinstance(value, torch.Tensor) or len(term.strip()) != value.dim():
            return None
        for letter, size in zip(term.strip(), value.shape):
            if type(size) is not int:
                return None
            sizes[letter] = size
    return 2.0 * math.prod(sizes.values())


_VALUE_TAGS = frozenset({torch.Tag.data_dependent_output, torch.Tag.dynamic_output_shape})
#: torch functions (as :func:`torch2ir.train.record` names them) that read values into Python: refused at once
VALUE_READERS = frozenset(f"TensorBase.{m}" for m in (
    "tolist", "numpy", "item", "__bool__", "__int__", "__float__", "__index__", "__complex__"))
#: the most frequent torch functions of the corpus's passes, none of which reads values or makes a size of them:
#: called as they are (through the dispatch check below, a pass costs half as much again)
VALUE_FREE = frozenset({
    "getset_descriptor.__get__", "torch._C._nn.linear", "torch._C._nn.gelu", "torch.nn.functional.dropout",
    "torch.nn.functional.layer_norm", "torch.nn.functional.softmax", "torch.nn.functional.silu",
    "torch.nn.functional.batch_norm", "torch.nn.functional.embedding", "torch.nn.functional.relu",
    "torch.nn.functional.scaled_dot_product_attention", "torch._C._nn.scaled_dot_product_attention",
    *(f"torch._VariableFunctionsClass.{f}" for f in (
        "matmul", "arange", "conv1d", "conv2d", "rsqrt", "cat", "stack", "zeros", "ones", "addmm", "bmm", "tanh",
        "sigmoid", "exp", "softmax", "dropout")),
    *(f"TensorBase.{m}" for m in (
        "transpose", "view", "add", "add_", "mul", "mul_", "contiguous", "to", "reshape", "size", "dim", "softmax",
        "unsqueeze", "squeeze", "permute", "expand", "mean", "pow", "div", "flatten", "neg", "float", "sub",
        "masked_fill", "sum", "type_as", "dtype", "__setitem__", "new_ones", "new_zeros", "chunk", "sqrt", "exp")),
})


class ValueRead(RuntimeError):
    """A pass on CPU copies read tensor values, which a pass on meta cannot."""


def guarded_call(func: Any, name: str, args: tuple, kwargs: Mapping[str, Any]) -> Any:
    """``func(*args, **kwargs)`` in a pass on CPU copies (``name``: its name), failing with :class:`ValueRead` where
    the same call on meta tensors fails for want of values: ``bool(t)``, ``t.item()``, ``t.tolist()`` at once;
    ``nonzero``, indexing by a mask, ``torch.equal`` and the like when the ATen op that reads values or sizes its
    result by them fails on meta (:class:`_FailsAsOnMeta`). Functions known to read no value run as they are."""
    if name in VALUE_READERS:
        raise ValueRead(f"{name} reads tensor values")
    if name in VALUE_FREE or (name == "TensorBase.__getitem__" and not _masks(args)):
        return func(*args, **kwargs)
    with _FailsAsOnMeta():
        return func(*args, **kwargs)


def _masks(args: tuple) -> bool:
    """Whether an indexing call's index holds a boolean (or byte) tensor, whose selection is sized by values."""
    leaves = pytree.tree_leaves(args[1:])
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8) for t in leaves)


class _FailsAsOnMeta(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Mapping[str, Any] | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        if not _VALUE_TAGS.isdisjoint(func.tags):  # a value read or a value-dependent size: does meta manage it?
            on_meta = pytree.tree_map_only(torch.Tensor, lambda t: t.to("meta"), (args, kwargs))
            try:
                func(*on_meta[0], **on_meta[1])
            except Exception as exc:
                raise ValueRead(f"{func} needs tensor values") from exc
        return func(*args, **kwargs)


__all__ = ["VALUE_FREE", "VALUE_READERS", "ValueRead", "cpu_possible", "graph_work", "guarded_call", "pass_device"]
