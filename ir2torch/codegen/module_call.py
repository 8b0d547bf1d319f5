"""The call of a rebuilt module whose ``forward`` is generated code.

:func:`report_errors` replaces the module class's call: it runs the call check (a signature or input guard
check) first, the per-call graph a caller selected (:func:`select_variant`), the folded forward when one holds
(:mod:`ir2torch.codegen.fold_cache`), and makes a failure of the generated code raise :class:`ExecutionError`, naming
the implementation and node (an IR that loads but does not run), instead of an exception from deep inside.
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from typing import Any

import torch
from torch import fx, nn
from torch.nn.modules import module as _module

from common.errors import ExecutionError, IRError, without_values
from common.names import GENERATED_ATTRS
from ir2torch.codegen.fold_cache import FOLD_ATTR
from ir2torch.run_safety.forward_budget import BUDGET_ATTR, skip_budget
from ir2torch.run_safety.forward_budget import LOCAL as _BUDGET_LOCAL
from ir2torch.run_safety.node_checks import MODULE_CHECKS, call_data_checked, module_needs_checks

Check = Callable[[nn.Module, tuple, dict], None]


#: Instance attribute through which a caller picks the per-call graph of its next call of a module.
VARIANT_ATTR = GENERATED_ATTRS["variant"]


def select_variant(module: nn.Module, variant: int) -> None:
    """Make ``module``'s next call run its per-call graph ``variant`` (called by the parent's generated code
    right before the call; a module without variants, such as a user's replacement, ignores it)."""
    module.__dict__[VARIANT_ATTR] = variant



def report_errors(gm: fx.GraphModule, implementation: str, check: Check | None = None,
                  variants: list[Callable[..., Any]] | None = None) -> fx.GraphModule:
    """Make failures of ``gm``'s generated code raise :class:`ExecutionError` naming ``implementation``
    and the node (instead of an exception from deep inside generated code); run ``check(gm, args, kwargs)``
    first on every call (the input guard's structure check), without a forward hook; run the per-call graph
    a caller selected (:func:`select_variant`) among ``variants``. Deep copies keep all three.
    """
    variants = list(variants or [])
    _install(gm, implementation, check, variants)
    gm._register_deepcopy_hook(functools.partial(_install, implementation=implementation, check=check,
                                                 variants=variants))
    return gm


def _install(gm: fx.GraphModule, implementation: str, check: Check | None,
             variants: list[Callable[..., Any]]) -> None:
    cls = type(gm)
    cls._wrapped_call = _ReportingCall(cls, implementation, check, variants)
    cls.__call__ = cls._wrapped_call.method()  # one frame fewer than fx's ``call_wrapped`` (see its docstring)


#: ``nn.Module.__call__`` as torch defines it (tracers such as ``torch.fx.symbolic_trace`` patch it).
_MODULE_CALL = nn.Module._wrapped_call_impl  # what __call__ is, also if this is imported while a tracer patches it
_CALL_IMPL = nn.Module._call_impl
_jit_tracing = torch._C._get_tracing_state
#: True while dynamo traces (torch.compile, strict torch.export): dynamo evaluates the call as ``True``; a plain
#: call is one frame returning ``False`` (``torch.compiler.is_compiling`` is two). Non-strict export and fx tracing
#: patch ``nn.Module.__call__``, which the calls below check.
_compiling = torch.compiler.is_dynamo_compiling


#: torch's containers: classes whose children are found in ``_modules`` exactly as ``getattr`` finds them.
_CONTAINERS = (nn.ModuleList, nn.Sequential, nn.ModuleDict)


def child(parent: Any, name: str) -> Any:
    """``getattr(parent, name)`` for a later step of a submodule path in generated code (``layers.0``): read from
    ``_modules`` when ``parent`` is exactly one of torch's containers, whose lookup of a child ends there (0.03 us
    instead of ``nn.Module.__getattr__``'s 0.55 us); ``getattr`` for anything else, such as a user's module."""
    if type(parent) in _CONTAINERS:
        modules = parent._modules
        if name in modules:
            return modules[name]
    return getattr(parent, name)


def call_module(obj: nn.Module, /, *args: Any, **kwargs: Any) -> Any:
    """How generated code calls a submodule (``_ir_call_module(self.linear, x)``): what ``obj(*args, **kwargs)``
    does, without its two frames when they would only call ``forward``.

    That is the case when ``obj``'s class keeps ``nn.Module``'s call (no tracer patched it, the class overrides
    neither ``__call__`` nor ``_call_impl``), ``obj`` has no ``compile()`` result, and no hook (the module's or a
    global one) or ``torch.jit.trace`` would make ``_call_impl`` do more; then ``forward`` is called as
    ``_call_impl`` calls it. Otherwise the class's own call runs (a generated module's call, a user's class with
    its own ``__call__``, hooks...). While torch.compile or torch.export traces, the call is ``obj(...)`` itself:
    they record module scopes (``nn_module_stack``) at such calls. A user's replacement module or a hook added
    after the rebuild is seen on the next call: nothing is decided ahead of time.
    """
    if _compiling():
        return obj(*args, **kwargs)
    cls = type(obj)
    call = cls.__call__
    needs = MODULE_CHECKS.get(cls)  # read once per class (:func:`module_needs_checks`)
    if needs is None:
        needs = module_needs_checks(cls)
    if needs:  # an embedding, a loss, an opaque leaf: what it dispatches is checked
        return call_data_checked(call, obj, *args, **kwargs)
    if call is _MODULE_CALL and cls._call_impl is _CALL_IMPL and obj._compiled_call_impl is None and not (
            obj._forward_hooks or obj._forward_pre_hooks or obj._backward_hooks or obj._backward_pre_hooks
            or _module._global_forward_hooks or _module._global_forward_pre_hooks
            or _module._global_backward_hooks or _module._global_backward_pre_hooks or _jit_tracing()):
        return obj.forward(*args, **kwargs)
    return call(obj, *args, **kwargs)


class _ReportingCall:
    """Replaces fx's per-class call wrapper and reports errors by node (see :meth:`method`)."""

    def __init__(self, cls: type, implementation: str, check: Check | None,
                 variants: list[Callable[..., Any]]) -> None:
        self.cls, self.implementation, self.check, self.variants = cls, implementation, check, variants

    def method(self) -> Callable[..., Any]:
        """This call as a plain function, to be the class's ``__call__``: no ``call_wrapped`` frame, no
        ``nn.Module.__call__`` frame while no tracer patched it, and no ``_call_impl`` frame either while no hook
        (the module's or a global one), no ``torch.jit.trace`` and no torch.compile or torch.export tracing (which
        record module scopes there) would make it do more than call ``forward`` (the same test ``_call_impl``
        makes; with one, ``_call_impl`` runs them). A later ``recompile()`` puts
        fx's ``call_wrapped`` back, which still calls :meth:`__call__`: same behaviour."""
        cls, check, variants, report, call_variant = self.cls, self.check, self.variants, self._report, \
            self._call_variant
        plain = getattr(check, "plain_count", -1)  # a call of this many positional arguments needs no check

        def checked(obj: nn.Module, *args: Any, **kwargs: Any) -> Any:
            """The call once its arguments passed the check (what the forward budget probes, then runs): the same
            steps as below, once more as a function of their own (the plain call keeps them inline)."""
            if variants and obj.__dict__.get(VARIANT_ATTR):
                return call_variant(obj, obj.__dict__.pop(VARIANT_ATTR), args, kwargs)
            if (fold := obj.__dict__.get(FOLD_ATTR)) is not None and fold.ready(obj):
                return fold.call(obj, args, kwargs)
            if nn.Module.__call__ is _MODULE_CALL and obj._compiled_call_impl is None and not _compiling():
                if not (obj._forward_hooks or obj._forward_pre_hooks or obj._backward_hooks
                        or obj._backward_pre_hooks or _module._global_forward_hooks
                        or _module._global_forward_pre_hooks or _module._global_backward_hooks
                        or _module._global_backward_pre_hooks or _jit_tracing()):
                    return obj.forward(*args, **kwargs)
                return obj._call_impl(*args, **kwargs)
            return super(cls, obj).__call__(*args, **kwargs)

        def __call__(obj: nn.Module, *args: Any, **kwargs: Any) -> Any:
            try:
                if check is not None and (kwargs or len(args) != plain):
                    check(obj, args, kwargs)
                if (budget := obj.__dict__.get(BUDGET_ATTR)) is not None and not _BUDGET_LOCAL.depth and \
                        not skip_budget():
                    return budget.call(obj, checked, args, kwargs)  # probed first (ir2torch.run_safety.forward_budget)
                if variants and obj.__dict__.get(VARIANT_ATTR):
                    return call_variant(obj, obj.__dict__.pop(VARIANT_ATTR), args, kwargs)
                if (fold := obj.__dict__.get(FOLD_ATTR)) is not None and fold.ready(obj):
                    return fold.call(obj, args, kwargs)  # constants computed once (ir2torch.codegen.constant_fold)
                if nn.Module.__call__ is _MODULE_CALL and obj._compiled_call_impl is None and not _compiling():
                    if not (obj._forward_hooks or obj._forward_pre_hooks or obj._backward_hooks
                            or obj._backward_pre_hooks or _module._global_forward_hooks
                            or _module._global_forward_pre_hooks or _module._global_backward_hooks
                            or _module._global_backward_pre_hooks or _jit_tracing()):
                        return obj.forward(*args, **kwargs)  # what ``_call_impl`` does without hooks
                    return obj._call_impl(*args, **kwargs)  # what ``nn.Module.__call__`` does, one frame fewer
                return super(cls, obj).__call__(*args, **kwargs)
            except IRError:
                raise
            except Exception as exc:
                error = report(obj, exc)
                if error is exc:
                    raise
                raise error from exc

        return __call__

    def __call__(self, obj: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """fx's ``call_wrapped`` calls this (after a ``recompile()``): the same as :meth:`method`'s function."""
        try:
            if self.check is not None:
                self.check(obj, args, kwargs)
            if (budget := obj.__dict__.get(BUDGET_ATTR)) is not None and not _BUDGET_LOCAL.depth and \
                    not skip_budget():
                return budget.call(obj, self._checked, args, kwargs)
            return self._checked(obj, *args, **kwargs)
        except IRError:
            raise
        except Exception as exc:
            error = self._report(obj, exc)
            if error is exc:
                raise
            raise error from exc

    def _checked(self, obj: nn.Module, *args: Any, **kwargs: Any) -> Any:
        """:meth:`__call__` once the arguments passed the check."""
        if self.variants and obj.__dict__.get(VARIANT_ATTR):
            return self._call_variant(obj, obj.__dict__.pop(VARIANT_ATTR), args, kwargs)
        return super(self.cls, obj).__call__(*args, **kwargs)

    def _report(self, obj: nn.Module, exc: Exception) -> Exception:
        """The :class:`ExecutionError` for ``exc`` raised by ``obj``'s generated code (``exc`` itself under a
        tracer, which uses exceptions of its own)."""
        if torch.compiler.is_exporting() or torch.compiler.is_compiling():
            return exc  # tracers use exceptions of their own; leave them untouched
        text = without_values(str(exc).strip())[:500]  # no tensor values in a message
        message = f"running {_failed_at(obj, exc)} raised {type(exc).__name__}: {text}"
        hint = ("if the inputs are valid, the IR's graph is inconsistent here (the exception's cause has the "
                "full traceback)")
        try:
            return _execution_error(type(exc))(message, implementation=self.implementation, hint=hint)
        except Exception:  # noqa: BLE001 - an exception class whose __init__ wants other arguments
            return ExecutionError(message, implementation=self.implementation, hint=hint)

    def _call_variant(self, obj: nn.Module, variant: int, args: tuple, kwargs: dict) -> Any:
        """One call through ``nn.Module.__call__`` (hooks, tracers' module scopes) running per-call graph
        ``variant``: the instance's ``forward`` is that graph's for the duration of the call."""
        obj.__dict__["forward"] = self.variants[variant - 1].__get__(obj)
        try:
            return super(self.cls, obj).__call__(*args, **kwargs)
        finally:
            obj.__dict__.pop("forward", None)


def _reduce_plain(self: ExecutionError) -> tuple:
    """Pickle as a plain :class:`ExecutionError` (the combined class exists only in this process)."""
    return ExecutionError(self.message, implementation=self.implementation, node=self.node, key=self.key,
                          hint=self.hint).__reduce__()


@functools.cache
def _execution_error(kind: type[BaseException]) -> type[ExecutionError]:
    """:class:`ExecutionError` that is also a ``kind`` (plain ExecutionError where the two cannot be combined)."""
    try:
        return type("ExecutionError", (ExecutionError, kind), {"__module__": ExecutionError.__module__,
                                                              "__reduce__": _reduce_plain})
    except TypeError:  # e.g. OSError's instance layout
        return ExecutionError


def _failed_at(obj: nn.Module, exc: BaseException) -> str:
    """``node 'x' (aten.mm.default)`` for the innermost line of ``obj``'s generated code in ``exc``'s traceback."""
    code = getattr(type(obj).forward, "__code__", None)
    lineno = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if frame.f_code is code:
            lineno = line
    lines = getattr(obj, "_lineno_map", None) or {}
    index = lines.get(lineno - getattr(obj, "_prologue_start", 0)) if lineno is not None else None
    if index is None:
        return "the graph"
    node = list(obj.graph.nodes)[index]
    target = node.meta.get("op_type") or getattr(node.target, "__name__", node.target)
    return f"node {node.meta.get('ir_node', node.name)!r} ({target})"


__all__ = ["VARIANT_ATTR", "Check", "call_module", "child", "report_errors", "select_variant"]
