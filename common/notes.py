"""Notes the root implementation carries about the original model: its custom ``autograd.Function``\\ s.

``torch.export`` records the ATen ops a custom ``torch.autograd.Function``'s ``forward`` runs, not the Function:
its own ``backward`` is lost. torch2ir notes the Functions it saw (``torch2ir.frontend.custom_backward``) in the root's
``meta["custom_backward"]``, a list of their qualified class names, and warns; a rebuild from the IR (a file
included) warns again with :class:`CustomBackwardWarning`, and the rebuilt model converts back with the same note.

The note is data: names shown in a message, never imported or looked up.
"""

from __future__ import annotations

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


def custom_backward_names(meta: Mapping[str, Any], key: str = "root") -> list[str]:
    """The checked ``meta["custom_backward"]`` of implementation ``key`` (``[]`` when absent).

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
    if key != "root":
        raise IRFormatError(f"meta.{CUSTOM_BACKWARD_KEY} belongs to the root implementation", implementation=key,
                            hint="move it to the root's meta")
    return list(names)


__all__ = ["CUSTOM_BACKWARD_KEY", "CustomBackwardWarning", "MAX_NAMES", "custom_backward_message",
           "custom_backward_names"]
