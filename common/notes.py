"""Notes the root implementation carries about the original model: its custom ``autograd.Function``\\ s.

``torch.export`` records the ATen ops a custom ``torch.autograd.Function``'s ``forward`` runs, not the Function:
its own ``backward`` is lost. torch2ir notes the Functions it saw (``torch2ir.frontend.custom_backward``) in the root's
``meta["custom_backward"]``, a list of their qualified class names, and warns; a rebuild from the IR (a file
included) warns again with :class:`CustomBackwardWarning`, and the rebuilt model converts back with the same note.

The note is data: names shown in a message, never imported or looked up.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

from .errors import IRFormatError

#: ``meta`` key, on the root implementation, of the custom Functions' qualified class names.
CUSTOM_BACKWARD_KEY = "custom_backward"
#: The most names kept (a model calling more lists the first ones, then ``"..."``).
MAX_NAMES = 64
_MAX_LENGTH = 300


class CustomBackwardWarning(UserWarning):
    """The forward calls custom ``torch.autograd.Function``\\ s whose own ``backward`` the IR does not carry: the
    rebuilt model's outputs are exact, its gradients through them are those of their forward's ops."""


def custom_backward_message(model: str, names: list[str], advice: str | None = None) -> str:
    """The :class:`CustomBackwardWarning` text for ``model``'s forward calling the Functions ``names``; ``advice``:
    what to do instead of the general advice (torch2ir names the modules to keep opaque)."""
    advice = advice or ("to train a rebuild exactly, convert the original model with opaque=\"auto\": the modules "
                        "calling them become opaque leaves, rebuilt as their real classes with their own backward "
                        "(docs/opaque.md); or swap them back in (register_override)")
    return (f"the forward of {model} calls custom autograd.Function(s) {', '.join(names)}: the IR keeps "
            "the ops of their forward, not their own backward, so the rebuilt model's outputs are exact but its "
            "gradients through them are those of the forward's ops (a straight-through estimator's round gets a "
            f"zero gradient); do not train the rebuild through them. {advice[0].upper()}{advice[1:]}")


def custom_backward_names(meta: Mapping[str, Any], key: str = "root", carries: bool | None = None) -> list[str]:
    """The checked ``meta["custom_backward"]`` of implementation ``key`` (``[]`` when absent); ``carries``: whether
    ``key`` may hold it (the root, or a child traced on its own below an opaque leaf, which keeps the notes of its
    own conversion; default: the root only).

    Raises:
        IRFormatError: not a list of at most :data:`MAX_NAMES` + 1 short strings.
    """
    names = meta.get(CUSTOM_BACKWARD_KEY)
    if names is None:
        return []
    if (not isinstance(names, list) or len(names) > MAX_NAMES + 1
            or not all(isinstance(n, str) and 0 < len(n) <= _MAX_LENGTH and n.isprintable() for n in names)):
        raise IRFormatError(f"meta.{CUSTOM_BACKWARD_KEY} must be a list of at most {MAX_NAMES} class names",
                            implementation=key, hint="it lists the custom autograd.Functions the model calls, e.g. "
                            '["mylib.RoundSte"]; remove it if the file was edited')
    if not (key == "root" if carries is None else carries):
        raise IRFormatError(f"meta.{CUSTOM_BACKWARD_KEY} belongs to the root implementation (or a child traced on "
                            "its own below an opaque leaf)", implementation=key, hint="move it to the root's meta")
    return list(names)


__all__ = ["CUSTOM_BACKWARD_KEY", "CustomBackwardWarning", "MAX_NAMES", "custom_backward_message",
           "custom_backward_names"]


#: Classes whose traced form (``torch2ir.frontend.experts_forwards``) calls every expert, a child module, on its
#: token subset: an expert no token reached runs on zero tokens and its parameters get zero gradients, where the
#: eager forward does not call it and leaves their ``.grad`` as it was (``None`` after ``zero_grad()``).
EXPERTS_CALLED_ON_NO_TOKEN = frozenset({
    "transformers.models.switch_transformers.modeling_switch_transformers.SwitchTransformersExperts",
})


class UnreachedExpertsWarning(UserWarning):
    """The IR's graphs call every expert of a mixture-of-experts layer, those no token reached on zero tokens: their
    parameters get zero gradients where the original leaves ``.grad`` undefined, which an optimizer with momentum,
    weight decay or adaptive moments treats differently."""


def unreached_experts(implementations: Any) -> list[str]:
    """Paths of the graph implementations (``type == "module"``) whose recorded class is one of
    :data:`EXPERTS_CALLED_ON_NO_TOKEN` (their ``meta["class"]`` compared as a string, nothing imported)."""
    return sorted(str(impl.name) for impl in implementations if impl.type == "module"
                  and isinstance(cls := impl.meta.get("class"), str) and cls in EXPERTS_CALLED_ON_NO_TOKEN)


def unreached_experts_message(model: str, paths: list[str]) -> str:
    """The :class:`UnreachedExpertsWarning` text for ``model`` whose experts layers ``paths`` are graphs."""
    shown = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    return (f"{model} runs the experts of {shown} as a graph that calls every expert, one no token reached on zero "
            "tokens: outputs and every other gradient are the original's, but such an expert's parameters get zero "
            "gradients where the original leaves .grad as it was (None after zero_grad()). Plain SGD steps are the "
            "same; an optimizer with momentum, weight decay or Adam's moments steps that expert where the original "
            "would skip it (docs/opaque.md, Switch Transformers)")


def warn_rebuild_notes(custom: list[str], experts: list[str]) -> None:
    """ir2torch's warnings for a rebuilt model: the custom Functions ``custom`` the original called
    (:class:`CustomBackwardWarning`), its experts layers ``experts`` (:class:`UnreachedExpertsWarning`); the
    warnings point at the caller of the caller (``ir2torch.convert``)."""
    if custom:
        warnings.warn(f"ir2torch: {custom_backward_message('the converted model', custom)}", CustomBackwardWarning,
                      stacklevel=3)
    if experts:
        warnings.warn(f"ir2torch: {unreached_experts_message('the converted model', experts)}",
                      UnreachedExpertsWarning, stacklevel=3)
