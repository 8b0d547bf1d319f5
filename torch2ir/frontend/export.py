"""The torch.export frontend: trace a model once, with the facts the hierarchy needs.

``torch.export.export(strict=False)`` traces every real model we target, where
``torch.fx.symbolic_trace`` fails on all of them. The trace runs in eval mode (each
module's own ``training`` flag is restored afterwards) and preserves the exact call
signature of every *handled* leaf module that is not inside another handled module, so
that multi-input / multi-output leaves (``MultiheadAttention(q, k, v)``,
``LSTM(x, (h, c))``) are called exactly as the original called them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any
from unittest import mock

import torch
from torch import fx, nn

from common import deferred_checks
from common.caches import register_loaded_caches
from common.errors import ConversionError
from common.module_state import kept_attributes
from torch2ir.frontend import brevitas_branches, custom_backward
from torch2ir.frontend.dropout_identity import keep_input_names
from torch2ir.frontend.logs import torch_logs_to_debug
from torch2ir.frontend.transformers_compiling import eager_answers
from torch2ir.frontend.transformers_experts import traced_experts
from torch2ir.frontend.transformers_masks import eager_skip
from torch2ir.frontend.vmap_regions import unbatch
from torch2ir.opaque.attribution import attribute_failure
from torch2ir.quant.observers import is_observer, untraceable_observer

#: torch.export's warning about RNN modules re-assigning ``_flat_weights`` while traced (harmless).
RNN_WARNING = r"The tensor attributes .*_flat_weights"


@contextlib.contextmanager
def lean_export() -> Iterator[None]:
    """Within the block, ``torch.export`` skips two products the conversion never reads.

    - Graph modules compile lazily: export regenerates a graph module's Python source after each of its passes
      (six times per export); made this way (what ``torch.compile`` does for its own graphs), they are
      ``fx.GraphModule``\\ s that generate their source when it is first read or called.
    - No Python stack trace per node (``torch.fx.config.do_not_emit_stack_traces``): capturing and symbolizing
      one for each of the graph's nodes costs about a tenth of a small model's export, and the IR keeps none.

    Together about a fifth of a small model's export; the graphs, their metadata but ``stack_trace`` and what the
    exported program computes are the same (``tests/torch2ir/test_lean_export.py``). Both settings are
    process-wide and held only for the block: an export another thread runs meanwhile skips them too.
    """
    with contextlib.ExitStack() as stack:
        try:
            from torch.fx._lazy_graph_module import _use_lazy_graph_module
        except ImportError:  # pragma: no cover - a torch without it compiles every graph module eagerly
            pass
        else:
            stack.enter_context(_use_lazy_graph_module(True))
        previous = getattr(fx.config, "do_not_emit_stack_traces", None)
        if previous is not None:
            fx.config.do_not_emit_stack_traces = True
            stack.callback(setattr, fx.config, "do_not_emit_stack_traces", previous)
        yield


@contextlib.contextmanager
def traced_mode(model: nn.Module, training: bool = False) -> Iterator[None]:
    """Put every module in eval (or train) mode, restoring each one's own flag afterwards.

    The flags are set, not switched with ``Module.train``: a model exported by ``torch.export`` (a PT2E
    ``prepare_pt2e`` / ``convert_pt2e`` result) refuses ``train()`` / ``eval()``, and its graph computes what
    it was exported with whatever its flag says, so the trace records what the model really computes.
    """
    flags = [(m, m.training) for m in model.modules()]
    for module, flag in flags:
        if flag is not training:  # a model already in the mode is left untouched (no setattr per module)
            module.training = training
    try:
        yield
    finally:
        for module, flag in flags:
            if module.training is not flag:
                module.training = flag


class _NotAGraphModule:
    """Stands in for ``fx.GraphModule`` in the tracer's "inline it without a module-stack entry" check."""


@contextlib.contextmanager
def graph_module_scopes(model: nn.Module) -> Iterator[None]:
    """Make export's non-strict tracer record module-stack entries for registered ``fx.GraphModule`` children.

    The tracer (``_ModuleStackTracer.call_module`` of torch 2.13) inlines every ``GraphModule`` call without a
    stack entry: it expects graph modules only as bodies of higher-order ops, which are not registered
    submodules. A model rebuilt by ir2torch is made of registered graph modules, and without their entries
    their ops would land in the nearest ancestor's graph: a re-converted model would silently come out flat.
    Unregistered graph modules are still inlined (the tracer finds no path for them and traces through).
    """
    if not any(isinstance(m, fx.GraphModule) for m in model.modules()):
        yield
        return
    from torch.fx.experimental import proxy_tensor

    with mock.patch.object(proxy_tensor, "GraphModule", _NotAGraphModule):
        yield


def export_root(model: nn.Module) -> nn.Module:
    """What to hand to ``torch.export`` for ``model``: the model itself, or for an ``fx.GraphModule`` root
    (a model rebuilt by ir2torch) a plain-module view of it, and for a root ir2torch rebuilt as its real class
    the same module without its input guard.

    Export runs a ``GraphModule`` root through an ``fx.Interpreter`` and skips ``preserve_module_call_signature``
    for it, so the call signatures of its leaves would be lost. The view shares the root's ``__dict__``
    (parameters, buffers, children, flags) and runs the root's generated ``forward``: same paths, same code.
    """
    if not isinstance(model, fx.GraphModule):
        guarded = model.__dict__.get("forward")
        if getattr(getattr(guarded, "__func__", None), "input_guard", None) is None:
            return model
        # a root ir2torch rebuilt as its real class (an nn.Sequential) checks its inputs in an instance
        # ``forward``; export would trace that wrapper (and name a shared child's second call by its first
        # path): the view is the same module without it
        view = nn.Module.__new__(type(model))
        view.__dict__ = {k: v for k, v in model.__dict__.items() if k != "forward"}
        return view
    view_cls = type(type(model).__name__, (nn.Module,), {"forward": type(model).forward,
                                                         "__module__": type(model).__module__})
    view = nn.Module.__new__(view_cls)
    view.__dict__ = model.__dict__
    return view


def needs_signature(module: nn.Module) -> bool:
    """Whether ``torch.export`` must preserve the call signature of handled leaf ``module``.

    A leaf called with one tensor that returns one tensor is placed from the trace's data flow alone: its one
    input is the value flowing in, its one output the value flowing out. Preserving a signature costs a
    tracepoint pair around every call, and the export passes that follow (about as much as the trace itself on
    ResNet, +60% on Llama), so it is kept for the leaves that need it: several or optional arguments
    (``MultiheadAttention(q, k, v)``, ``LSTM(x, hx=None)``), tuple results (``return_indices=True``), and
    classes outside ``torch.nn`` (a user's handler may return anything).
    """
    cls = type(module)
    if not cls.__module__.startswith("torch.nn.") or getattr(module, "return_indices", False):
        return True
    return not _one_required_argument(cls)


@functools.cache
def _one_required_argument(cls: type) -> bool:
    """Whether ``cls.forward`` takes exactly one positional argument without a default (read once per class)."""
    try:
        params = list(inspect.signature(cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return len(params) == 1 and params[0].kind in positional and params[0].default is inspect.Parameter.empty


class ExportFailedError(ConversionError):
    """``torch.export`` could not trace the model (every attempt failed)."""


class OpaqueCallError(ExportFailedError):
    """The calls of opaque leaves cannot be kept: an input is a value computed from tensor data. ``leaves``: their
    paths."""

    leaves: tuple[str, ...] = ()
    #: why ``opaque="auto"`` keeps the leaves' callers opaque (``ir.capture.opaque``)
    caller_reason = "it passes an opaque leaf a value computed from tensor data"

    @classmethod
    def of(cls, path: str, kind: str, exc: BaseException) -> ExportFailedError:
        """The refusal of a leaf call whose arguments cannot be written as a call (a container of its inputs, such
        as brevitas' ``QuantTensor``, cannot be made again around references): an :class:`OpaqueCallError` for an
        opaque leaf, whose caller ``opaque="auto"`` then keeps opaque; an :class:`ExportFailedError` otherwise."""
        message = (f"the call of {path} ({kind}) passes it a structure that cannot be written with references to "
                   f"its values ({type(exc).__name__}: {str(exc)[:160]})")
        if kind != "opaque":
            return ExportFailedError(message, implementation=path, hint="report this model: the leaf's inputs "
                                     "are a container the IR cannot write")
        error = cls(message, implementation=path, hint="opaque=\"auto\" keeps its caller opaque instead")
        error.leaves = (path,)
        return error


def export(
    model: nn.Module,
    args: tuple,
    kwargs: Mapping[str, Any] | None,
    *,
    strict: bool,
    dynamic_shapes: Any,
    preserve: list[str],
    on_attempt: Callable[[], None] | None = None,
    custom_functions: list[str] | None = None,
    required: list[str] | None = None,
) -> torch.export.ExportedProgram:
    r"""Export ``model``, preserving leaf signatures when export can (else without them, but for those of
    ``required``: the opaque leaves, whose inputs nothing else wires).

    ``custom_functions``: a list the qualified names of the custom ``autograd.Function``\ s the traced forward
    calls are appended to (they are also warned about, :class:`~common.notes.CustomBackwardWarning`, unless a caller
    collects their calls: :func:`torch2ir.frontend.custom_backward.collected`).

    Raises:
        ConversionError: export failed (its message is kept, with the model class).
    """
    kwargs = dict(kwargs or {})
    name = type(model).__qualname__
    kept = tuple(dict.fromkeys(required or ()))
    attempts = [tuple(dict.fromkeys([*preserve, *kept])), kept] if preserve else [kept]
    last: Exception | None = None
    register_loaded_caches()  # transformers' DynamicCache as a pytree node (common.caches), when it is imported
    root = export_root(model)
    for attempt in attempts:
        if on_attempt is not None:
            on_attempt()  # forget what a failed attempt recorded
        try:
            with kept_attributes(model), traced_mode(model), graph_module_scopes(model), warnings.catch_warnings(), \
                    keep_input_names(), torch_logs_to_debug(), \
                    custom_backward.recording() as functions, lean_export(), brevitas_branches.replaying(root), \
                    eager_skip(), eager_answers(), traced_experts(), deferred_checks.fresh():
                # RNN modules re-assign their _flat_weights list while tracing; export warns, harmlessly
                warnings.filterwarnings("ignore", message=RNN_WARNING, category=UserWarning)
                ep = torch.export.export(
                    root, tuple(args), kwargs, strict=strict, dynamic_shapes=dynamic_shapes,
                    preserve_module_call_signature=attempt,
                )
            unbatch(ep)  # torch.vmap regions as the operators they dispatch (frontend.vmap_regions)
            if functions and custom_functions is not None:
                custom_functions.extend(custom_backward.names(functions))
            if functions and not custom_backward.hand_over(functions.calls):  # else the collecting caller warns
                warnings.warn(custom_backward.message(name, functions), custom_backward.CustomBackwardWarning,
                              stacklevel=3)
            return ep
        except Exception as exc:  # noqa: BLE001 - export raises many types; all are reported
            last = exc
    first_line = str(last).strip().splitlines()[0] if str(last).strip() else type(last).__name__
    differs = _opaque_call_error(last)
    if differs is not None:  # an opaque leaf's traced call differs from its eager call (torch2ir.opaque.same_call)
        raise differs
    if kept and "pytree flattened inputs" in str(last):  # preserving an opaque leaf's call fails on its inputs
        error = OpaqueCallError(
            f"torch.export cannot keep the calls of the opaque leaves {', '.join(kept[:3])}"
            f"{', ...' if len(kept) > 3 else ''} of {name}: an input is neither a tensor nor a constant "
            f"({first_line})", implementation=kept[0],
            hint="a value computed from tensor data (.item(), a bool of a tensor) is passed to it: make the module "
                 "that computes it opaque instead (opaque=[its class]; opaque=\"auto\" does, up the tree)")
        error.leaves = kept
        raise error from last
    raise ExportFailedError(f"torch.export could not trace {name}: {type(last).__name__}: {first_line}",
                          implementation="root", hint=export_hint(last)) from last


def _opaque_call_error(exc: BaseException | None) -> OpaqueCallError | None:
    """The :class:`OpaqueCallError` a stand-in raised inside the export, through the exceptions wrapping it."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, OpaqueCallError):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


OBSERVER_HINT = ("an observer that branches on the values it sees cannot be traced while it calibrates: calibrate in "
                 "eager mode and convert the model after convert_pt2e, or use an observer without data-dependent "
                 "control flow (MinMaxObserver, MovingAverageMinMaxObserver) while converting")


def naming_failure(exc: ExportFailedError, model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None
                   ) -> ExportFailedError:
    """``exc`` naming the smallest module of ``model`` whose own trace failed: found on the traceback of export's
    error (:func:`torch2ir.opaque.attribution.attribute_failure`), else, for a model holding quantization observers,
    the first observer that cannot be traced alone (:func:`untraceable_observer`); ``exc`` itself when neither
    names one. Call it outside the conversion's own contexts: the observer fallback runs ``model`` (a copy)."""
    failure = attribute_failure(exc.__cause__, model) if exc.__cause__ is not None else None
    if failure is None or not failure.path:
        failure = untraceable_observer(model, tuple(args), kwargs) or failure
    if failure is None:
        return exc
    if is_observer(failure.module):
        named = ExportFailedError(f"{exc.message}; the observer {failure.describe()}",
                                  implementation=failure.path or "root", hint=OBSERVER_HINT)
        named.failure = failure  # type: ignore[attr-defined]
        return named
    name = type(model).__qualname__
    where = f"in {failure.path} ({failure.qualname})" if failure.path else f"in its own forward ({failure.qualname})"
    named = ExportFailedError(
        f"torch.export could not trace {name} {where}: {failure.why}", implementation=failure.path or "root",
        hint=f"{export_hint(exc.__cause__)}; or keep the module torch.export cannot trace as an opaque leaf "
        f"(run by its own forward, its class imported when the IR is rebuilt): torch2ir.convert(model, args, "
        f'kwargs, opaque="auto") or opaque=[{failure.qualname}]' if failure.path else export_hint(exc.__cause__))
    named.failure = failure  # type: ignore[attr-defined]  # read by opaque="auto" (torch2ir.hierarchy.build)
    return named


def export_hint(exc: BaseException | None) -> str:
    """What to do about a failed export, from what failed: data-dependent control flow, an output type
    export cannot flatten, or (anything else) the model raising on the example inputs."""
    text, kind = str(exc), type(exc).__name__
    if "DataDependent" in kind or "data-dependent" in text or "data dependent" in text:
        return ("Python control flow on a tensor's value cannot be traced: use torch.cond, or make the branch "
                "depend on shapes only")
    if "cache_utils" in text:  # transformers' DynamicCache & co. in the output
        return ("the model takes or returns a key/value cache kind torch2ir does not carry (only transformers' "
                "DynamicCache: common.caches): generate with the DynamicCache (torch2ir.generation."
                "convert_for_generation), or pass use_cache=False in kwargs")
    if "pytree" in text:
        return "the model returns or takes a type torch.export cannot flatten: register it as a pytree node"
    return ("check the example inputs (shapes, dtypes, which arguments) against the model's forward: it raised "
            "while traced on them; if model(*inputs) runs in eager mode, torch.export cannot trace it (see the "
            "error with --debug or its __cause__)")
