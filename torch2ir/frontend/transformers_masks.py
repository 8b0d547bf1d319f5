"""transformers' choice to skip a bidirectional attention mask, made while a conversion exports as the eager call
makes it (issue 49).

``transformers.masking_utils.sdpa_mask`` (which ``eager_mask`` calls too) returns ``None``, no mask at all, when
``_ignore_bidirectional_mask_sdpa(padding_mask, kv_length, local_attention_size)`` says so. In eager mode it does
when nothing is padded: ``padding_mask is None`` (the model was called without an attention mask) and no local
window applies (``local_attention_size is None``). While exporting it never does (``is_torchdynamo_exporting()``
comes first, to keep ``padding_mask.all()``, a read of tensor data, out of the trace), so the traced program
builds an all-attending mask eager mode never builds and passes it where eager mode passes ``None``. Most
attentions then compute the same values along another path; Autoformer's autocorrelation and Informer's
ProbSparse attention do not take a mask at all and fail to trace with one (a shape error), and an opaque
attention's traced call would differ from its eager call (``torch2ir.opaque.same_call``).

:func:`eager_skip` (entered around a conversion's exports, :mod:`torch2ir.frontend.export`,
:mod:`torch2ir.train.passes`) answers that one question as eager mode answers it, in the converting thread only,
when the answer reads nothing: ``padding_mask is None and local_attention_size is None``. Its answer is not
assumed but taken from the original function itself, called before the export (not exporting, so its eager
branch) on no padding and no window for two lengths: only when it answered ``True`` both times is ``True`` given
while tracing. Any other call (a padding mask, a tensor to read; a local window) runs the original, as before.
The traced program then is the computation the eager call ran (no mask), never another one, and the rebuild's
input guard refuses a call with an attention mask where the conversion had none. A release that renamed the
function or changed its parameters is simply not decided (the original runs). transformers is never imported
here: the function is looked up in the modules already imported.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch

from torch2ir.frontend.shared_patch import SharedPatch

#: ``(module, function)`` whose answer is decided as in eager mode.
SITE = ("transformers.masking_utils", "_ignore_bidirectional_mask_sdpa")
#: Its parameters, in order: another signature is not decided.
PARAMETERS = ("padding_mask", "kv_length", "local_attention_size")

_ORIGINAL: list[Callable[..., Any]] = []


def _site() -> tuple[Any, Callable[..., Any]] | None:
    """The imported ``transformers.masking_utils`` and its original function, or None (not imported, renamed, or
    another signature)."""
    import sys

    module = sys.modules.get(SITE[0])
    function = _ORIGINAL[0] if _ORIGINAL else getattr(module, SITE[1], None)
    if module is None or not callable(function):
        return None
    try:
        names = tuple(inspect.signature(function).parameters)
    except (TypeError, ValueError):
        return None
    return (module, function) if names == PARAMETERS else None


def _eager_skips(function: Callable[..., Any]) -> bool:
    """Whether ``function``, called outside any trace, skips the mask with no padding and no local window (the
    eager branch): asked for two lengths."""
    if torch.compiler.is_exporting() or torch.compiler.is_compiling():
        return False
    try:
        return all(function(None, length, None) is True for length in (1, 4096))
    except Exception:  # noqa: BLE001 - an answer it cannot give is no answer
        return False


def _decided(padding_mask: Any, kv_length: Any, local_attention_size: Any = None) -> Any:
    """The stand-in: eager mode's ``True`` for no padding and no window in a converting thread, else the
    original."""
    original = _ORIGINAL[0]
    if _PATCH.inside() and padding_mask is None and local_attention_size is None:
        return True
    return original(padding_mask, kv_length, local_attention_size)


def _install(module: Any, original: Callable[..., Any]) -> Callable[[], None]:
    _ORIGINAL[:] = [original]
    setattr(module, SITE[1], _decided)
    return lambda: setattr(module, SITE[1], _ORIGINAL.pop())


_PATCH = SharedPatch(_install)


@contextlib.contextmanager
def eager_skip() -> Iterator[None]:
    """Within the block, in this thread, transformers skips a bidirectional mask while exporting exactly when its
    eager branch would, for an unpadded call without a local window (module docstring); outside it, or when the
    eager branch would not skip, nothing changes."""
    site = _site()
    if site is None or not _eager_skips(site[1]):
        yield
        return
    with _PATCH.entered(*site):
        yield


__all__ = ["PARAMETERS", "SITE", "eager_skip"]
