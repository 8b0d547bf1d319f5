"""Opaque leaves that own their subtree: brevitas layers, made again by their own constructor.

A brevitas layer (``QuantConv2d``, ``QuantReLU``, ...) is built by its constructor from injector classes: each
quantizer proxy below it (``weight_quant``, ``input_quant``, ``act_quant``) keeps its injector as
``quant_injector`` and the modules the injector made (scaling, rounding, clamping). None of those is a value an IR
can hold, but the layer's constructor makes them all again from its arguments. When such a layer is an opaque leaf
(its forward does not trace: brevitas' ``int_torch_handler`` branches on a zero point's data), it is recorded by
:func:`owning_data` as

- ``init``: its constructor arguments, read from its attributes of the same names (plain values), from the
  injector of its child of that name (an injector record, :mod:`common.injectors`), and ``bias`` as whether it has
  one;
- ``owns: true``: every module below it is an ``"owned"`` implementation (:func:`owned_data`: its class and plain
  attributes), which a rebuild takes from the constructor's result instead of building it.

The record is checked before it is used: the layer is constructed again, on the CPU and with the random state
restored after, from what was recorded, and the result must have the same modules at the same paths, of the same
classes, with the same parameters and buffers (names, shapes, dtypes), the same injectors (compared as records),
and every other attribute of the same type (a module reference pointing at the same path; a memo of the last call,
named ``_cached_...``, may be unset). Anything else is refused naming the module and the attribute: the rebuild
would differ silently.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn

from common.errors import ConversionError
from common.opaque import check_value
from torch2ir.opaque.attribution import qualified_name
from torch2ir.opaque.injectors import InjectorError, encode_injector, is_injector, live_injector

#: Attributes named so hold what the last call left (brevitas' ``_cached_act``, ``_cached_bias``), not configuration:
#: a freshly constructed layer has ``None`` there until it is called.
_CACHE_PREFIX = "_cached_"

#: Constructor parameters never recorded: the parameters' dtypes and devices are compared instead.
_SKIPPED = frozenset({"device", "dtype"})


def own_attributes(module: nn.Module) -> dict[str, Any]:
    """The module's own instance attributes (not ``nn.Module``'s bookkeeping, not a stand-in ``forward``)."""
    from torch2ir.opaque.leaves import own_attributes as own

    return own(module)


def holds_injectors(module: nn.Module) -> bool:
    """Whether a module at or below ``module`` keeps an injector class as an attribute (a brevitas layer)."""
    return any(is_injector(value) for m in module.modules() for value in vars(m).values())


def owns_subtree(module: nn.Module, path: str) -> bool:
    """Whether ``module`` is kept as an opaque leaf that owns its subtree: something at or below it keeps an
    injector, and its constructor makes it again (:func:`owning_data` succeeds). A module that keeps an injector
    itself but cannot be constructed again is refused (:class:`ConversionError`); one whose injectors are all below
    it (a residual block of brevitas layers) is not owning: its brevitas layers may own theirs."""
    if not holds_injectors(module):
        return False
    try:
        owning_data(module, path)
    except ConversionError:
        if any(is_injector(value) for value in vars(module).values()):
            raise
        return False
    return True


def _refuse(module: nn.Module, path: str, what: str) -> ConversionError:
    return ConversionError(
        f"the opaque leaf {path or '(root)'} ({qualified_name(module)}) cannot be constructed again from what an IR "
        f"records: {what}", implementation=path or "root",
        hint="its constructor must make the whole layer again from plain arguments and the injectors of its "
        "quantizers; register a builder for its class (Ir2Torch.register_opaque) or keep it out of opaque=")


def owned_data(module: nn.Module) -> dict[str, Any]:
    """The data of an ``"owned"`` implementation: the module's class and its own plain attributes."""
    attributes = {k: v for k, v in own_attributes(module).items() if check_value(v) is None}
    return {"class": qualified_name(module), "attributes": attributes}


def owning_data(module: nn.Module, path: str) -> dict[str, Any]:
    """The data of an opaque leaf that owns its subtree (see the module docstring).

    Raises:
        ConversionError: a constructor parameter no attribute or child holds, a value or injector an IR cannot
            record, or a construction that does not give the same layer, naming it.
    """
    cls = type(module)
    try:
        parameters = list(inspect.signature(cls.__init__).parameters.items())[1:]
    except (TypeError, ValueError):
        raise _refuse(module, path, "its class's __init__ has no signature") from None
    init: dict[str, Any] = {}
    live: dict[str, Any] = {}
    attributes = vars(module)
    for name, param in parameters:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD) or name in _SKIPPED:
            continue
        child = module._modules.get(name)
        injector = vars(child).get("quant_injector") if child is not None else attributes.get(name)
        try:
            if is_injector(injector):
                init[name], live[name] = encode_injector(injector), live_injector(injector)
                continue
        except InjectorError as exc:
            raise _refuse(module, path, f"the injector of {name!r}: {exc}") from None
        if name == "bias" and isinstance(param.default, bool):
            init[name] = live[name] = module._parameters.get("bias") is not None
        elif name in attributes and check_value(attributes[name]) is None:
            init[name] = live[name] = attributes[name]
        elif param.default is inspect.Parameter.empty:
            raise _refuse(module, path, f"{cls.__qualname__}.__init__ takes {name!r}, which the module keeps neither "
                                        "as a plain attribute nor as a quantizer's injector")
    with torch.random.fork_rng(devices=[]):
        try:
            with torch.device("cpu"):
                fresh = cls(**live)
        except Exception as exc:
            raise _refuse(module, path, f"constructing {cls.__qualname__} from its recorded arguments failed "
                                        f"({type(exc).__name__}: {str(exc)[:160]})") from exc
    problem = _difference(fresh, module)
    if problem is not None:
        raise _refuse(module, path, f"constructing it again gives {problem}")
    plain = {k: v for k, v in own_attributes(module).items() if check_value(v) is None}
    return {"class": qualified_name(module), "attributes": plain, "init": init, "owns": True}


def _difference(fresh: nn.Module, module: nn.Module) -> str | None:
    """What differs between a freshly constructed layer and the original (see the module docstring), or None."""
    made = dict(fresh.named_modules(remove_duplicate=False))
    have = dict(module.named_modules(remove_duplicate=False))
    if made.keys() != have.keys():
        extra = sorted(set(made) ^ set(have))
        return f"other modules (first: {extra[0]!r})"
    where_made = {id(m): p for p, m in reversed(list(made.items()))}
    where_have = {id(m): p for p, m in reversed(list(have.items()))}
    if {p: where_made[id(m)] for p, m in made.items()} != {p: where_have[id(m)] for p, m in have.items()}:
        return "modules shared in other places"
    for sub, original in have.items():
        again = made[sub]
        if type(again) is not type(original):
            return f"a {type(again).__qualname__} at {sub or '(itself)'!r} where it has a {type(original).__qualname__}"
        for kind, ours, theirs in (("parameter", original._parameters, again._parameters),
                                   ("buffer", original._buffers, again._buffers)):
            shapes = {k: (tuple(t.shape), t.dtype) for k, t in ours.items() if t is not None}
            if shapes != {k: (tuple(t.shape), t.dtype) for k, t in theirs.items() if t is not None}:
                return f"other {kind}s (names, shapes or dtypes) at {sub or '(itself)'!r}"
        for name, value in own_attributes(original).items():
            if check_value(value) is None or type(value) is torch.Tensor:
                continue  # recorded: plain values set on the rebuilt module, tensors kept as constants
            if name.startswith(_CACHE_PREFIX) and vars(again).get(name) is None:
                continue  # a memo of the last call (brevitas' _cached_act): the next call makes it again
            other = vars(again).get(name)
            if not _same(other, value, where_made, where_have):
                return f"another {name!r} at {sub or '(itself)'!r} ({type(other).__name__} for {type(value).__name__})"
    return None


def _same(again: Any, value: Any, where_made: dict[int, str], where_have: dict[int, str]) -> bool:
    """Whether a freshly constructed attribute stands for the original's: the same injector record, the same class,
    modules at the same paths, containers item by item, other objects of the same type."""
    if is_injector(value):
        try:
            return is_injector(again) and encode_injector(again) == encode_injector(value)
        except InjectorError:
            return False
    if isinstance(value, type):
        return again is value
    if type(again) is not type(value):
        return False
    if isinstance(value, nn.Module):
        return id(value) in where_have and where_made.get(id(again)) == where_have[id(value)]
    if isinstance(value, torch.Tensor):
        return again.shape == value.shape and again.dtype == value.dtype
    if isinstance(value, (list, tuple)):
        return len(again) == len(value) and all(_same(a, b, where_made, where_have)
                                                for a, b in zip(again, value, strict=True))
    if isinstance(value, dict):
        return again.keys() == value.keys() and all(_same(again[k], value[k], where_made, where_have) for k in value)
    if inspect.isroutine(value):
        return getattr(again, "__func__", again) is getattr(value, "__func__", value)
    return True


__all__ = ["holds_injectors", "owned_data", "owning_data", "owns_subtree"]
