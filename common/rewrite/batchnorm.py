"""``fold_batchnorm``: fold every eval-mode BatchNorm into the Conv or Linear it follows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch

from common.ir import IR
from common.provenance import PROVENANCE_KEY

from .core import Match, Where, call_sites, graph_of
from .find import find
from .ops import replace_nodes
from .passes import Rewritten
from .session import Session

CONVS = ("conv1d", "conv2d", "conv3d", "linear")
NORMS = ("batchnorm1d", "batchnorm2d", "batchnorm3d")


def _why_not(ir: IR, match: Match) -> str | None:
    """Why the match cannot be folded exactly, or ``None``."""
    conv_key, bn_key = match.implementations
    sites = call_sites(ir)
    if len(sites.get(conv_key, [])) != 1 or len(sites.get(bn_key, [])) != 1:
        return "a module of the pair is called more than once"
    conv, bn = ir[conv_key], ir[bn_key]
    out = conv.data.get("out_features" if conv.type == "linear" else "out_channels")
    if not bn.data.get("track_running_stats", True) or "running_var" not in bn.state:
        return "the batch norm has no running statistics (it normalizes with batch statistics)"
    if bn.data.get("num_features") != out:
        return f"the batch norm has {bn.data.get('num_features')} features, the layer {out} outputs"
    if conv.type == "linear":
        shape = (graph_of(ir, match.nodes[1]).node(match.nodes[1].node).get("meta") or {}).get("shape")
        if not isinstance(shape, list) or len(shape) != 2:
            return "a Linear's output is normalized per feature only when it is 2-d (N, C)"
    return None


def _fold(conv_key: str, bn_key: str, bias: bool, affine: bool, eps: float):
    def fold(original: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        w = original[f"{conv_key}.weight"]
        wide = torch.float64
        mean, var = original[f"{bn_key}.running_mean"].to(wide), original[f"{bn_key}.running_var"].to(wide)
        gamma = original[f"{bn_key}.weight"].to(wide) if affine else torch.ones_like(mean)
        beta = original[f"{bn_key}.bias"].to(wide) if affine else torch.zeros_like(mean)
        b = original[f"{conv_key}.bias"].to(wide) if bias else torch.zeros_like(mean)
        scale = gamma / torch.sqrt(var + eps)
        weight = w.to(wide) * scale.reshape(-1, *([1] * (w.dim() - 1)))
        return {"weight": weight.to(w.dtype), "bias": ((b - mean) * scale + beta).to(w.dtype)}

    return fold


def fold_batchnorm(ir: IR, state: Mapping[str, torch.Tensor] | None, *, where: Where = None,
                   allow: Iterable[str] | None = None) -> Rewritten:
    """Fold every BatchNorm1d/2d/3d that directly follows a Conv1d/2d/3d or Linear whose only consumer it
    is, in every graph of the hierarchy (``Sequential``\\ s included): the layer gets
    ``w * gamma / sqrt(var + eps)`` and bias ``(b - mean) * gamma / sqrt(var + eps) + beta`` (computed in
    float64), and the BatchNorm goes. Eval semantics: the result computes the model in eval mode.

    Pairs that cannot be folded exactly are left alone and listed in ``skipped`` of the result
    (a module called twice, a BatchNorm without running statistics, a Linear whose output is not 2-d),
    and so is every other BatchNorm left, with what it follows.

    Returns:
        ``(new_ir, new_state)`` with ``changes`` (one line per fold) and ``skipped``.

    Raises:
        RewriteError: no state was given, or the result does not validate.
        StateDictError: ``state`` does not fit ``ir``.
    """
    s = Session(ir, state, allow=allow, pass_name="fold_batchnorm")
    skipped: list[str] = []
    for match in find(ir, [CONVS, NORMS], where=where):
        why = _why_not(s.ir, match)
        if why is not None:
            skipped.append(f"{match.implementations[0]} -> {match.implementations[1]}: {why}")
            continue
        conv_key, bn_key = match.implementations
        conv, bn = s.ir[conv_key], s.ir[bn_key]
        s.need_state("fold_batchnorm", conv_key)
        fold = _fold(conv_key, bn_key, bool(conv.data.get("bias", True)), bool(bn.data.get("affine", True)),
                     float(bn.data.get("eps", 1e-5)))
        meta = {k: v for k, v in conv.meta.items() if k != PROVENANCE_KEY}
        replace_nodes(s, match, type=conv.type, key=conv_key, data={**conv.data, "bias": True}, state_fn=fold,
                      meta=meta, split=None, record=True, pass_name=None)
    result = Rewritten(*s.finish(), s.changes)
    result.skipped = skipped + _not_after_a_layer(result.ir, skipped)
    return result


def _not_after_a_layer(ir: IR, skipped: list[str]) -> list[str]:
    """The batch norms left that were not already reported: what each one follows."""
    out = []
    for ref_key, refs in call_sites(ir).items():
        if ir[ref_key].type not in NORMS or any(line.split(" -> ")[1].startswith(ref_key + ":") for line in skipped):
            continue
        for ref in refs:
            graph = graph_of(ir, ref)
            before = [graph.node(u)["type"] if graph.node(u)["type"] != "function" else graph.node(u)["implementation"]
                      for u, _, _ in graph.in_edges(ref.node)]
            out.append(f"{ref_key}: follows {', '.join(before) or 'nothing'}, not a Conv1d/2d/3d or Linear "
                       "(a subclass is a 'module', rebuilt from its graph)")
    return out


__all__ = ["CONVS", "NORMS", "fold_batchnorm"]
