"""transformers' ``is_torchdynamo_compiling()``, answered while a conversion exports as the eager call answers it,
in the modules of reviewed sources that build a default attention mask only when not compiling (issue 49).

Switch Transformers' and LongT5's stacks build the all-ones attention mask an unmasked call gets only when
``attention_mask is None and not is_torchdynamo_compiling()``; while exporting ``is_torchdynamo_compiling()`` is
``True``, no mask is built, and the encoder then subscripts ``None`` (``attention_mask[:, None, None, :]``) or
reads its ``shape``: ``torch.export`` fails, and ``opaque="auto"`` kept both stacks opaque, nearly the whole model.

:func:`eager_answers` (entered around a conversion's exports, :mod:`torch2ir.frontend.export`,
:mod:`torch2ir.train.passes`) replaces, in the converting thread only, the ``is_torchdynamo_compiling`` name of
each module whose whole source is one that was reviewed (its ``inspect.getsource`` hashed, per transformers
release: :data:`SITES`) by a function answering what the original answers outside a trace, ``False``: the
answer is taken from the original itself, asked before the export (not exporting, its eager answer), and nothing
is replaced unless it answered ``False``. In the reviewed sources the name is read in one place only, the stack's
mask construct, so the traced program builds the mask the eager call built (``torch.ones`` of the call's batch
and length) and goes on as the eager call went on: the same computation. Another source (another release, a
patched module), another thread, or a call outside a conversion gets the original answer, as before (then the
stacks stay opaque, never different). transformers is never imported here: the modules are looked up in those
already imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import sys
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import torch

from torch2ir.frontend.shared_patch import SharedPatch

#: The name answered as in eager mode.
NAME = "is_torchdynamo_compiling"

#: ``module -> sha256 of its reviewed sources`` (transformers 5.23.0, 5.24.0): the name is read only in the
#: stack's ``attention_mask is None and not is_torchdynamo_compiling()``, whose branch builds the all-ones mask.
SITES: dict[str, frozenset[str]] = {
    "transformers.models.switch_transformers.modeling_switch_transformers": frozenset({
        "4341ee31f9a131a1c7b83e9c40efcd57abafddee3397cdf7d40632f19ae2dc0e",  # 5.23.0
        "3b4b7339b976fc155dd929f77c570e68f0dc021d555afc6022cc1765c6745376",  # 5.24.0
    }),
    "transformers.models.longt5.modeling_longt5": frozenset({
        "1c857f22e0e63a060522166abecb772ed82d03aaa1383351e7cffe85538ebbad",  # 5.23.0
        "79fefb559abb480a66a33d644455ccb7fdf5b2a4a44ba27e5c09e20f37dc959b",  # 5.24.0
    }),
}

def module_hash(module: ModuleType) -> str | None:
    """sha256 of ``inspect.getsource(module)``, or None when it has no source."""
    try:
        return hashlib.sha256(inspect.getsource(module).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def reviewed(name: str) -> tuple[ModuleType, Callable[[], Any]] | None:
    """The imported module ``name`` and its original ``is_torchdynamo_compiling`` when the module's source is a
    reviewed one and the original answers ``False`` outside a trace (its eager answer), else None."""
    module = sys.modules.get(name)
    original = getattr(module, NAME, None)
    if module is None or not callable(original) or module_hash(module) not in SITES.get(name, ()):
        return None
    if torch.compiler.is_exporting() or torch.compiler.is_compiling():
        return None  # not the eager answer that would be asked
    try:
        return (module, original) if original() is False else None
    except Exception:  # noqa: BLE001 - an answer it cannot give is no answer
        return None


def _stand_in(original: Callable[[], Any]) -> Callable[[], Any]:
    """Eager mode's ``False`` in a converting thread, the original's answer elsewhere."""

    def is_torchdynamo_compiling() -> Any:
        if _PATCH.inside():
            return False
        return original()

    is_torchdynamo_compiling.__doc__ = original.__doc__
    return is_torchdynamo_compiling


def _install() -> Callable[[], None]:
    replaced: list[tuple[ModuleType, Callable[[], Any]]] = []
    for name in SITES:
        held = reviewed(name)
        if held is not None:
            module, original = held
            setattr(module, NAME, _stand_in(original))
            replaced.append((module, original))

    def undo() -> None:
        for module, original in reversed(replaced):
            setattr(module, NAME, original)

    return undo


_PATCH = SharedPatch(_install)


@contextlib.contextmanager
def eager_answers() -> Iterator[None]:
    """Within the block, in this thread, the reviewed modules' ``is_torchdynamo_compiling()`` answers as in eager
    mode (module docstring); outside it, or for any other source, nothing changes."""
    with _PATCH.entered():
        yield


__all__ = ["NAME", "SITES", "eager_answers", "module_hash", "reviewed"]
