"""Which observer stops ``torch.export``: a failed export of a model holding quantization observers names the first
one that cannot be traced on its own, and why.

PT2E's ``prepare_pt2e`` inserts observers (``HistogramObserver`` with the X86 quantizer's defaults) whose
``forward`` branches on the values it sees; ``torch.export`` then fails with a ``GuardOnDataDependentSymNode``
naming a symbol (``Eq(u0, 1)``) and no module. Only on that failure path: each observer's input is recorded by
one eager call of a *copy* of the model (the model's own statistics do not move), then each observer is exported
alone on its input, in module order; the first failure is the one reported.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn


def is_observer(module: nn.Module) -> bool:
    """An observer of ``torch.ao`` or ``torchao`` (anything whose class derives from a class named
    ``ObserverBase``, or whose name ends in ``Observer``)."""
    return any(c.__name__ == "ObserverBase" or c.__name__.endswith("Observer") for c in type(module).__mro__[:-1])


def untraceable_observer(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None) -> str | None:
    """``"<path> (<class>): <why>"`` for the first observer of ``model`` that ``torch.export`` cannot trace alone on
    the value it observes, or ``None`` (no observer, none fails, or the model does not run on these inputs)."""
    observers = [(path, m) for path, m in model.named_modules() if path and is_observer(m)]
    if not observers:
        return None
    try:
        twin = copy.deepcopy(model)
    except Exception:  # noqa: BLE001 - a model that cannot be copied is not diagnosed
        return None
    seen: dict[str, tuple] = {}
    hooks = []
    for path, module in twin.named_modules():
        if path and is_observer(module):
            hooks.append(module.register_forward_pre_hook(
                lambda mod, inputs, path=path: seen.setdefault(path, tuple(
                    x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs))))
    try:
        with torch.no_grad():
            twin(*args, **dict(kwargs or {}))
    except Exception:  # noqa: BLE001 - the eager call fails too: export's own error says more
        return None
    finally:
        for hook in hooks:
            hook.remove()
    for path, module in observers:
        if path not in seen:
            continue
        try:
            torch.export.export(copy.deepcopy(module), seen[path], strict=False)
        except Exception as exc:  # noqa: BLE001 - this is the answer
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            return f"{path} ({type(module).__module__}.{type(module).__qualname__}): {type(exc).__name__}: {first}"
    return None


__all__ = ["is_observer", "untraceable_observer"]
