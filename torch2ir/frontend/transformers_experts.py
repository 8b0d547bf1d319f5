"""transformers' eager experts loops, traced while a conversion exports as the same computation (issue 49).

Three mixture-of-experts types of transformers run an eager experts loop by default, over ``expert_hit``, the
experts a token was routed to: a tensor whose length is read from data, which ``torch.export`` cannot trace, so
``opaque="auto"`` kept the experts opaque, most of the model's parameters. LongCat-Flash's
``LongcatFlashExperts`` has no other forward; ``OpenAIPrivacyFilterExperts`` has transformers' experts kernels,
but its model chooses ``"eager"`` ("very sensitive to accumulation orders"); ``SwitchTransformersExperts`` calls
child modules, and the router before it, ``SwitchTransformersTop1Router``, runs a ``Module.to`` export cannot
trace (its traceable form skips it exactly when it changes nothing).

:func:`traced_experts` (entered around a whole conversion, :func:`torch2ir.hierarchy.build.build_ir`, before any
stand-in of ``trace_once`` takes a module's forward, and around each export, :mod:`torch2ir.frontend.export`,
:mod:`torch2ir.train.passes`) replaces, in the converting thread only, each such eager forward whose source is
exactly one that was reviewed (its ``inspect.getsource`` hashed, per transformers release: :data:`SITES`) by its
traceable form in :mod:`torch2ir.frontend.experts_forwards`: the same body for every expert in the same order, an
expert with no token adding nothing. The traced program is the computation the eager call runs, bit for bit.

Where it is replaced: a class's own ``forward``; for a class decorated with transformers'
``use_experts_implementation``, the eager forward its dispatcher holds (the ``original_forward`` it falls back to
for ``"eager"``), so the dispatcher still decides, per call, which implementation runs, and another
implementation runs as before. Another source (another release, a patched class), another thread, or a call
outside a conversion runs the original, as before (then the experts stay opaque, never different).
transformers is never imported here: the classes are looked up in the modules already imported.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import CellType
from typing import Any

from torch2ir.frontend import experts_forwards
from torch2ir.frontend.shared_patch import SharedPatch


@dataclass(frozen=True)
class Site:
    """One eager experts forward: where its class lives, the sha256 of each reviewed source of its eager forward,
    and its traceable form."""

    module: str
    cls: str
    sources: frozenset[str]
    traced: Callable[..., Any]


#: The eager experts forwards decided, each with the sources reviewed (transformers 5.23.0 and 5.24.0 share them).
SITES = (
    Site("transformers.models.longcat_flash.modeling_longcat_flash", "LongcatFlashExperts",
         frozenset({"d59d2a7326e9fadd766992c19cab2f4d9d94ba6c47df9f494a47faa2f383d0be"}),
         experts_forwards.longcat_flash),
    Site("transformers.models.openai_privacy_filter.modeling_openai_privacy_filter", "OpenAIPrivacyFilterExperts",
         frozenset({"f98799f6a1a047d6bc1a0aa1419e833c49bf5940b9d59ef0ac0d5ee7676a555e"}),
         experts_forwards.openai_privacy_filter),
    # an experts loop over child modules, and the router before it, whose no-op ``self.classifier.to(dtype)``
    # does not trace (not made when it changes nothing, :func:`experts_forwards.switch_transformers_router`)
    Site("transformers.models.switch_transformers.modeling_switch_transformers", "SwitchTransformersExperts",
         frozenset({"da2e70afb128534670927a971106b9304041e7e16688e047ea8a77953ca7d7f8"}),
         experts_forwards.switch_transformers),
    Site("transformers.models.switch_transformers.modeling_switch_transformers", "SwitchTransformersTop1Router",
         frozenset({"20d6746a660c91787a09459a842e07861ea9b417bf574a21e5d712b83980f212"}),
         experts_forwards.switch_transformers_router),
)

#: The closure variable of transformers' ``use_experts_implementation`` dispatcher holding the eager forward.
DISPATCHED = "original_forward"

#: The attribute marking a stand-in of this module (never taken for a reviewed forward).
STAND_IN = "_torch2ir_experts_stand_in"


def source_hash(function: Any) -> str | None:
    """sha256 of ``inspect.getsource(function)``, or None when it has no source."""
    try:
        return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def _holder(cls: type) -> tuple[Callable[..., Any], Callable[[Any], None]] | None:
    """The eager forward of ``cls`` and a setter that replaces it where it is called from: the class's own
    ``forward``, or the dispatcher's cell when ``forward`` is transformers' dispatcher (it has ``__wrapped__`` and
    holds the eager forward in its ``original_forward`` cell)."""
    forward = cls.__dict__.get("forward")
    if not inspect.isfunction(forward):
        return None
    if not hasattr(forward, "__wrapped__"):
        return forward, lambda f: setattr(cls, "forward", f)
    code, closure = forward.__code__, forward.__closure__ or ()
    if DISPATCHED not in code.co_freevars:
        return None
    cell: CellType = closure[code.co_freevars.index(DISPATCHED)]
    original = cell.cell_contents
    if not inspect.isfunction(original):
        return None

    def replace(f: Any) -> None:
        cell.cell_contents = f

    return original, replace


def reviewed(site: Site) -> tuple[Callable[..., Any], Callable[[Any], None]] | None:
    """The site's eager forward and its setter when its class is imported and the forward's source is a reviewed
    one, else None."""
    cls = getattr(sys.modules.get(site.module), site.cls, None)
    if not isinstance(cls, type):
        return None
    held = _holder(cls)
    if held is None or getattr(held[0], STAND_IN, False) or source_hash(held[0]) not in site.sources:
        return None  # (a stand-in's source reads as the original's, through its __wrapped__)
    return held


def _stand_in(original: Callable[..., Any], traced: Callable[..., Any]) -> Callable[..., Any]:
    """The traceable form in a converting thread, the original elsewhere (same name and signature)."""

    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _PATCH.inside():
            return traced(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    forward.__name__, forward.__qualname__ = original.__name__, original.__qualname__
    # the original's signature, read through __wrapped__: inspect drops ``self`` of the bound stand-in (a
    # ``__signature__`` would not be dropped when a functools.wraps wrapper of the bound method, as trace_once's
    # stand-ins are, copies it: the call's argument names were then not recorded)
    forward.__wrapped__ = original  # type: ignore[attr-defined]
    setattr(forward, STAND_IN, True)
    forward.__doc__ = original.__doc__
    return forward


def _install() -> Callable[[], None]:
    replaced: list[tuple[Callable[[Any], None], Callable[..., Any]]] = []
    for site in SITES:
        held = reviewed(site)
        if held is not None:
            original, replace = held
            replace(_stand_in(original, site.traced))
            replaced.append((replace, original))

    def undo() -> None:
        for replace, original in reversed(replaced):
            replace(original)

    return undo


_PATCH = SharedPatch(_install)


@contextlib.contextmanager
def traced_experts() -> Iterator[None]:
    """Within the block, in this thread, the reviewed eager experts forwards run their traceable form (module
    docstring); outside it, or for any other source, nothing changes."""
    with _PATCH.entered():
        yield


__all__ = ["DISPATCHED", "SITES", "Site", "reviewed", "source_hash", "traced_experts"]
