"""torch.ao quantization objects as closed, allow-listed data (shared by torch2ir and ir2torch).

Eager quantization-aware training keeps three kinds of state outside tensors:

- the plain attributes of observers and fake-quantize modules (``dtype``, ``qscheme``, ``quant_min``, ...);
- each module's ``qconfig``: a ``QConfig(activation, weight)`` of factories (``FakeQuantize.with_args(observer=
  MovingAverageMinMaxObserver, quant_min=0, ...)``), which ``torch.ao.quantization.convert`` and the QAT
  constructors read;
- the forward (pre-)hook ``prepare`` registers to call a module's ``activation_post_process``.

Here each is data: a class is one of :data:`CLASSES` by its name (never an import path), an attribute or
factory argument is one of :data:`ATTRIBUTES` with a checked type, a ``qscheme`` is its name, and a hook is
one of :data:`HOOKS`. Anything else is refused (:class:`~common.errors.IRFormatError` when read from an IR,
``ValueError`` when a model has it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.ao import quantization as tq
from torch.ao.quantization import observer as _obs
from torch.ao.quantization.qconfig import _add_module_to_qconfig_obs_ctr
from torch.ao.quantization.quantize import _observer_forward_hook, _observer_forward_pre_hook

from .errors import IRFormatError

#: Observer and fake-quantize classes a qconfig or an IR may name, by class name.
CLASSES: dict[str, type] = {cls.__name__: cls for cls in (
    tq.MinMaxObserver, tq.MovingAverageMinMaxObserver, tq.PerChannelMinMaxObserver,
    tq.MovingAveragePerChannelMinMaxObserver, tq.HistogramObserver, tq.FixedQParamsObserver,
    tq.PlaceholderObserver, tq.NoopObserver, tq.FakeQuantize, tq.FusedMovingAvgObsFakeQuantize,
    tq.FixedQParamsFakeQuantize,
)}

#: Observers of torchao's PT2E (``prepare_pt2e``), which branch on the values they see (``if x_min == -inf``,
#: the histogram's range), so torch.export cannot trace them: ``{qualified class name: IR type}``. They are
#: handled leaves, traced as stand-ins and rebuilt as the real class, named here so that torchao is imported
#: only for an IR or a model that holds one.
PT2E_OBSERVERS: dict[str, str] = {
    f"torchao.quantization.pt2e.observer.{name}": f"pt2e_{name.lower()}" for name in (
        "MinMaxObserver", "MovingAverageMinMaxObserver", "PerChannelMinMaxObserver",
        "MovingAveragePerChannelMinMaxObserver", "HistogramObserver")}
#: torchao's PT2E fake-quantize modules (``prepare_qat_pt2e``), handled alike: rebuilt as the real class, so that
#: ``convert_pt2e`` finds them in a rebuilt QAT model (a graph module standing for one is not an observer to it).
PT2E_OBSERVERS.update({
    f"torchao.quantization.pt2e.fake_quantize.{name}": f"pt2e_{name.lower()}" for name in (
        "FakeQuantize", "FusedMovingAvgObsFakeQuantize")})

_CONV = ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias",
         "padding_mode")
_LINEAR = ("in_features", "out_features", "bias")
_BN = ("num_features", "eps", "momentum")
#: The eager int8 modules an IR carries (``torch.ao.quantization.convert``'s output): ``{IR type: recorded
#: constructor arguments}``; ``scale`` / ``zero_point`` are arguments only where the module's state dict lacks them.
INT8_ARGUMENTS: dict[str, tuple[str, ...]] = {
    "int8_quantize": ("dtype",), "int8_dequantize": (),
    **{f"int8_{kind}{d}d": _CONV for kind in ("conv", "convrelu") for d in (1, 2, 3)},
    "int8_linear": _LINEAR, "int8_linearrelu": _LINEAR, "int8_linear_packed_params": (),
    "int8_hardswish": (), "int8_relu6": ("inplace",), "int8_leakyrelu": ("negative_slope", "inplace"),
    "int8_sigmoid": ("output_scale", "output_zero_point"), "int8_elu": ("scale", "zero_point", "alpha"),
    "int8_softmax": ("dim", "scale", "zero_point"), "int8_dropout": ("p", "inplace"),
    **{f"int8_{kind}{d}d": _BN for kind in ("batchnorm", "bnrelu") for d in (2, 3)},
}

#: ``torch.qscheme`` values by name.
QSCHEMES: dict[str, torch.qscheme] = {str(q).removeprefix("torch."): q for q in (
    torch.per_tensor_affine, torch.per_tensor_symmetric, torch.per_channel_affine,
    torch.per_channel_symmetric, torch.per_channel_affine_float_qparams,
)}

_INT = (int,)
_NUM = (int, float)
#: Attribute / factory-argument names and the plain types their values may have (``None`` where shown).
ATTRIBUTES: dict[str, tuple[type, ...]] = {
    "quant_min": (*_INT, type(None)), "quant_max": (*_INT, type(None)), "reduce_range": (bool,),
    "has_customized_qrange": (bool,), "ch_axis": _INT, "averaging_constant": _NUM, "is_dynamic": (bool,),
    "is_per_channel": (bool,), "is_symmetric_quant": (bool,), "bins": _INT, "dst_nbins": _INT,
    "upsample_rate": _NUM, "eps": (*_NUM, type(None)), "scale": _NUM, "zero_point": _INT,
    "custom_op": (str,), "custom_op_name": (str,), "dtype": (torch.dtype,), "compute_dtype": (torch.dtype, type(None)),
    "qscheme": (torch.qscheme, type(None)),
}

#: The hooks ``torch.ao.quantization.prepare`` registers, by the name an IR records.
HOOKS: dict[str, Callable[..., Any]] = {"forward": _observer_forward_hook, "forward_pre": _observer_forward_pre_hook}


def _bad(message: str, where: str, key: str, hint: str = "re-save the IR from the model") -> IRFormatError:
    return IRFormatError(message, key=key, implementation=where, hint=hint)


def attribute_to_data(name: str, value: Any) -> Any:
    """An attribute value as IR data (a ``qscheme`` becomes its name).

    Raises:
        ValueError: ``name`` is not one of :data:`ATTRIBUTES` or the value's type does not fit it.
    """
    kinds = ATTRIBUTES.get(name)
    if kinds is None or not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ValueError(f"quantization attribute {name}={value!r} is not one torch2ir can record "
                         f"(known: {', '.join(sorted(ATTRIBUTES))})")
    if isinstance(value, torch.qscheme):
        return {"qscheme": str(value).removeprefix("torch.")}
    return value


def attribute_from_data(name: str, value: Any, where: str) -> Any:
    """The attribute value recorded as ``value`` (see :func:`attribute_to_data`), checked.

    Raises:
        IRFormatError: an unknown name, an unknown qscheme, or a value of the wrong type.
    """
    kinds = ATTRIBUTES.get(name)
    if kinds is None:
        raise _bad(f"unknown quantization attribute {name!r}", where, name,
                   f"the attributes an IR may set are {', '.join(sorted(ATTRIBUTES))}")
    if isinstance(value, Mapping) and set(value) == {"qscheme"} and torch.qscheme in kinds:
        scheme = QSCHEMES.get(value["qscheme"]) if isinstance(value["qscheme"], str) else None
        if scheme is None:
            raise _bad(f"unknown qscheme {value['qscheme']!r} for {name!r}", where, name,
                       f"one of {', '.join(QSCHEMES)}")
        return scheme
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise _bad(f"quantization attribute {name!r} has the value {value!r} of type {type(value).__name__}",
                   where, name, f"expected {' or '.join(k.__name__ for k in kinds)}")
    return value


def _module_device(factory: Any) -> bool:
    """True when the factory's only callable argument is the ``factory_kwargs`` that ``prepare`` adds to put
    observers on their module's device (``torch.ao.quantization.qconfig._add_module_to_qconfig_obs_ctr``)."""
    fn = factory.callable_args.get("factory_kwargs") if isinstance(factory, _obs._PartialWrapper) else None
    return set(getattr(factory, "callable_args", {})) == {"factory_kwargs"} and getattr(fn, "__qualname__", "") == \
        "_add_module_to_qconfig_obs_ctr.<locals>.get_factory_kwargs_based_on_module_device"


def factory_to_data(factory: Any) -> dict[str, Any]:
    """A qconfig factory (a class of :data:`CLASSES` or its ``with_args(...)``) as ``{"class", "kwargs"}``.

    Raises:
        ValueError: a class outside :data:`CLASSES`, positional or callable arguments, or an unknown kwarg.
    """
    kwargs: dict[str, Any] = {}
    while isinstance(factory, _obs._PartialWrapper):
        if (factory.callable_args and not _module_device(factory)) or factory.p.args:
            raise ValueError(f"qconfig factory {factory!r} has positional or callable arguments")
        kwargs = {**factory.p.keywords, **kwargs}
        factory = factory.p.func
    name = getattr(factory, "__name__", None)
    if not isinstance(factory, type) or CLASSES.get(name) is not factory:
        raise ValueError(f"qconfig factory class {factory!r} is none of {', '.join(CLASSES)}")
    data: dict[str, Any] = {}
    for key, value in kwargs.items():
        data[key] = factory_to_data(value) if key == "observer" else attribute_to_data(key, value)
    return {"class": name, "kwargs": data}


def factory_from_data(data: Any, where: str, key: str, *, depth: int = 0) -> Any:
    """The factory ``data`` describes: ``CLASSES[name].with_args(**kwargs)`` (a bare class for a nested
    ``observer`` without kwargs).

    Raises:
        IRFormatError: not a ``{"class", "kwargs"}`` mapping of a known class and known, well-typed kwargs.
    """
    if not isinstance(data, Mapping) or set(data) != {"class", "kwargs"} or not isinstance(data["kwargs"], Mapping):
        raise _bad(f"qconfig entry {key!r} is not {{'class': name, 'kwargs': {{...}}}}", where, key)
    cls = CLASSES.get(data["class"]) if isinstance(data["class"], str) else None
    if cls is None:
        raise _bad(f"qconfig entry {key!r} names the class {data['class']!r}, none of the allowed ones", where, key,
                   f"allowed: {', '.join(CLASSES)}")
    kwargs = {}
    for name, value in data["kwargs"].items():
        if name == "observer" and depth == 0:
            kwargs[name] = factory_from_data(value, where, f"{key}.observer", depth=1)
        else:
            kwargs[name] = attribute_from_data(name, value, where)
    if depth and not kwargs:
        return cls
    return cls.with_args(**kwargs)


def qconfig_to_data(qconfig: Any) -> dict[str, Any]:
    """A ``QConfig`` as ``{"activation": factory, "weight": factory}`` data.

    Raises:
        ValueError: not a ``QConfig`` or a factory :func:`factory_to_data` refuses.
    """
    if type(qconfig) is not tq.QConfig:
        raise ValueError(f"qconfig {qconfig!r} is not a torch.ao.quantization.QConfig")
    data = {"activation": factory_to_data(qconfig.activation), "weight": factory_to_data(qconfig.weight)}
    if _module_device(qconfig.activation) or _module_device(qconfig.weight):
        data["module_device"] = True
    return data


def qconfig_from_data(data: Any, where: str, module: torch.nn.Module | None = None) -> tq.QConfig:
    """The ``QConfig`` recorded as ``data``; with ``"module_device": true`` and a ``module``, its factories put
    observers on that module's device, as ``prepare`` makes them.

    Raises:
        IRFormatError: ``data`` is not ``{"activation", "weight"[, "module_device": true]}`` of valid factories.
    """
    if not isinstance(data, Mapping) or not {"activation", "weight"} <= set(data) <= \
            {"activation", "weight", "module_device"} or data.get("module_device", True) is not True:
        raise _bad("meta.qconfig is not {'activation': ..., 'weight': ...[, 'module_device': true]}", where, "qconfig")
    qconfig = tq.QConfig(activation=factory_from_data(data["activation"], where, "qconfig.activation"),
                         weight=factory_from_data(data["weight"], where, "qconfig.weight"))
    if data.get("module_device") and module is not None:
        qconfig = _add_module_to_qconfig_obs_ctr(qconfig, module)
    return qconfig


def hook_to_data(module: torch.nn.Module) -> str | None:
    """The name (in :data:`HOOKS`) of the observer hook ``prepare`` registered on ``module``, if that is its only
    forward (pre-)hook and it has an ``activation_post_process``; else None."""
    hooks = [*module._forward_pre_hooks.values(), *module._forward_hooks.values()]
    if len(hooks) != 1 or "activation_post_process" not in module._modules:
        return None
    return next((name for name, fn in HOOKS.items() if hooks[0] is fn), None)


def register_hook(module: torch.nn.Module, name: Any, where: str) -> None:
    """Register the observer hook recorded as ``name`` on ``module`` (as ``prepare`` does).

    Raises:
        IRFormatError: an unknown hook name, or a module without an ``activation_post_process``.
    """
    if not isinstance(name, str) or name not in HOOKS:
        raise _bad(f"unknown observer hook {name!r} in meta.observer_hook", where, "observer_hook",
                   f"one of {', '.join(HOOKS)}")
    if "activation_post_process" not in module._modules:
        raise _bad("meta.observer_hook is set but the module has no activation_post_process", where, "observer_hook")
    if name == "forward_pre":
        module.register_forward_pre_hook(HOOKS[name], prepend=True)
    else:
        module.register_forward_hook(HOOKS[name], prepend=True)
