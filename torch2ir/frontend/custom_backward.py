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
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

from common.notes import MAX_NAMES, CustomBackwardWarning, custom_backward_message

#: Modules of Function classes left out: torch's own (``torch.library`` generates one per custom operator with a
#: registered autograd formula, and the operator stays in the graph with its formula; the others are torch's
#: internals, such as activation checkpointing, whose backward is their forward's).
_SKIPPED = ("torch.",)

_LOCK = threading.Lock()
_ACTIVE = 0
_PATCHED: list[tuple[type, Any]] = []
_LOCAL = threading.local()


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


def _noting(cls: type, forward: Any) -> Any:
    function = forward.__func__ if isinstance(forward, staticmethod) else forward

    def noted(*args: Any, **kwargs: Any) -> Any:
        found = getattr(_LOCAL, "found", None)
        if found is not None and cls not in found:
            found.append(cls)
        return function(*args, **kwargs)

    return staticmethod(noted)


@contextlib.contextmanager
def recording() -> Iterator[list[type]]:
    """Within the block, the custom Function classes whose ``forward`` this thread runs, in first-call order.

    Each Function class defined so far gets, for the block, a ``forward`` that notes its class and calls its own
    (``Function.apply`` itself is often bound early, ``round_ste_impl = RoundSteFn.apply``, while the autograd
    engine looks ``forward`` up at each call); the originals are put back when the last recording ends.
    """
    global _ACTIVE
    with _LOCK:
        if _ACTIVE == 0:
            for cls in _function_classes():
                original = cls.__dict__["forward"]
                _PATCHED.append((cls, original))
                cls.forward = _noting(cls, original)  # type: ignore[attr-defined]
        _ACTIVE += 1
    outer = getattr(_LOCAL, "found", None)
    found: list[type] = []
    _LOCAL.found = found
    try:
        yield found
    finally:
        _LOCAL.found = outer
        if outer is not None:
            outer.extend(c for c in found if c not in outer)
        with _LOCK:
            _ACTIVE -= 1
            if _ACTIVE == 0:
                for cls, original in reversed(_PATCHED):
                    cls.forward = original  # type: ignore[attr-defined]
                _PATCHED.clear()


def message(model: str, classes: list[type]) -> str:
    """The :class:`CustomBackwardWarning` text for ``model``'s forward calling ``classes``."""
    return "torch2ir: " + custom_backward_message(model, names(classes))


def names(classes: list[type]) -> list[str]:
    """``module.Qualname`` of each class, at most :data:`common.notes.MAX_NAMES` (then ``"..."``)."""
    found = [f"{c.__module__}.{c.__qualname__}" for c in classes]
    return found if len(found) <= MAX_NAMES else [*found[:MAX_NAMES], "..."]


__all__ = ["CustomBackwardWarning", "message", "names", "recording"]
