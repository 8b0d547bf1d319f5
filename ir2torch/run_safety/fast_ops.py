"""Python bindings that run exactly one ATen overload, for the ops small models call most.

A boxed call of an ATen overload (``OpOverload._op``) converts every argument to an ``IValue`` and goes through
the dispatcher's boxed path: about 0.4-1 us more per call than the ``torch.*`` / ``Tensor.*`` binding eager
PyTorch calls, which parses its arguments and calls the unboxed kernel. Each entry below maps an overload to
the binding that calls that same overload for the same positional arguments; keywords are only passed on when
the binding spells them as the schema does (the second item of each entry).
:func:`ir2torch.rebuild.graphs.direct_op` uses an
entry only when a node's keywords are among those; anything else calls the ``OpOverload``. The graph's target still
compares equal to the overload (:class:`ir2torch.rebuild.graphs.DirectOp`), and re-export records the same overload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_nn = torch._C._nn

_FACTORY = ("dtype", "layout", "device", "pin_memory")  # a factory's keyword-only tensor options


def _split_with_sizes(self: torch.Tensor, split_sizes: list[int], dim: int = 0) -> list[torch.Tensor]:
    """``torch.split_with_sizes``, as the list the overload returns (the binding returns a tuple)."""
    return list(torch.split_with_sizes(self, split_sizes, dim))


def _sort(self: torch.Tensor, dim: int = -1, descending: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.sort``, as the plain tuple the overload returns (the binding returns a ``torch.return_types``)."""
    return tuple(torch.sort(self, dim, descending))  # type: ignore[return-value]


def _topk(self: torch.Tensor, k: int, dim: int = -1, largest: bool = True,
          sorted: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.topk``, as the plain tuple the overload returns."""
    return tuple(torch.topk(self, k, dim, largest, sorted))  # type: ignore[return-value]


def _chunk(self: torch.Tensor, chunks: int, dim: int = 0) -> list[torch.Tensor]:
    """``torch.chunk``, as the list the overload returns (the binding returns a tuple)."""
    return list(torch.chunk(self, chunks, dim))


#: Bindings that take fewer positional arguments than their overload's schema (the rest only as keywords):
#: ``Tensor.to(dtype, non_blocking, copy, *, memory_format)`` while ``aten.to.dtype`` takes ``memory_format``
#: positionally (Qwen3-Next's ``.to(dtype, memory_format=...)`` exports as five positional arguments).
POSITIONAL_LIMITS: dict[str, int] = {"aten.to.dtype": 4, "aten.to.device": 5}

#: ``"aten.<name>.<overload>"`` -> (binding, keywords it takes under the schema's names).
FAST: dict[str, tuple[Callable[..., Any], frozenset[str]]] = {
    name: (fn, frozenset(kw)) for name, fn, kw in [
        ("aten.add.Tensor", torch.add, ("alpha",)),
        ("aten.sub.Tensor", torch.sub, ("alpha",)),
        ("aten.mul.Tensor", torch.mul, ()),
        ("aten.div.Tensor", torch.div, ()),
        ("aten.neg.default", torch.neg, ()),
        ("aten.rsqrt.default", torch.rsqrt, ()),
        ("aten.exp.default", torch.exp, ()),
        ("aten.tanh.default", torch.tanh, ()),
        ("aten.cos.default", torch.cos, ()),
        ("aten.sin.default", torch.sin, ()),
        ("aten.sigmoid.default", torch.sigmoid, ()),
        ("aten.relu.default", torch.relu, ()),
        ("aten.pow.Tensor_Scalar", torch.pow, ()),
        ("aten.matmul.default", torch.matmul, ()),
        ("aten.bmm.default", torch.bmm, ()),
        ("aten.mm.default", torch.mm, ()),
        ("aten.view.default", torch.Tensor.view, ()),
        ("aten.reshape.default", torch.reshape, ()),
        ("aten.transpose.int", torch.transpose, ()),
        ("aten.permute.default", torch.permute, ()),
        ("aten.unsqueeze.default", torch.unsqueeze, ()),
        ("aten.squeeze.dim", torch.squeeze, ()),
        ("aten.select.int", torch.select, ()),
        ("aten.expand.default", torch.Tensor.expand, ("implicit",)),
        ("aten.contiguous.default", torch.Tensor.contiguous, ("memory_format",)),
        ("aten.clone.default", torch.clone, ("memory_format",)),
        ("aten.cat.default", torch.cat, ()),
        ("aten.mean.dim", torch.mean, ("keepdim", "dtype")),
        ("aten.sum.dim_IntList", torch.sum, ("keepdim", "dtype")),
        ("aten.softmax.int", torch.softmax, ("dtype",)),
        ("aten.dropout.default", torch.dropout, ()),
        ("aten.to.dtype", torch.Tensor.to, ("non_blocking", "copy", "memory_format")),
        ("aten.to.device", torch.Tensor.to, ("non_blocking", "copy", "memory_format")),
        ("aten.linear.default", _nn.linear, ("bias",)),
        ("aten.gelu.default", _nn.gelu, ("approximate",)),
        ("aten.silu.default", _nn.silu, ()),
        ("aten.scaled_dot_product_attention.default", _nn.scaled_dot_product_attention,
         ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")),
        # mask building, position ids, dtype checks (small transformer graphs run these on every call)
        ("aten.arange.default", torch.arange, _FACTORY),
        ("aten.zeros.default", torch.zeros, _FACTORY),
        ("aten.full.default", torch.full, _FACTORY),
        ("aten.new_ones.default", torch.Tensor.new_ones, _FACTORY),
        ("aten.ge.Scalar", torch.ge, ()), ("aten.gt.Scalar", torch.gt, ()),
        ("aten.le.Scalar", torch.le, ()), ("aten.lt.Scalar", torch.lt, ()),
        ("aten.eq.Scalar", torch.eq, ()), ("aten.ne.Scalar", torch.ne, ()),
        ("aten.__and__.Tensor", torch.Tensor.__and__, ()),
        ("aten.where.self", torch.where, ()),
        ("aten.where.ScalarOther", torch.where, ()),
        ("aten.masked_fill.Scalar", torch.masked_fill, ()),
        ("aten._assert_tensor_metadata.default", torch._assert_tensor_metadata,
         ("size", "stride", "dtype", "device", "layout")),
        ("aten.stack.default", torch.stack, ()),
        ("aten.flatten.using_ints", torch.flatten, ()),
        ("aten.reshape_as.default", torch.Tensor.reshape_as, ()),
        ("aten.layer_norm.default", torch.layer_norm, ()),
        ("aten.addmm.default", torch.addmm, ("beta", "alpha")),
        ("aten.embedding.default", torch.embedding, ()),
        ("aten.conv1d.default", torch.conv1d, ()),
        ("aten.conv2d.default", torch.conv2d, ()),
        ("aten.conv2d.padding", torch.conv2d, ()),
        # residual adds, in-place updates and the rest of the convolutional and windowed models' ops
        ("aten.add_.Tensor", torch.Tensor.add_, ("alpha",)),
        ("aten.mul_.Tensor", torch.Tensor.mul_, ()),
        ("aten.copy_.default", torch.Tensor.copy_, ("non_blocking",)),
        ("aten.fill_.Tensor", torch.Tensor.fill_, ()),
        ("aten.clamp.default", torch.clamp, ()),
        ("aten.clamp_min.default", torch.clamp_min, ()),
        ("aten.expand_as.default", torch.Tensor.expand_as, ()),
        ("aten.roll.default", torch.roll, ()),
        ("aten.pad.default", _nn.pad, ()),
        ("aten.linalg_vector_norm.default", torch._C._linalg.linalg_vector_norm, ("dtype",)),
        ("aten.split_with_sizes.default", _split_with_sizes, ()),
        # mixture-of-experts routing (Mixtral's router and experts run these at every decoding step)
        ("aten.topk.default", _topk, ()),
        ("aten.div_.Tensor", torch.Tensor.div_, ()),
        ("aten.sort.default", _sort, ()),
        ("aten.floor_divide.default", torch.floor_divide, ()),
        ("aten.histc.default", torch.histc, ()),
        ("aten.cumsum.default", torch.cumsum, ("dtype",)),
        ("aten.chunk.default", _chunk, ()),
        ("aten.index_put_.default", torch.Tensor.index_put_, ("accumulate",)),
        ("aten.empty_like.default", torch.empty_like, (*_FACTORY, "memory_format")),  # zero-filled when bound
    ]
}


def fast_binding(overload: Any, kwargs: dict[str, Any], positional: int = 0) -> Callable[..., Any] | None:
    """The binding that runs ``overload`` for a call with these keywords and ``positional`` positional arguments,
    or ``None`` (take the boxed path: a call the schema does not take fails there, as it always did)."""
    entry = FAST.get(str(overload))
    if entry is None or not kwargs.keys() <= entry[1]:
        return None
    limit = POSITIONAL_LIMITS.get(str(overload))
    if limit is None:
        limit = sum(1 for a in overload._schema.arguments if not a.kwarg_only)
    if positional > limit:
        return None
    return entry[0]


__all__ = ["FAST", "POSITIONAL_LIMITS", "fast_binding"]
