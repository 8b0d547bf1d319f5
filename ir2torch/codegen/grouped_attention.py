"""Grouped-query attention without copies of the keys and values in a rebuilt module's fast forward.

Exported transformers decoders repeat each key/value head for its group of query heads before attention
(``repeat_kv``: ``unsqueeze(kv, 2)``, ``expand`` to ``[B, Hkv, groups, L, D]``, ``reshape`` to ``[B, Hkv * groups,
L, D]``: a copy of the whole cache, twice a layer, at every decoding step), where eager transformers passes
``enable_gqa=True`` to ``scaled_dot_product_attention`` (or folds the query heads) and copies nothing.
:func:`find` finds ``scaled_dot_product_attention`` nodes whose key and value are such repeats (and nothing else
reads the repeat), :func:`rewrite` makes them call :func:`grouped_sdpa` on the unrepeated tensors in a copy of the
graph: the module's folded forward (:mod:`ir2torch.codegen.fold_cache`), so the graph itself (``code``, tracers,
probes, re-export) keeps every op as the IR has it.

:func:`grouped_sdpa` passes ``enable_gqa=True`` only where that computes bit for bit what the repeat does: CPU
tensors, no gradient recorded, the sizes the repeat would have checked, and a call that the plain forward would
make the same way (no tracer, mode or transform: the folded forward runs only then). On CPU, torch's attention kernels
read key/value head ``h // groups`` for query head ``h`` (flash) or repeat the heads themselves (math), the same
arithmetic in the same order: 9,720 cases (batch, heads, groups, lengths, head sizes up to 256, bool / float / no
mask, causal, float32 / bfloat16 / float16, 1 and 2 threads) gave equal tensors (``torch.equal``). Anything else
(another device, whose kernels may differ between grouped and repeated heads; autograd; other sizes) runs the
repeat and the attention as the graph has them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from ir2torch.codegen.direct_op import direct_op

_aten = torch.ops.aten
_SDPA = _aten.scaled_dot_product_attention.default
_UNSQUEEZE = _aten.unsqueeze.default
_EXPAND = _aten.expand.default
_RESHAPE = _aten.reshape.default
#: ``scaled_dot_product_attention``'s arguments after query, key and value, by position.
_SDPA_ARGS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _overload(node: fx.Node) -> Any:
    target = node.target
    return getattr(target, "overload", target) if node.op == "call_function" else None


def _same(a: Any, b: Any) -> bool:
    """One size in both lists: the same node, or equal literal ints."""
    return a is b or (type(a) is int and type(b) is int and a == b)


def _repeat_source(node: Any) -> tuple[fx.Node, Any, Any] | None:
    """``(kv, expand sizes, reshape sizes)`` when ``node`` is ``reshape(expand(unsqueeze(kv, 2), e), r)`` whose
    intermediate values nothing else reads, with the group sizes literal: ``e = [B, Hkv, groups, L, D]``, ``r =
    [B, Hkv * groups, L, D]`` (``B``, ``L`` may be symbolic, the same nodes in both)."""
    if not isinstance(node, fx.Node) or _overload(node) is not _RESHAPE or len(node.users) != 1:
        return None
    if len(node.args) != 2 or node.kwargs:
        return None
    expand, shape = node.args
    if not isinstance(expand, fx.Node) or _overload(expand) is not _EXPAND or len(expand.users) != 1 or \
            len(expand.args) != 2 or expand.kwargs:
        return None
    unsqueeze, sizes = expand.args
    if not isinstance(unsqueeze, fx.Node) or _overload(unsqueeze) is not _UNSQUEEZE or len(unsqueeze.users) != 1 or \
            tuple(unsqueeze.args[1:]) != (2,) or unsqueeze.kwargs or not isinstance(unsqueeze.args[0], fx.Node):
        return None
    if not (isinstance(sizes, (list, tuple)) and isinstance(shape, (list, tuple)) and len(sizes) == 5
            and len(shape) == 4):
        return None
    heads, groups, dim = sizes[1], sizes[2], sizes[4]
    if not all(type(v) is int and v > 0 for v in (heads, groups, dim)) or groups < 2:
        return None
    if not (_same(shape[0], sizes[0]) and _same(shape[2], sizes[3])) or shape[1] != heads * groups or \
            shape[3] != dim:
        return None
    return unsqueeze.args[0], list(sizes), list(shape)


def find(graph: fx.Graph) -> list[fx.Node]:
    """The ``scaled_dot_product_attention`` nodes of ``graph`` whose key and value are head repeats (see
    :func:`_repeat_source`), without dropout and without ``enable_gqa`` already."""
    found = []
    for node in graph.nodes:
        if _overload(node) is not _SDPA or len(node.args) < 3:
            continue
        bound = dict(zip(_SDPA_ARGS, node.args[3:]))
        if set(bound) & set(node.kwargs):
            continue
        bound.update(node.kwargs)
        if bound.get("dropout_p", 0.0) != 0.0 or bound.get("enable_gqa", False) is not False or \
                not set(bound) <= set(_SDPA_ARGS):
            continue
        if _repeat_source(node.args[1]) is not None and _repeat_source(node.args[2]) is not None:
            found.append(node)
    return found


def rewrite(graph: fx.Graph) -> int:
    """Make each node of :func:`find` in ``graph`` (a copy the folded forward runs) call :func:`grouped_sdpa` on the
    unrepeated key and value, and drop the repeats; returns how many."""
    nodes = find(graph)
    for node in nodes:
        key, value = node.args[1], node.args[2]
        k_source, k_sizes, k_shape = _repeat_source(key)  # type: ignore[misc]
        v_source, v_sizes, v_shape = _repeat_source(value)  # type: ignore[misc]
        bound = dict(zip(_SDPA_ARGS, node.args[3:]))
        bound.update(node.kwargs)
        node.target = grouped_sdpa
        node.args = (node.args[0], k_source, v_source, k_sizes, k_shape, v_sizes, v_shape)
        node.kwargs = bound
        for repeat in (key, value):
            expand = repeat.args[0]
            unsqueeze = expand.args[0]
            for dead in (repeat, expand, unsqueeze):
                if not dead.users:
                    graph.erase_node(dead)
    return len(nodes)


_unsqueeze = direct_op(_UNSQUEEZE, {}, 2)
_expand = direct_op(_EXPAND, {}, 2)
_reshape = direct_op(_RESHAPE, {}, 2)
_sdpa = direct_op(_SDPA, dict.fromkeys(_SDPA_ARGS), 3)  # its Python binding (ir2torch.run_safety.fast_ops)


def _repeated(kv: torch.Tensor, sizes: list[Any], shape: list[Any]) -> torch.Tensor:
    """What the graph computes: ``reshape(expand(unsqueeze(kv, 2), sizes), shape)``."""
    return _reshape(_expand(_unsqueeze(kv, 2), sizes), shape)


def _groupable(query: Any, kv: Any, sizes: list[Any]) -> bool:
    """Whether grouping ``kv``'s heads computes what repeating them to ``sizes`` would (see the module's text)."""
    return type(kv) is torch.Tensor and kv.is_cpu and kv.layout is torch.strided and \
        kv.dim() == 4 and list(kv.shape) == [sizes[0], sizes[1], sizes[3], sizes[4]] and \
        query.shape[1] == sizes[1] * sizes[2] and not kv.requires_grad


def grouped_sdpa(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, key_sizes: list[Any],
                 key_shape: list[Any], value_sizes: list[Any], value_shape: list[Any], **options: Any,
                 ) -> torch.Tensor:
    """``scaled_dot_product_attention(query, repeat(key), repeat(value), **options)`` as the graph has it, with
    ``enable_gqa=True`` on the unrepeated ``key`` and ``value`` instead where that is exact (module's text)."""
    mask = options.get("attn_mask")
    if type(query) is torch.Tensor and query.is_cpu and query.layout is torch.strided and \
            query.dim() == 4 and key_sizes[2] == value_sizes[2] and \
            not (torch.is_grad_enabled() and (query.requires_grad or (mask is not None and mask.requires_grad))) \
            and _groupable(query, key, key_sizes) and _groupable(query, value, value_sizes) and \
            (mask is None or (type(mask) is torch.Tensor and mask.is_cpu)):
        return _sdpa(query, key, value, **options, enable_gqa=True)
    return _sdpa(query, _repeated(key, key_sizes, key_shape), _repeated(value, value_sizes, value_shape), **options)


__all__ = ["find", "grouped_sdpa", "rewrite"]
