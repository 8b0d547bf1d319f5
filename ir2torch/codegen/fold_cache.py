"""Run a rebuilt module's folded forward, with its constant values computed once per module (see
:mod:`ir2torch.codegen.constant_fold` for what is folded).

A module with a fold keeps its ordinary ``forward`` (the graph as the IR has it: ``code``, ``print_readable()``,
signature and every tracer see that one) and holds a :class:`FoldState` in its ``__dict__``; the per-class call
wrapper (:mod:`ir2torch.codegen.source`) asks the state whether to run the folded forward instead. The state is a plain
Python object: it is not a parameter, buffer or submodule, so ``state_dict()``, ``named_buffers()``,
``named_parameters()``, ``.to()`` and ``load_state_dict`` never see it, and a deep copy starts with no values.

The folded forward runs only when the plain one would compute exactly the same thing, which is checked on every
call (a handful of C calls): it is bypassed while any ``TorchDispatchMode`` (fake tensors, export's proxies, a
user's op counter) or ``TorchFunctionMode`` (``with torch.device(...)``, ``set_default_device``) is active, under
``torch.compile``/``torch.export``/dynamo, ``torch.jit.trace``, functorch transforms (``vmap``, ``grad``), autocast,
``torch.fx.symbolic_trace`` (which patches ``nn.Module.__call__``), a ``module.compile()``, and once the module's
graph was recompiled. The folded values depend on nothing but literals, so the module's weights, their device and
dtype never change them; what global state could, keys the values: the default dtype (factory ops without a
dtype), inference mode (inference tensors), the thread count (reduction order of floating-point sums) and
deterministic-algorithms mode, and the current values of the lifted constants they are computed from. A new key
recomputes them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module

from common.names import GENERATED_ATTRS

#: Instance attribute holding a module's :class:`FoldState` (names the rebuilder chose: never a string of a file).
FOLD_ATTR = GENERATED_ATTRS["fold"]
#: Instance attribute holding the folded values the folded forward reads (``self._ir_folded[i]``).
VALUES_ATTR = GENERATED_ATTRS["folded"]

_MODULE_CALL = nn.Module._wrapped_call_impl  # what __call__ is, also if this is imported while a tracer patches it
_dispatch_modes = torch._C._len_torch_dispatch_stack
_function_modes = torch._C._is_torch_function_mode_enabled
_jit_tracing = torch._C._get_tracing_state
_functorch = torch._C._functorch.peek_interpreter_stack
_autocast = torch._C._is_any_autocast_enabled
_compiling = torch.compiler.is_compiling
_exporting = torch.compiler.is_exporting


def _foreign_dispatch_modes() -> int:
    """The dispatch modes active but ir2torch's own data checks (``transparent_to_folding``: they only test
    arguments, and the folded forward's ops run through them too)."""
    count = _dispatch_modes()
    return count and sum(1 for i in range(count) if not getattr(torch._C._get_dispatch_stack_at(i),
                                                                 "transparent_to_folding", False))


def plain_call_required() -> bool:
    """Whether something (a tracer, a mode, a transform: see the module docstring) must see the plain forward."""
    # dynamo reads ``is_compiling()`` as True and stops there: nothing after it is traced
    return bool(_compiling() or _exporting() or _foreign_dispatch_modes() or _function_modes()
                or _jit_tracing() is not None or _functorch() is not None or _autocast()
                or nn.Module.__call__ is not _MODULE_CALL)


_default_dtype = torch.get_default_dtype
_inference_mode = torch.is_inference_mode_enabled
_threads = torch.get_num_threads
_deterministic = torch.are_deterministic_algorithms_enabled


def _key() -> tuple[Any, ...]:
    """What global state the folded values depend on (:meth:`FoldState.ready` reads it inline)."""
    return (_default_dtype(), _inference_mode(), _threads(), _deterministic())


class FoldPlan:
    """The compiled halves of one folded graph, shared by every module rebuilt from an identical graph.

    ``constants(module)`` returns the tuple of folded values; ``forward(module, ...)`` is the folded forward.
    """

    def __init__(self, constants: Callable[..., tuple], forward: Callable[..., Any], op_count: int,
                 copied: tuple[int, ...] = (), attrs: tuple[str, ...] = (), skip: Any = None,
                 values: bool = True) -> None:
        self.constants = constants
        self.forward = forward
        self.op_count = op_count
        #: indices of the values the forward hands out as a fresh copy per call (:func:`exact_copy`)
        self.copied = copied
        #: the module's lifted constants (plain tensor attributes) the values are computed from
        self.attrs = attrs
        #: the forward making an all-true attention mask in one op, and when it applies
        #: (:class:`ir2torch.codegen.causal_mask.MaskSkip`), or ``None``
        self.skip = skip
        #: whether the forward reads folded values (``False``: nothing folded, the forward holds only rewrites
        #: such as fast entries; no values to compute, so no key to read at each call)
        self.values = values

    def __deepcopy__(self, memo: dict[int, Any]) -> FoldPlan:
        return self  # compiled code only: shared


class FoldState:
    """One module's fold: its plan, the plain forward it stands in for, and the key of the values it holds."""

    __slots__ = ("key", "off", "plain", "plan")

    def __init__(self, plan: FoldPlan, plain: Callable[..., Any]) -> None:
        self.plan = plan
        self.plain = plain
        self.key: tuple[Any, ...] | None = None
        self.off = False  # a value to hand out as a copy could not be copied exactly: the plain forward runs

    def __deepcopy__(self, memo: dict[int, Any]) -> FoldState:
        return FoldState(self.plan, self.plain)

    def ready(self, obj: nn.Module) -> bool:
        """Whether ``obj``'s next call may run the folded forward; computes the values when their key changed.

        Raises:
            Exception: whatever the folded ops raise (the plain forward would raise it too).
        """
        # plain_call_required() and _key() inline (two frames fewer at each call of a folded module)
        if self.off or _compiling() or _exporting() or (_dispatch_modes() and _foreign_dispatch_modes()) or \
                _function_modes() or _jit_tracing() is not None or _functorch() is not None or _autocast() or \
                nn.Module.__call__ is not _MODULE_CALL or type(obj).forward is not self.plain or \
                obj._compiled_call_impl is not None:
            return False
        if not self.plan.values:
            return True  # nothing folded: the global state no value depends on is not read
        key = (_default_dtype(), _inference_mode(), _threads(), _deterministic())
        if self.plan.attrs:
            held = _held(obj, self.plan.attrs)
            if held is None:
                return False
            key = (*key, held)
        if key != self.key:
            self.key = None
            values = self.plan.constants(obj)
            if not all(exact_copy(values[i]) for i in self.plan.copied):
                self.off = True
                obj.__dict__.pop(VALUES_ATTR, None)
                return False
            obj.__dict__[VALUES_ATTR] = values
            self.key = key
        return True

    def call(self, obj: nn.Module, args: tuple, kwargs: dict[str, Any]) -> Any:
        """``obj(*args, **kwargs)`` running the folded forward (hooks run as for the plain one)."""
        forward = self.plan.forward
        if (skip := self.plan.skip) is not None and skip.applies(args, kwargs):
            forward = skip.forward  # the call's attention mask is all true: made in one op
        if not (obj._forward_hooks or obj._forward_pre_hooks or obj._backward_hooks or obj._backward_pre_hooks
                or _module._global_forward_hooks or _module._global_forward_pre_hooks
                or _module._global_backward_hooks or _module._global_backward_pre_hooks):
            return forward(obj, *args, **kwargs)
        obj.__dict__["forward"] = forward.__get__(obj)
        try:
            return obj._call_impl(*args, **kwargs)
        finally:
            obj.__dict__.pop("forward", None)


#: Most elements of a lifted constant the fold reads (each call compares their values with the ones folded).
MAX_CONSTANT_ELEMENTS = 64


def _held(obj: nn.Module, names: tuple[str, ...]) -> tuple[Any, ...] | None:
    """What ``obj``'s lifted constants hold now (type, dtype, device, shape and values), or ``None`` when one is
    not a small plain tensor (the plain forward then runs). A constant a user changed, by assignment or in
    place (``.data`` writes included), gives another key: the values are computed again from it."""
    held = []
    for name in names:
        value = obj.__dict__.get(name)
        if type(value) is not torch.Tensor or value.numel() > MAX_CONSTANT_ELEMENTS:
            return None
        held.append((value.dtype, value.device, value.shape, value.tolist()))
    return tuple(held)


def exact_copy(value: Any) -> bool:
    """Whether ``value.clone()`` is indistinguishable from computing ``value`` again: a strided tensor that is no
    view, starts its storage and fills it contiguously (a clone keeps such strides; a view's aliasing, a strided
    layout with gaps or overlaps would be lost)."""
    return isinstance(value, torch.Tensor) and value.layout is torch.strided and value._base is None and \
        value.storage_offset() == 0 and value.is_contiguous() and \
        value.untyped_storage().nbytes() == value.numel() * value.element_size()


def install(gm: nn.Module, plan: FoldPlan) -> None:
    """Give ``gm`` (whose forward is installed) a fold running ``plan``; deep copies get a fresh one."""
    gm.__dict__[FOLD_ATTR] = FoldState(plan, type(gm).forward)
    gm._register_deepcopy_hook(functools.partial(_reinstall, plan=plan))  # type: ignore[operator]


def _reinstall(copy: nn.Module, plan: FoldPlan) -> None:
    """Deep-copy hook: the copy's own state (no values yet) for its own forward."""
    copy.__dict__[FOLD_ATTR] = FoldState(plan, type(copy).forward)
    copy.__dict__.pop(VALUES_ATTR, None)


__all__ = ["FOLD_ATTR", "VALUES_ATTR", "FoldPlan", "FoldState", "exact_copy", "install", "plain_call_required"]
