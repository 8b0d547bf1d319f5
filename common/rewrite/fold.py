"""The edits behind ``fold_batchnorm``: the folded tensors, folding into a layer leaf or into an ``nn.Conv2d``
subclass rebuilt from its graph, and removing the batch norm (on a :class:`~common.rewrite.session.Session`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from common.ir import IR, Implementation
from common.provenance import PROVENANCE_KEY
from common.values import Ref

from .core import Match, NodeRef, callee, fresh_name, graph_of, ordered, rebuild_graph
from .ops import remove_node, replace_nodes
from .session import Session

if TYPE_CHECKING:
    from .fold_own import OwnNorm

#: Function targets computing one convolution; the bias is argument 2 of each.
CONV_FUNCTIONS = ("aten.conv1d.default", "aten.conv2d.default", "aten.conv3d.default", "aten.conv1d.padding",
                  "aten.conv2d.padding", "aten.conv3d.padding", "aten.convolution.default")
Fold = Callable[[Mapping[str, torch.Tensor]], dict[str, torch.Tensor]]


def bn_affine(original: Mapping[str, torch.Tensor], bn_path: str, *, affine: bool, eps: float
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(scale, shift)`` of an eval-mode batch norm at state path ``bn_path`` (``"layer.bn"``), in float64: it
    computes ``x * scale + shift`` per channel."""
    wide = torch.float64
    mean, var = original[f"{bn_path}.running_mean"].to(wide), original[f"{bn_path}.running_var"].to(wide)
    gamma = original[f"{bn_path}.weight"].to(wide) if affine else torch.ones_like(mean)
    beta = original[f"{bn_path}.bias"].to(wide) if affine else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + eps)
    return scale, beta - mean * scale


def fold_tensors(weight: str, bias: str | None, bn_key: str, *, affine: bool, eps: float, groups: int = 1,
                 transposed: bool = False, names: tuple[str, str] = ("weight", "bias")) -> Fold:
    """A state transform giving the folded ``{weight, bias}`` (computed in float64) from the input state.

    ``weight`` / ``bias`` are the layer's state paths (``bias`` ``None``: the layer has none). The weight is
    scaled along its output channels: dim 0 (Conv, Linear), or for a transposed convolution (layout
    ``[in, out / groups, ...]``) dim 1 within each group.
    """
    def fold(original: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        w = original[weight]
        wide = torch.float64
        scale, shift = bn_affine(original, bn_key, affine=affine, eps=eps)
        b = original[bias].to(wide) if bias is not None else torch.zeros_like(scale)
        ones = [1] * (w.dim() - 2)
        if transposed:
            per_group = w.shape[1]
            grouped = w.to(wide).reshape(groups, w.shape[0] // groups, per_group, *w.shape[2:])
            new = (grouped * scale.reshape(groups, 1, per_group, *ones)).reshape(w.shape)
        else:
            new = w.to(wide) * scale.reshape(-1, *([1] * (w.dim() - 1)))
        return {names[0]: new.to(w.dtype), names[1]: (b * scale + shift).to(w.dtype)}

    return fold


def bn_options(bn: Implementation) -> dict[str, Any]:
    """``affine`` and ``eps`` of a batch norm implementation."""
    return {"affine": bool(bn.data.get("affine", True)), "eps": float(bn.data.get("eps", 1e-5))}


def has_running_stats(bn: Implementation) -> bool:
    """Whether a batch norm normalizes with running statistics in eval mode."""
    return bool(bn.data.get("track_running_stats", True)) and "running_var" in bn.state


def remove_bn(s: Session, bn_ref: NodeRef) -> None:
    """Remove the batch norm's node (its consumers read its input) without a line in ``changes``."""
    count = len(s.changes)
    remove_node(s, bn_ref, 0)
    del s.changes[count:]


def fold_into_leaf(s: Session, conv_ref: NodeRef, bn_ref: NodeRef, how: str, *, own: OwnNorm | None = None) -> None:
    """Fold the batch norm called at ``bn_ref`` into the Conv/ConvTranspose/Linear leaf called at ``conv_ref``
    (in any graph: the batch norm's node goes, its consumers read its input). With ``own``, the module called at
    ``bn_ref`` computes the batch norm in its own graph (:func:`common.rewrite.fold_own.own_norm`): its batch norm
    op goes, and the module stays with the rest of its graph (its activation).

    Raises:
        RewriteError: no state was given, or a module of the pair is also called from elsewhere.
        StateDictError: the input state lacks a tensor the fold reads.
    """
    conv_key, bn_key = callee(graph_of(s.ir, conv_ref).node(conv_ref.node)), callee(graph_of(s.ir, bn_ref)
                                                                                      .node(bn_ref.node))
    assert conv_key is not None and bn_key is not None
    conv, bn = s.ir[conv_key], s.ir[bn_key]
    s.need_state("fold_batchnorm", conv_key)
    prov = s.provenance([conv_key, bn_key], True, None)
    prefix = "" if conv_key == "root" else conv_key + "."
    fold = fold_tensors(prefix + "weight", prefix + "bias" if conv.data.get("bias", True) else None, bn_key,
                        groups=int(conv.data.get("groups", 1)), transposed=conv.type.startswith("convtranspose"),
                        **(own.options if own is not None else bn_options(bn)))
    meta = {k: v for k, v in conv.meta.items() if k != PROVENANCE_KEY}
    count = len(s.changes)
    replace_nodes(s, Match((conv_ref,), (conv_key,)), type=conv.type, key=conv_key, data={**conv.data, "bias": True},
                  state_fn=fold, meta=meta, split=None, record=False, pass_name=None)
    del s.changes[count:]
    s.ir[conv_key].meta[PROVENANCE_KEY] = prov
    _finish(s, bn_ref, bn_key, own)
    s.changes.append(f"{conv_key}: {conv.type} + {_label(bn, own)} -> {conv.type}{how}")


def _label(bn: Implementation, own: OwnNorm | None) -> str:
    return bn.type if own is None else f"the batch norm of {bn.name} ({own.op}{own.keeps})"


def _finish(s: Session, bn_ref: NodeRef, bn_key: str, own: OwnNorm | None) -> None:
    """Remove the folded batch norm: its call node, or the batch norm op inside a module computing its own."""
    if own is None or not own.keeps:  # nothing left but the identity: the module goes, as a plain BatchNorm does
        remove_bn(s, bn_ref)
        return
    from .fold_own import strip_norm

    prov = s.provenance([bn_key], True, None)
    strip_norm(s.ir[bn_key], own)
    s.ir[bn_key].meta[PROVENANCE_KEY] = prov


def conv_of_graph(ir: IR, key: str) -> tuple[str, str, str | None] | None:
    """``(conv node, weight state name, bias state name or None)`` when the graph of module ``key`` returns one
    (non-transposed) convolution of its own weight (and bias), each read by one ``get_attr`` feeding only it;
    else ``None``."""
    impl = ir.get(key, None)
    if impl is None or impl.type != "module" or impl.graph is None or len(impl.graphs()) != 1:
        return None
    g = impl.graph
    convs = [n for n, a in g.nodes(data=True) if a.get("type") == "function" and a.get("implementation") in
             CONV_FUNCTIONS]
    if len(convs) != 1:
        return None
    conv = convs[0]
    args = list(g.nodes[conv].get("args", []))
    outs = list(g.out_edges(conv, data=True))
    if len(args) < 2 or g.nodes[conv].get("kwargs") or len(outs) != 1 or outs[0][2].get("src_index") is not None:
        return None
    if g.nodes[outs[0][1]].get("type") != "output" or g.nodes[outs[0][1]].get("args") not in ([Ref(conv)],
                                                                                            [[Ref(conv)]]):
        return None
    if g.nodes[conv]["implementation"] == "aten.convolution.default" and (len(args) < 9 or args[6] is not False):
        return None  # a transposed convolution (or one whose flag is not a plain False)
    names = []
    for arg in (args[1], args[2] if len(args) > 2 else None):
        if arg is None:
            names.append(None)
            continue
        if not isinstance(arg, Ref) or arg.index is not None or g.nodes[arg.node].get("type") != "get_attr":
            return None
        target = g.nodes[arg.node].get("implementation")
        readers = [n for n, a in g.nodes(data=True) if a.get("type") == "get_attr" and a.get("implementation") ==
                   target]
        rec = impl.state.get(target)
        if readers != [arg.node] or g.out_degree(arg.node) != 1 or rec is None or rec.get("tie") is not None or \
                rec.get("kind") != "parameter":
            return None
        names.append(target)
    if names[0] is None:
        return None
    return conv, names[0], names[1]


def fold_into_graph(s: Session, module_ref: NodeRef, bn_ref: NodeRef, *, own: OwnNorm | None = None) -> None:
    """Fold the batch norm at ``bn_ref`` into the module called at ``module_ref``, whose graph computes one
    convolution (:func:`conv_of_graph`): its weight is scaled, its bias made or changed (a ``bias`` parameter
    and a ``get_attr`` of it are added when it had none).

    Raises:
        RewriteError: no state was given, or the batch norm is also called from elsewhere.
        StateDictError: the input state lacks a tensor the fold reads.
    """
    key = callee(graph_of(s.ir, module_ref).node(module_ref.node))
    bn_key = callee(graph_of(s.ir, bn_ref).node(bn_ref.node))
    assert key is not None and bn_key is not None
    found = conv_of_graph(s.ir, key)
    assert found is not None
    conv, weight, bias = found
    impl, bn = s.ir[key], s.ir[bn_key]
    s.need_state("fold_batchnorm", key)
    prov = s.provenance([key, bn_key], True, None)
    prefix = "" if key == "root" else key + "."
    new_bias = bias or fresh_name(impl.state, "bias")
    fold = fold_tensors(prefix + weight, prefix + bias if bias else None, bn_key, names=(weight, new_bias),
                        **(own.options if own is not None else bn_options(bn)))
    from .state import run_transform

    tensors = run_transform(fold, s.view(), key)
    if bias is None:
        rec = impl.state[weight]
        impl.state[new_bias] = {"kind": "parameter", "shape": [int(rec["shape"][0])], "dtype": rec["dtype"],
                                "requires_grad": bool(rec.get("requires_grad", True))}
        nodes, edges = ordered(impl)
        node = fresh_name([n for n, _ in nodes], new_bias)
        getter = {"type": "get_attr", "implementation": new_bias,
                  "meta": {"shape": [int(rec["shape"][0])], "dtype": rec["dtype"]}}
        weight_node = next(n for n, a in nodes if a.get("type") == "get_attr" and a["implementation"] == weight)
        at = [n for n, _ in nodes].index(weight_node) + 1
        nodes.insert(at, (node, getter))
        for name, attrs in nodes:
            if name == conv:
                args = list(attrs["args"])
                attrs["args"] = [*args[:2], Ref(node), *args[3:]] if len(args) > 2 else [*args, Ref(node)]
        edges.append((node, conv, {"slot": 2}))
        edges = [e for n, _ in nodes for e in edges if e[1] == n]
        rebuild_graph(impl, nodes, edges)
    for name, tensor in tensors.items():
        s.made[prefix + name] = tensor
    impl.meta[PROVENANCE_KEY] = prov
    _finish(s, bn_ref, bn_key, own)
    s.changes.append(f"{key}: module (one convolution) + {_label(bn, own)} -> module with the batch norm folded in")


__all__ = ["CONV_FUNCTIONS", "bn_affine", "bn_options", "conv_of_graph", "fold_into_graph", "fold_into_leaf",
           "fold_tensors", "has_running_stats"]
