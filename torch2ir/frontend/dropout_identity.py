"""Eval-mode dropout keeps its input's name in the trace (torch 2.14 and later).

The conversion traces in eval mode. Since torch 2.14, ``aten.dropout(x, p, False)`` (and the other dropouts)
is recorded by the export tracer and returns ``x`` itself, so the tracer names every later use of ``x`` after the
dropout: in ``y = F.dropout(x, p, self.training); return x + y`` the trace reads ``dropout + dropout``, and a
tensor a parent passes to two layers that each drop it out inside (DeBERTa-v2's relative embeddings) reads in the
second layer as the first one's dropped-out value. In eval mode the two are equal; in train mode they are not:
the rebuild, whose dropouts follow its ``training`` flag, was silently different in train mode (0.88 on the
example above, 2.3e-4 on DeBERTa-v2; torch 2.13 returns a tensor of its own and is exact).

While the conversion traces, :class:`KeepInputNames` (a ``TorchFunctionMode``) watches the dropout functions
called with ``train=False`` and not in place; when one returns its input itself, the result is handed on as a
fresh tensor object (a view of the same fake tensor, made with tracing off: no node in the graph) named after the
dropout node, and the input gets its own name back. The graph is the one torch 2.13 records.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

#: dropout functions whose third argument is ``train``/``training``, with its default (``None``: required)
_TRAIN_DEFAULT: dict[Any, bool | None] = {
    F.dropout: True, F.dropout1d: True, F.dropout2d: True, F.dropout3d: True,
    F.alpha_dropout: False, F.feature_alpha_dropout: False,
    torch.dropout: None, torch.feature_dropout: None, torch.alpha_dropout: None, torch.feature_alpha_dropout: None,
    torch.ops.aten.dropout.default: None, torch.ops.aten.feature_dropout.default: None,
    torch.ops.aten.alpha_dropout.default: None, torch.ops.aten.feature_alpha_dropout.default: None,
}


@functools.cache
def returns_its_input() -> bool:
    """Whether this torch's tracer records eval-mode dropout as returning its input (2.14 and later)."""
    major, minor = (int(part) for part in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 14)


def _eval_call(func: Any, args: tuple, kwargs: dict[str, Any]) -> bool:
    """Whether a dropout call runs with ``train=False`` and not in place."""
    if kwargs.get("inplace") or (len(args) > 3 and args[3] is True):
        return False
    train = args[2] if len(args) > 2 else kwargs.get("training", kwargs.get("train", _TRAIN_DEFAULT[func]))
    return train is False


class KeepInputNames(TorchFunctionMode):
    """Hands on an eval-mode dropout's result as a tensor object of its own (see the module's docstring)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func not in _TRAIN_DEFAULT or not _eval_call(func, args, kwargs):
            return func(*args, **kwargs)
        x = args[0] if args else kwargs.get("input")
        from torch.fx.experimental import proxy_tensor

        mode = proxy_tensor.get_proxy_mode()
        tracer = None if mode is None else mode.tracer
        before = proxy_tensor.get_proxy_slot(x, tracer, None) if tracer is not None and \
            isinstance(x, torch.Tensor) else None
        out = func(*args, **kwargs)
        if before is None or out is not x:
            return out
        named = proxy_tensor.get_proxy_slot(x, tracer, None)
        with proxy_tensor.disable_proxy_modes_tracing():
            fresh = x.view_as(x)
        tracer.tensor_tracker[x] = before
        if named is not None:
            tracer.tensor_tracker[fresh] = named
        return fresh


@contextlib.contextmanager
def keep_input_names() -> Iterator[None]:
    """Within the block (the conversion's export), :class:`KeepInputNames` is active, on a torch that needs it."""
    if not returns_its_input():
        yield
        return
    with KeepInputNames():
        yield
