"""``fold_batchnorm``: fold every eval-mode BatchNorm into the Conv, ConvTranspose or Linear it follows."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch

from common.ir import IR
from common.python_functions import MODULE_BATCH_NORM
from common.values import Ref

from .core import NodeRef, Where, all_graphs, call_sites, callee, graph_of, matches_where
from .find import find
from .fold import conv_of_graph, fold_into_graph, fold_into_leaf, has_running_stats
from .fold_next import CONVS as CONVS_NEXT
from .fold_next import fold_into_next, why_not_next
from .fold_own import own_norm
from .fold_report import other_norms
from .passes import Rewritten
from .session import Session

CONVS = ("conv1d", "conv2d", "conv3d", "linear")
TRANSPOSED = ("convtranspose1d", "convtranspose2d", "convtranspose3d")
LAYERS = CONVS + TRANSPOSED
NORMS = ("batchnorm1d", "batchnorm2d", "batchnorm3d")
#: Function nodes that only reshape (a BatchNorm after one of a Linear's output, keeping its last dim, folds).
RESHAPES = ("aten.flatten.using_ints", "aten.reshape.default", "aten.view.default", "aten._unsafe_view.default")
#: ``(target, argument)`` of consumers that read only the shape of a value (``x.reshape_as(linear_out)``).
SHAPE_ONLY = (("aten.reshape_as.default", 1), ("aten.view_as.default", 1))


def _shape(ir: IR, ref: NodeRef) -> list[Any] | None:
    shape = (graph_of(ir, ref).node(ref.node).get("meta") or {}).get("shape")
    return shape if isinstance(shape, list) else None


def _why_not(ir: IR, layer_key: str, bn_ref: NodeRef, out: Any, linear: bool) -> str | None:
    """Why the batch norm at ``bn_ref`` cannot be folded exactly into ``layer_key`` (``out`` channels), or ``None``."""
    bn_key = callee(graph_of(ir, bn_ref).node(bn_ref.node))
    sites = call_sites(ir)
    if len(sites.get(layer_key, [])) != 1 or len(sites.get(bn_key or "", [])) != 1:
        return "a module of the pair is called more than once"
    bn = ir[bn_key]
    if not has_running_stats(bn):
        return "the batch norm has no running statistics (it normalizes with batch statistics)"
    if bn.data.get("num_features") != out:
        return f"the batch norm has {bn.data.get('num_features')} features, the layer {out} outputs"
    shape = _shape(ir, bn_ref)
    if linear and (shape is None or len(shape) != 2):
        return "a Linear's output is normalized per feature only when it is 2-d (N, C)"
    return None


def _out(ir: IR, key: str) -> Any:
    impl = ir[key]
    if impl.type == "module":
        found = conv_of_graph(ir, key)
        return impl.state[found[1]]["shape"][0] if found else None
    return impl.data.get("out_features" if impl.type == "linear" else "out_channels")


def _is_conv_module(ir: IR):
    def test(attrs: dict[str, Any], ref: NodeRef) -> bool:
        target = callee(attrs)
        return attrs.get("type") == "module" and target is not None and conv_of_graph(ir, target) is not None

    return test


def _is_own_norm(ir: IR):
    def test(attrs: dict[str, Any], ref: NodeRef) -> bool:
        target = callee(attrs)
        return attrs.get("type") == "module" and target is not None and own_norm(ir, target) is not None

    return test


def _through_reshape(ir: IR, where: Where) -> list[tuple[NodeRef, NodeRef]]:
    """``(linear call, batch norm call)`` where Linear -> reshape to ``[M, C]`` -> BatchNorm1d, the reshape
    keeping the Linear's last dim ``C`` and feeding only the batch norm, the Linear's output read otherwise only
    for its shape (``reshape_as``)."""
    found = []
    for key, variant, graph in all_graphs(ir):
        g = graph.graph
        for bn, attrs in g.nodes(data=True):
            if attrs.get("type") != "batchnorm1d" or g.in_degree(bn) != 1:
                continue
            (src, _, edge), = g.in_edges(bn, data=True)
            shaped = g.nodes[src]
            args = shaped.get("args") or [None]
            if shaped.get("type") != "function" or shaped.get("implementation") not in RESHAPES or \
                    edge.get("src_index") is not None or g.out_degree(src) != 1 or not isinstance(args[0], Ref):
                continue
            lin = args[0].node
            if args[0].index is not None or g.nodes[lin].get("type") != "linear":
                continue
            readers = [(g.nodes[v], d.get("slot"), d.get("src_index")) for _, v, d in g.out_edges(lin, data=True)
                       if v != src]
            if any(r.get("type") != "function" or (r.get("implementation"), slot) not in SHAPE_ONLY or i is not None
                   for r, slot, i in readers):
                continue
            lin_ref, bn_ref = NodeRef(key, lin, variant), NodeRef(key, bn, variant)
            before, after = _shape(ir, lin_ref), _shape(ir, bn_ref)
            if not before or not after or len(after) != 2 or after[-1] != before[-1]:
                continue
            if all(matches_where(where, k) for k in (callee(g.nodes[lin]), callee(attrs))):
                found.append((lin_ref, bn_ref))
    return found


def fold_batchnorm(ir: IR, state: Mapping[str, torch.Tensor] | None, *, where: Where = None,
                   into_next: bool = False, allow: Iterable[str] | None = None) -> Rewritten:
    """Fold every BatchNorm1d/2d/3d (eval semantics) into the layer whose output it normalizes, in every graph
    of the hierarchy (``Sequential``\\ s included):

    - a Conv1d/2d/3d, ConvTranspose1d/2d/3d or Linear whose only consumer it is, in the same graph or across
      module boundaries (the layer the last op of one module, the batch norm the first op of another);
    - a module rebuilt from its graph (an ``nn.Conv2d`` subclass) computing one convolution of its own weight
      (possibly after a pad): its weight is scaled and its bias made (a ``bias`` parameter added) or changed;
    - a Linear whose output is reshaped to ``[M, C]`` (same last dim ``C``) for a BatchNorm1d (LeViT);
    - a module computing the batch norm first in its own graph (a BatchNorm subclass with a ``forward`` of its
      own, such as timm's ``BatchNormAct2d``; :func:`common.rewrite.fold_own.own_norm`) after any of the
      layers above: the normalisation goes into the layer, the module keeps the rest (its activation).

    The layer gets ``w * gamma / sqrt(var + eps)`` (per output channel; per group for a ConvTranspose) and
    bias ``(b - mean) * gamma / sqrt(var + eps) + beta`` (computed in float64); the BatchNorm goes.
    With ``into_next``, a BatchNorm left after those (one following no layer: after a ``cat``, an input, a pool)
    whose output goes straight into a Conv1d/2d/3d without padding or a Linear (2-d input) is folded into that
    layer instead (:mod:`common.rewrite.fold_next`: the layer's weight scaled along its input channels, its bias
    given the shift); a padding convolution is listed in ``skipped`` with why.

    Every other normalization module (LayerNorm, GroupNorm, InstanceNorm, RMSNorm, timm's EvoNorms, a frozen
    batch norm written as ops, ...) is named in ``other_norms`` with why it is not folded
    (:mod:`common.rewrite.fold_report`).

    Pairs that cannot be folded exactly are left alone and listed in ``skipped`` (a module called twice, no
    running statistics, a Linear output that is not 2-d, a layer output with other consumers), and so is
    every other BatchNorm left, with what it follows, and every module still computing a batch norm in its own
    graph (after no foldable layer, or not in the form above).

    Returns:
        ``(new_ir, new_state)`` with ``changes`` (one line per fold) and ``skipped``.

    Raises:
        RewriteError: no state was given, or the result does not validate.
        StateDictError: ``state`` does not fit ``ir``.
    """
    s = Session(ir, state, allow=allow, pass_name="fold_batchnorm")
    skipped: dict[str, str] = {}

    def attempt(layer_ref: NodeRef, bn_ref: NodeRef, how: str) -> None:
        layer_key = callee(graph_of(s.ir, layer_ref).node(layer_ref.node))
        bn_key = callee(graph_of(s.ir, bn_ref).node(bn_ref.node))
        assert layer_key is not None and bn_key is not None
        linear = s.ir[layer_key].type == "linear"
        why = _why_not(s.ir, layer_key, bn_ref, _out(s.ir, layer_key), linear)
        if why is not None:
            skipped[bn_key] = f"{layer_key} -> {bn_key}: {why}"
        elif s.ir[layer_key].type == "module":
            fold_into_graph(s, layer_ref, bn_ref)
        else:
            fold_into_leaf(s, layer_ref, bn_ref, how)

    def attempt_own(layer_ref: NodeRef, norm_ref: NodeRef, how: str) -> None:
        layer_key = callee(graph_of(s.ir, layer_ref).node(layer_ref.node))
        norm_key = callee(graph_of(s.ir, norm_ref).node(norm_ref.node))
        assert layer_key is not None and norm_key is not None
        own = own_norm(s.ir, norm_key)
        if own is None:  # an earlier fold changed it
            return
        sites = call_sites(s.ir)
        shape = (s.ir[norm_key].node(own.input).get("meta") or {}).get("shape")
        if len(sites.get(layer_key, [])) != 1 or len(sites.get(norm_key, [])) != 1:
            skipped[norm_key] = f"{layer_key} -> {norm_key}: a module of the pair is called more than once"
        elif own.channels != _out(s.ir, layer_key):
            skipped[norm_key] = (f"{layer_key} -> {norm_key}: the batch norm has {own.channels} features, the layer "
                                 f"{_out(s.ir, layer_key)} outputs")
        elif s.ir[layer_key].type == "linear" and not (isinstance(shape, list) and len(shape) == 2):
            skipped[norm_key] = f"{layer_key} -> {norm_key}: a Linear's output is normalized per feature only when " \
                "it is 2-d (N, C)"
        elif s.ir[layer_key].type == "module":
            fold_into_graph(s, layer_ref, norm_ref, own=own)
        else:
            fold_into_leaf(s, layer_ref, norm_ref, how, own=own)

    for match in find(s.ir, [LAYERS, NORMS], where=where, through_modules=True):
        attempt(*match.nodes, " (across modules)" if match.crosses_modules else "")
    for match in find(s.ir, [LAYERS, _is_own_norm(s.ir)], where=where, through_modules=True):
        attempt_own(*match.nodes, " (across modules)" if match.crosses_modules else "")
    for match in find(s.ir, [_is_conv_module(s.ir), _is_own_norm(s.ir)], where=where, through_modules=True):
        attempt_own(*match.nodes, "")
    for match in find(s.ir, [_is_conv_module(s.ir), NORMS], where=where, through_modules=True):
        attempt(*match.nodes, "")
    for lin_ref, bn_ref in _through_reshape(s.ir, where):
        attempt(lin_ref, bn_ref, " (through a reshape)")
    if into_next:
        for match in find(s.ir, [NORMS, (*CONVS_NEXT, "linear")], where=where, through_modules=True):
            bn_ref, layer_ref = match.nodes
            bn_key = callee(graph_of(s.ir, bn_ref).node(bn_ref.node))
            layer_key = callee(graph_of(s.ir, layer_ref).node(layer_ref.node))
            why = why_not_next(s.ir, bn_ref, layer_ref)
            if why is not None:
                skipped[str(bn_key)] = f"{bn_key} -> {layer_key} (the layer after it): {why}"
            else:
                skipped.pop(str(bn_key), None)
                fold_into_next(s, bn_ref, layer_ref, " (across modules)" if match.crosses_modules else "")
    result = Rewritten(*s.finish(), s.changes)
    result.skipped = list(skipped.values()) + _left(result.ir, skipped)
    own = {k for k in result.ir if _own_batch_norm(result.ir, k) is not None}
    result.other_norms = other_norms(result.ir, own | set(skipped))
    return result


def _left(ir: IR, skipped: Mapping[str, str]) -> list[str]:
    """The batch norms left that were not already reported: what each one follows."""
    shared = {}
    for match in find(ir, [(*LAYERS, "module"), NORMS], through_modules=True, sole_consumer=False):
        layer, bn = match.implementations
        if layer is not None and bn is not None and (ir[layer].type != "module" or conv_of_graph(ir, layer)):
            shared[bn] = layer
    out = []
    for ref_key, refs in call_sites(ir).items():
        op = _own_batch_norm(ir, ref_key)
        if op is not None:
            cls = ir[ref_key].meta.get("class")
            why = "it does not follow a Conv, ConvTranspose or Linear it alone reads" if own_norm(ir, ref_key) else \
                "not first on its input in eval form, or reading state other than its own statistics"
            out.append(f"{ref_key}{f' ({cls})' if isinstance(cls, str) else ''}: computes {op} in its own graph; "
                       f"not folded: {why}")
            continue
        if ir[ref_key].type not in NORMS or ref_key in skipped:
            continue
        if ref_key in shared:
            out.append(f"{shared[ref_key]} -> {ref_key}: the layer's output has other consumers")
            continue
        for ref in refs:
            graph = graph_of(ir, ref)
            before = [graph.node(u)["type"] if graph.node(u)["type"] != "function" else graph.node(u)["implementation"]
                      for u, _, _ in graph.in_edges(ref.node)]
            out.append(f"{ref_key}: follows {', '.join(before) or 'nothing'}, not a Conv, ConvTranspose or Linear "
                       "(nor a module computing one convolution, nor a Linear through a reshape)")
    return out


#: ATen ops computing a batch norm (an ``nn.BatchNorm2d`` subclass with a ``forward`` of its own calls one), and the
#: base's forward in both modes (``ir.module_batch_norm``, :mod:`torch2ir.train.batch_norm`).
BATCH_NORM_OPS = ("aten.batch_norm.default", "aten._native_batch_norm_legit_no_training.default",
                  "aten._native_batch_norm_legit.default", "aten._native_batch_norm_legit.no_stats",
                  "aten.native_batch_norm.default", "aten._batch_norm_with_update.default",
                  "aten._batch_norm_no_update.default", MODULE_BATCH_NORM)


def _own_batch_norm(ir: IR, key: str) -> str | None:
    """The batch-norm op a module rebuilt from its graph computes itself (timm's ``BatchNormAct2d``), else None."""
    impl = ir[key]
    if impl.type != "module":
        return None
    for graph in impl.graphs():
        for node in graph.nodes:
            target = graph.node(node).get("implementation")
            if graph.node(node).get("type") == "function" and target in BATCH_NORM_OPS:
                return str(target)
    return None


__all__ = ["BATCH_NORM_OPS", "CONVS", "LAYERS", "NORMS", "TRANSPOSED", "fold_batchnorm"]
