"""Workspace of kernels that allocate beyond their outputs: a documented model, counted while the op runs.

The forward budget (:mod:`ir2torch.run_safety.forward_budget`) adds up the storage of every operator's outputs.
Some kernels also allocate scratch memory that is no op's output and that a dispatch mode never sees; a file can
make it large while every output stays small (a float64 convolution's im2col buffer of a 1x1-channel output with a
large kernel). For the kernels of the default operator surface that do, :func:`workspace_bytes` is an upper bound
of that scratch memory, from the arguments and output shapes, and the budget checks that the live tensors of the
call plus this workspace fit, before the op runs (it is released when the op returns):

- **convolutions** (``convolution``, ``_convolution``, ``conv1d/2d/3d``, ``conv_transpose*``): the im2col (or
  col2im) buffer of the slow path, ``batch x in_channels x kernel elements x output positions`` elements (for a
  transposed convolution, ``out_channels x kernel elements x input positions``), at the input's item size. The
  oneDNN path that float32 convolutions usually take needs less; the model counts the larger.
- **sorts** (``sort``, ``argsort``, ``topk``, ``msort``, ``kthvalue``, ``median.dim``, ``mode``, ``unique*``): a
  copy of the keys and an int64 index per element of the input.
- **attention**: the CPU flash kernel (``_scaled_dot_product_flash_attention_for_cpu``, what
  ``scaled_dot_product_attention`` runs on CPU) works in blocks of at most 256 queries x 512 keys per thread:
  ``threads x 256 x (512 + value width + 2)`` float32 (counted at 8 bytes each, for its reduced-precision
  copies). Its math path (dropout, some masks) is not a kernel of its own: it decomposes into ``bmm`` and
  ``softmax``, whose outputs (the full ``batch x heads x queries x keys`` scores) the budget counts as any op's.
- **indexing with a boolean mask** (``index.Tensor``): the kernel's own ``nonzero`` of each mask, ``numel x ndim``
  int64; **``cdist``**: an augmented copy of both inputs; **FFTs** (``_fft_r2c``, ``_fft_c2r``, ``_fft_c2c``): a
  copy of the output; **``embedding_bag``**: two int64 per index; **``repeat_interleave``**: the cumulative sum of
  the repeats, one int64 each.

Operators outside the default surface (opted in with ``allow=``) have no workspace model: LAPACK-backed
``linalg`` kernels, for one, allocate scratch memory the budget does not count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.utils import _pytree as pytree

#: Block sizes of the CPU flash-attention kernel (upper bounds of its ``qSplitSize`` and ``kvSplitSize``).
FLASH_Q_BLOCK, FLASH_KV_BLOCK = 256, 512


def _tensors(value: Any) -> list[torch.Tensor]:
    return [t for t in pytree.tree_leaves(value) if isinstance(t, torch.Tensor)]


def _numel(t: Any) -> int:
    return t.numel() if isinstance(t, torch.Tensor) else 0


def _convolution(input: Any, weight: Any, *args: Any, out: Any = None, transposed: Any = None, **kwargs: Any) -> int:
    if not (isinstance(input, torch.Tensor) and isinstance(weight, torch.Tensor)) or weight.dim() < 3:
        return 0
    spatial = weight.dim() - 2
    batch = input.shape[0] if input.dim() == weight.dim() else 1
    kernel = math.prod(weight.shape[2:])
    if transposed:
        groups = next((a for a in reversed(args) if isinstance(a, int) and not isinstance(a, bool)), 1)
        channels = weight.shape[1] * max(int(groups), 1)
        return batch * channels * kernel * math.prod(input.shape[-spatial:]) * input.element_size()
    outputs = _tensors(out)
    positions = math.prod(outputs[0].shape[-spatial:]) if outputs else math.prod(input.shape[-spatial:])
    channels = input.shape[-spatial - 1] if input.dim() > spatial else 1
    return batch * channels * kernel * positions * input.element_size()


def _aten_convolution(input: Any, weight: Any, bias: Any = None, stride: Any = None, padding: Any = None,
                      dilation: Any = None, transposed: Any = False, output_padding: Any = None, groups: Any = 1,
                      *args: Any, out: Any = None, **kwargs: Any) -> int:
    return _convolution(input, weight, groups, out=out, transposed=bool(transposed))


def _conv_transpose(input: Any, weight: Any, *args: Any, out: Any = None, **kwargs: Any) -> int:
    groups = args[4] if len(args) > 4 else kwargs.get("groups", 1)
    return _convolution(input, weight, groups, out=out, transposed=True)


def _sort(self: Any, *args: Any, out: Any = None, **kwargs: Any) -> int:
    return _numel(self) * ((self.element_size() if isinstance(self, torch.Tensor) else 0) + 8)


def _flash(query: Any, key: Any, value: Any, *args: Any, out: Any = None, **kwargs: Any) -> int:
    width = value.shape[-1] if isinstance(value, torch.Tensor) and value.dim() else 0
    return torch.get_num_threads() * FLASH_Q_BLOCK * (FLASH_KV_BLOCK + width + 2) * 8


def _index(self: Any, indices: Any = (), *args: Any, out: Any = None, **kwargs: Any) -> int:
    return sum(t.numel() * max(t.dim(), 1) * 8 for t in _tensors(indices) if t.dtype in (torch.bool, torch.uint8))


def _cdist(x1: Any, x2: Any, *args: Any, out: Any = None, **kwargs: Any) -> int:
    return sum((_numel(t) + (t.shape[-2] * 2 if t.dim() >= 2 else 0)) * t.element_size()
               for t in (x1, x2) if isinstance(t, torch.Tensor))


def _fft(self: Any, *args: Any, out: Any = None, **kwargs: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(out))


def _embedding_bag(weight: Any, indices: Any, *args: Any, out: Any = None, **kwargs: Any) -> int:
    return _numel(indices) * 16


def _repeat_interleave(repeats: Any, *args: Any, out: Any = None, **kwargs: Any) -> int:
    if not isinstance(repeats, torch.Tensor) and args and isinstance(args[0], torch.Tensor):
        repeats = args[0]  # the self_Tensor overload: (self, repeats, ...)
    return _numel(repeats) * 8


_SORTS = ("sort", "argsort", "topk", "msort", "kthvalue", "median", "nanmedian", "mode", "_unique", "_unique2",
          "unique_consecutive", "unique_dim")

#: ``aten.<op>`` -> workspace bound of one call (bytes), from its arguments and (keyword ``out``) its outputs.
_MODELS: dict[str, Callable[..., int]] = {
    "aten.convolution": _aten_convolution,
    "aten._convolution": _aten_convolution,
    **{f"aten.conv{d}d": _convolution for d in (1, 2, 3)},
    **{f"aten.conv_transpose{d}d": _conv_transpose for d in (1, 2, 3)},
    **{f"aten.{op}": _sort for op in _SORTS},
    "aten._scaled_dot_product_flash_attention_for_cpu": _flash,
    "aten.index": _index,
    "aten.cdist": _cdist,
    "aten._cdist_forward": _cdist,
    **{f"aten.{op}": _fft for op in ("_fft_r2c", "_fft_c2r", "_fft_c2c")},
    "aten.embedding_bag": _embedding_bag,
    "aten._embedding_bag": _embedding_bag,
    "aten._embedding_bag_forward_only": _embedding_bag,
    "aten.repeat_interleave": _repeat_interleave,
}

_CACHE: dict[Any, Callable[..., int] | None] = {}


def _model(func: Any) -> Callable[..., int] | None:
    try:
        return _CACHE[func]
    except KeyError:
        pass
    except TypeError:  # unhashable
        return None
    schema = getattr(func, "_schema", None)
    model = _MODELS.get(schema.name.replace("::", ".")) if schema is not None else None
    _CACHE[func] = model
    return model


def workspace_bytes(func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> int:
    """Upper bound of the scratch memory ``func`` allocates beyond its outputs for these arguments (0: none
    modelled). ``out`` is the op's output (fake or real; ``None`` when unknown)."""
    model = _model(func)
    if model is None:
        return 0
    try:
        size = model(*args, **{k: v for k, v in kwargs.items() if k != "out"}, out=out)
        return size if isinstance(size, torch.SymInt) else int(size)  # symbolic sizes stay expressions
    except (TypeError, ValueError, IndexError, RuntimeError):
        return 0  # arguments the kernel refuses itself


def has_workspace(func: Any) -> bool:
    """Whether ``func`` has a workspace model."""
    return _model(func) is not None


__all__ = ["FLASH_KV_BLOCK", "FLASH_Q_BLOCK", "has_workspace", "workspace_bytes"]
