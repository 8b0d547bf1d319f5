"""Folding a batch norm into the convolution or Linear that *follows* it (``fold_batchnorm(..., into_next=True)``).

An eval-mode batch norm computes ``y = s * x + t`` per channel (``s = gamma / sqrt(var + eps)``,
``t = beta - mean * s``). When its output goes straight into a layer that reads each input channel linearly and
adds nothing at the border (a Conv1d/2d/3d without padding, or a Linear on a 2-d input), the layer of ``y`` is a
layer of ``x`` with ``W' = W * s`` along its input channels (within each group) and ``b' = b + sum(W * t)``
(over the input channels and the kernel); computed in float64. Padding would not fold: the layer would pad ``x``
with zeros where the original padded ``y`` with zeros, that is ``x`` with ``-t / s``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from common.ir import IR
from common.provenance import PROVENANCE_KEY

from .core import Match, NodeRef, call_sites, callee, graph_of
from .fold import bn_affine, has_running_stats, remove_bn
from .ops import replace_nodes
from .session import Session

CONVS = ("conv1d", "conv2d", "conv3d")


def _no_padding(padding: Any) -> bool:
    if padding == "valid":
        return True
    if isinstance(padding, int):
        return padding == 0
    return isinstance(padding, (list, tuple)) and all(p == 0 for p in padding)


def why_not_next(ir: IR, bn_ref: NodeRef, layer_ref: NodeRef) -> str | None:
    """Why the batch norm at ``bn_ref`` cannot be folded exactly into the layer called at ``layer_ref`` that reads
    its output, or ``None``."""
    bn_key = callee(graph_of(ir, bn_ref).node(bn_ref.node))
    layer_key = callee(graph_of(ir, layer_ref).node(layer_ref.node))
    sites = call_sites(ir)
    if len(sites.get(layer_key or "", [])) != 1 or len(sites.get(bn_key or "", [])) != 1:
        return "a module of the pair is called more than once"
    bn, layer = ir[bn_key], ir[layer_key]
    if not has_running_stats(bn):
        return "the batch norm has no running statistics"
    channels = layer.data.get("in_features" if layer.type == "linear" else "in_channels")
    if bn.data.get("num_features") != channels:
        return f"the batch norm has {bn.data.get('num_features')} features, the layer reads {channels}"
    if layer.type in CONVS and not _no_padding(layer.data.get("padding", 0)):
        return "the convolution pads its input (zeros of the normalized value are not zeros of the input)"
    if layer.type == "linear":
        shape = (graph_of(ir, bn_ref).node(bn_ref.node).get("meta") or {}).get("shape")
        if not (isinstance(shape, list) and len(shape) == 2):
            return "a Linear reads a batch norm's channels as its features only on a 2-d input (N, C)"
    return None


def _folded(layer_path: str, bn_path: str, *, conv: bool, groups: int, bias: bool, affine: bool, eps: float):
    def fold(original: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        w = original[f"{layer_path}weight"]
        wide = torch.float64
        scale, shift = bn_affine(original, bn_path, affine=affine, eps=eps)
        out = w.shape[0]
        b = original[f"{layer_path}bias"].to(wide) if bias else torch.zeros(out, dtype=wide)
        if conv:  # [out, in / groups, k...]: input channel g * (in / groups) + j is column j of group g
            per = w.shape[1]
            ones = [1] * (w.dim() - 2)
            grouped = w.to(wide).reshape(groups, out // groups, per, *w.shape[2:])
            s = scale.reshape(groups, 1, per, *ones)
            t = shift.reshape(groups, 1, per, *ones)
            new_w = (grouped * s).reshape(w.shape)
            new_b = b + (grouped * t).sum(dim=tuple(range(2, grouped.dim()))).reshape(out)
        else:
            new_w = w.to(wide) * scale.reshape(1, -1)
            new_b = b + w.to(wide) @ shift
        return {"weight": new_w.to(w.dtype), "bias": new_b.to(w.dtype)}

    return fold


def fold_into_next(s: Session, bn_ref: NodeRef, layer_ref: NodeRef, how: str) -> None:
    """Fold the batch norm called at ``bn_ref`` into the Conv/Linear leaf called at ``layer_ref`` right after it (see
    the module docstring); the batch norm's node goes.

    Raises:
        RewriteError: no state was given.
        StateDictError: the input state lacks a tensor the fold reads.
    """
    bn_key = callee(graph_of(s.ir, bn_ref).node(bn_ref.node))
    layer_key = callee(graph_of(s.ir, layer_ref).node(layer_ref.node))
    assert bn_key is not None and layer_key is not None
    layer, bn = s.ir[layer_key], s.ir[bn_key]
    s.need_state("fold_batchnorm", layer_key)
    prov = s.provenance([bn_key, layer_key], True, None)
    prefix = "" if layer_key == "root" else layer_key + "."
    fold = _folded(prefix, bn_key, conv=layer.type in CONVS, groups=int(layer.data.get("groups", 1)),
                   bias=bool(layer.data.get("bias", True)), affine=bool(bn.data.get("affine", True)),
                   eps=float(bn.data.get("eps", 1e-5)))
    meta = {k: v for k, v in layer.meta.items() if k != PROVENANCE_KEY}
    count = len(s.changes)
    replace_nodes(s, Match((layer_ref,), (layer_key,)), type=layer.type, key=layer_key,
                  data={**layer.data, "bias": True}, state_fn=fold, meta=meta, split=None, record=False, pass_name=None)
    del s.changes[count:]
    s.ir[layer_key].meta[PROVENANCE_KEY] = prov
    remove_bn(s, bn_ref)
    s.changes.append(f"{layer_key}: {bn.type} + {layer.type} -> {layer.type} (the batch norm before it){how}")


__all__ = ["fold_into_next", "why_not_next"]
