"""``fuse_qkv``: one Linear for the separate query/key/value projections of an attention block."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import torch

from common.ir import IR
from common.provenance import PROVENANCE_KEY

from .core import Match, NodeRef, Where, all_graphs, call_sites, callee, matches_where
from .ops import replace_nodes
from .passes import Rewritten
from .session import Session

#: Attribute names of the three projections, and the name of the fused one.
PROJECTIONS: tuple[tuple[tuple[str, str, str], str], ...] = (
    (("query", "key", "value"), "qkv"),  # BERT, RoBERTa, ViT, ...
    (("q_proj", "k_proj", "v_proj"), "qkv_proj"),  # Llama, Mistral, Qwen, ...
    (("q", "k", "v"), "qkv"),
)


def _groups(ir: IR, key: str, graph, prefix: str) -> dict[tuple, dict[str, NodeRef]]:
    """Linear calls of direct children, grouped by the one value they all read."""
    out: dict[tuple, dict[str, NodeRef]] = {}
    for name, attrs in graph.graph.nodes(data=True):
        target = callee(attrs)
        if target is None or attrs["type"] != "linear" or not target.startswith(prefix) or "." in target[len(prefix):]:
            continue
        edges = list(graph.graph.in_edges(name, data=True))
        if len(edges) != 1 or attrs.get("kwargs", {}) or len(attrs.get("args", [None])) != 1:
            continue
        src, _, data = edges[0]
        out.setdefault((src, data.get("src_index")), {})[target[len(prefix):]] = name
    return out


def _concat(keys: Sequence[str], with_bias: Sequence[bool]):
    def fuse(original: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        weights = [original[f"{k}.weight"] for k in keys]
        out = {"weight": torch.cat(weights, 0)}
        if any(with_bias):
            out["bias"] = torch.cat([original[f"{k}.bias"] if b else torch.zeros(w.shape[0], dtype=w.dtype)
                                     for k, b, w in zip(keys, with_bias, weights)], 0)
        return out

    return fuse


def fuse_qkv(ir: IR, state: Mapping[str, torch.Tensor] | None, *,
             projections: Sequence[tuple[tuple[str, str, str], str]] = PROJECTIONS, where: Where = None,
             allow: Iterable[str] | None = None) -> Rewritten:
    """Fuse the query/key/value Linears of every attention block into one Linear with split outputs.

    In each graph, three Linear children named as in ``projections`` (``query``/``key``/``value``,
    ``q_proj``/``k_proj``/``v_proj``, ...), each called once on the same value, become one Linear
    ``<block>.qkv`` (or ``qkv_proj``) whose weight is their concatenation (a missing bias is zeros);
    three ``aten.slice.Tensor`` nodes, named after the old calls, give each consumer its part. Sizes may
    differ (grouped-query attention). ``where`` selects blocks by key.

    Raises:
        RewriteError: no state was given, or the result does not validate.
        StateDictError: ``state`` does not fit ``ir``.
    """
    s = Session(ir, state, allow=allow, pass_name="fuse_qkv")
    sites = call_sites(ir)
    result_skipped: list[str] = []
    for key, variant, graph in all_graphs(ir):
        if not matches_where(where, key):
            continue
        prefix = "" if key == "root" else key + "."
        for group in _groups(ir, key, graph, prefix).values():
            for names, fused in projections:
                if not all(n in group for n in names):
                    continue
                keys = [prefix + n for n in names]
                impls = [ir[k] for k in keys]
                if any(len(sites.get(k, [])) != 1 for k in keys) or prefix + fused in ir or \
                        len({i.data.get("in_features") for i in impls}) != 1 or \
                        len({i.state["weight"]["dtype"] for i in impls}) != 1:
                    result_skipped.append(f"{key}: {', '.join(names)} (called twice, differing inputs or dtypes, "
                                          f"or {fused!r} taken)")
                    continue
                s.need_state("fuse_qkv", key)
                sizes = [int(i.data["out_features"]) for i in impls]
                bias = [bool(i.data.get("bias", True)) for i in impls]
                meta = {k: v for k, v in impls[0].meta.items() if k != PROVENANCE_KEY} | {"source": prefix + fused}
                match = Match(tuple(NodeRef(key, group[n], variant) for n in names), tuple(keys))
                replace_nodes(s, match, type="linear", key=prefix + fused, meta=meta, split=(-1, sizes),
                              data={"in_features": impls[0].data["in_features"], "out_features": sum(sizes),
                                    "bias": any(bias)},
                              state_fn=_concat(keys, bias), record=True, pass_name=None)
    result = Rewritten(*s.finish(), s.changes)
    result.skipped = result_skipped
    return result


__all__ = ["PROJECTIONS", "fuse_qkv"]
