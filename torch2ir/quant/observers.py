"""Which observer stops ``torch.export``: a failed export of a model holding quantization observers names the first
one that cannot be traced on its own, and why.

PT2E's ``prepare_pt2e`` inserts observers (``HistogramObserver`` with the X86 quantizer's defaults) whose
``forward`` branches on the values it sees; ``torch.export`` then fails with a ``GuardOnDataDependentSymNode``
naming a symbol (``Eq(u0, 1)``) and no module. Only on that failure path: each observer's input is recorded by
one eager call of a *copy* of the model (the model's own statistics do not move), then each observer is exported
alone on its input, in module order; the first failure is the one reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from torch2ir.opaque.attribution import Failure, alone


def is_observer(module: nn.Module) -> bool:
    """An observer of ``torch.ao`` or ``torchao`` (anything whose class derives from a class named
    ``ObserverBase``, or whose name ends in ``Observer``)."""
    return any(c.__name__ == "ObserverBase" or c.__name__.endswith("Observer") for c in type(module).__mro__[:-1])


def untraceable_observer(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None) -> Failure | None:
    """The first observer of ``model`` that ``torch.export`` cannot trace alone on the value it observes, or
    ``None`` (no observer, none fails, or the model does not run on these inputs)."""
    return alone(model, args, kwargs, [(path, m) for path, m in model.named_modules() if path and is_observer(m)])


__all__ = ["is_observer", "untraceable_observer"]
