"""Custom ``torch.autograd.Function``\\ s a traced forward calls: the IR keeps their forward ops, not their backward.

``torch.export`` runs a custom Function's ``forward`` and records the ATen ops it calls; the Function itself,
and with it its ``backward``, leaves no trace in the graph. A rebuilt model's outputs are exact, but its
gradients through such a Function are those of the recorded forward ops: for a straight-through estimator
(brevitas' ``round_ste``, hand-written QAT fake quantizers) the gradient of ``round`` is zero where the
estimator passes the incoming gradient through. :func:`recording` notes every Function class whose ``forward``
runs while a conversion traces, so that torch2ir can say so (:class:`CustomBackwardWarning`).

While at least one conversion is recording (any thread), every Function class defined outside torch has a
``forward`` that notes its class for the recording threads and calls its own; the originals are put back when
the last recording ends, also on errors.

Each call also notes the objects ``self`` of the Python frames calling it, innermost first (:class:`Call`): which
module's own code calls the Function, so that the conversion can keep that module as an opaque leaf, rebuilt as
its real class with its own backward (:mod:`torch2ir.opaque.custom_calls`). Within :func:`collected`, an export
hands its calls to the collecting caller instead of warning (the caller decides: ``opaque="auto"`` makes those
modules opaque, otherwise it warns naming them).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from common.notes import MAX_NAMES, CustomBackwardWarning, custom_backward_message
from torch2ir.frontend import ste_functions
from torch2ir.frontend.shared_patch import SharedPatch

#: Modules of Function classes left out: torch's own (``torch.library`` generates one per custom operator with a
#: registered autograd formula, and the operator stays in the graph with its formula; the others are torch's
#: internals, such as activation checkpointing, whose backward is their forward's).
_SKIPPED = ("torch.",)

_LOCAL = threading.local()
#: Frames looked at above a Function's call for the objects calling it.
_MAX_FRAMES = 400


@dataclass(frozen=True)
class Call:
    """One call of a custom Function's ``forward``: its class and the ``self`` objects of the frames calling it,
    innermost first (modules, and whatever else has a ``self``)."""

    function: type
    owners: tuple[Any, ...]


class Found(list):
    """The Function classes a :func:`recording` saw, in first-call order; ``calls``: each call (:class:`Call`)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[Call] = []


def _owners() -> tuple[Any, ...]:
    """The ``self`` of each frame above the caller's caller, innermost first, each once."""
    owners: list[Any] = []
    seen: set[int] = set()
    frame = sys._getframe(2)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        if "self" in frame.f_code.co_varnames:
            owner = frame.f_locals.get("self")
            if owner is not None and id(owner) not in seen:
                seen.add(id(owner))
                owners.append(owner)
        frame = frame.f_back
    return tuple(owners)


def _function_classes() -> list[type]:
    """Every subclass of ``torch.autograd.Function`` defined so far (outside torch) with its own ``forward``."""
    found: list[type] = []
    stack = list(torch.autograd.Function.__subclasses__())
    while stack:
        cls = stack.pop()
        if cls in found:
            continue
        found.append(cls)
        stack.extend(cls.__subclasses__())
    return [c for c in found if "forward" in c.__dict__ and not c.__module__.startswith(_SKIPPED)]


def _unwrapped(forward: Any) -> Any:
    return forward.__func__ if isinstance(forward, staticmethod) else forward


def _recording() -> bool:
    """Whether this thread is inside a :func:`recording` block."""
    return getattr(_LOCAL, "found", None) is not None


def _noting(cls: type, forward: Any) -> Any:
    function = _unwrapped(forward)

    def noted(*args: Any, **kwargs: Any) -> Any:
        found = getattr(_LOCAL, "found", None)
        if found is not None and cls not in found:
            found.append(cls)
        calls = getattr(_LOCAL, "calls", None)
        if calls is not None:
            calls.append(Call(cls, _owners()))
        return function(*args, **kwargs)

    return staticmethod(noted)


@contextlib.contextmanager
def recording() -> Iterator[Found]:
    """Within the block, the custom Function classes whose ``forward`` this thread runs, in first-call order (and
    each call, ``.calls``).

    Each Function class defined so far gets, for the block, a ``forward`` that notes its class and calls its own
    (``Function.apply`` itself is often bound early, ``round_ste_impl = RoundSteFn.apply``, while the autograd
    engine looks ``forward`` up at each call); the originals are put back when the last recording ends.
    """
    with _PATCH.entered():
        outer = getattr(_LOCAL, "found", None)
        outer_calls = getattr(_LOCAL, "calls", None)
        found = Found()
        calls = found.calls
        _LOCAL.found, _LOCAL.calls = found, calls
        try:
            yield found
        finally:
            _LOCAL.found, _LOCAL.calls = outer, outer_calls
            if outer is not None:
                outer.extend(c for c in found if c not in outer)
                outer_calls.extend(calls)


def _install() -> Callable[[], None]:
    """Each Function class defined so far noting its calls; returns what puts the originals back."""
    patched: list[tuple[type, Any]] = []
    for cls in _function_classes():
        original = cls.__dict__["forward"]
        op = ste_functions.operator_for(cls)  # probed before any forward is patched
        patched.append((cls, original))
        cls.forward = (_noting(cls, original) if op is None  # type: ignore[attr-defined]
                       else staticmethod(ste_functions.mapped_forward(op, _unwrapped(original), _recording)))

    def undo() -> None:
        for cls, original in reversed(patched):
            cls.forward = original  # type: ignore[attr-defined]

    return undo


_PATCH = SharedPatch(_install)


@contextlib.contextmanager
def collected() -> Iterator[list[Call]]:
    """Within the block, each export of this thread that succeeds hands the calls of custom Functions it traced to
    the yielded list instead of warning (:func:`hand_over`); the caller warns, or keeps the modules calling them
    opaque. Nested blocks each collect their own."""
    outer = getattr(_LOCAL, "sink", None)
    sink: list[Call] = []
    _LOCAL.sink = sink
    try:
        yield sink
    finally:
        _LOCAL.sink = outer


def hand_over(calls: list[Call]) -> bool:
    """Give ``calls`` to the innermost open :func:`collected` block of this thread; ``False`` when there is none."""
    sink = getattr(_LOCAL, "sink", None)
    if sink is None:
        return False
    sink.extend(calls)
    return True


def message(model: str, classes: list[type]) -> str:
    """The :class:`CustomBackwardWarning` text for ``model``'s forward calling ``classes``."""
    return "torch2ir: " + custom_backward_message(model, names(classes))


def names(classes: list[type]) -> list[str]:
    """``module.Qualname`` of each class, at most :data:`common.notes.MAX_NAMES` (then ``"..."``)."""
    found = [f"{c.__module__}.{c.__qualname__}" for c in classes]
    return found if len(found) <= MAX_NAMES else [*found[:MAX_NAMES], "..."]


__all__ = ["Call", "CustomBackwardWarning", "Found", "collected", "hand_over", "message", "names", "recording"]
