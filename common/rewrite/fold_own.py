"""Batch norms computed inside a module's own graph (timm's ``BatchNormAct2d``, any ``nn.BatchNorm2d`` subclass with a
``forward`` of its own): recognising one that folds exactly, and removing its batch norm op once folded.

Such a module's graph starts with one batch-norm op in eval form (running statistics, ``training=False``) of the
module's own ``weight``, ``bias``, ``running_mean`` and ``running_var``, applied to the module's only input (or the
base's forward in both modes, ``ir.module_batch_norm`` with the module's ``training`` flag, which computes that in
eval mode: :mod:`torch2ir.train.batch_norm`; its ``num_batches_tracked`` goes with it); what
follows (an activation, a dropout that is the identity in eval mode) stays. Folding moves the normalisation into
the layer before it and leaves the module computing the rest of its graph on its input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.ir import IR, Implementation
from common.python_functions import MODULE_BATCH_NORM
from common.values import TRAINING, Ref

from .core import map_refs, ordered, rebuild_graph
from .ops import in_order

#: Batch-norm ops in eval form: ``(weight, bias, running_mean, running_var)`` argument positions, the position of
#: the ``training`` flag (``None``: the op has none), of ``eps``, and whether consumers read item 0 of a tuple.
EVAL_BATCH_NORMS: dict[str, tuple[tuple[int, int, int, int], int | None, int, bool]] = {
    "aten.batch_norm.default": ((1, 2, 3, 4), 5, 7, False),
    "aten._native_batch_norm_legit_no_training.default": ((1, 2, 3, 4), None, 6, True),
    MODULE_BATCH_NORM: ((1, 2, 3, 4), 6, 9, False),
}
#: where ``ir.module_batch_norm`` reads ``num_batches_tracked``
COUNTER_AT = 5


def eval_form(op: str, flag: object) -> bool:
    """Whether ``flag``, the ``training`` argument of batch-norm op ``op`` (of :data:`EVAL_BATCH_NORMS`), makes it
    compute with the running statistics in eval mode: ``False``, or the module's own flag for
    ``ir.module_batch_norm`` (the base's forward, which folds as its eval mode computes)."""
    return flag is (TRAINING if op == MODULE_BATCH_NORM else False)
#: The state each argument must read (a BatchNorm subclass keeps the names of ``nn.BatchNorm2d``).
STATE_NAMES = ("weight", "bias", "running_mean", "running_var")


@dataclass(frozen=True)
class OwnNorm:
    """A module's own eval-mode batch norm: the op's node, the module's input node, the ``get_attr`` nodes of its
    state, its ``eps``, whether it is affine, its channel count and what the module computes after it."""

    op: str
    node: str
    input: str
    getters: tuple[str, ...]
    eps: float
    affine: bool
    channels: int
    keeps: str

    @property
    def options(self) -> dict[str, Any]:
        """``affine`` and ``eps``, as :func:`common.rewrite.fold.fold_tensors` takes them."""
        return {"affine": self.affine, "eps": self.eps}


def own_norm(ir: IR, key: str) -> OwnNorm | None:
    """The batch norm module ``key`` computes first in its own (single) graph on its only input, reading only its
    own statistics, when folding it into the layer before is exact; else ``None``."""
    impl = ir.get(key, None)
    if impl is None or impl.type != "module" or impl.graph is None or len(impl.graphs()) != 1:
        return None
    g = impl.graph
    inputs = [n for n, a in g.nodes(data=True) if a.get("type") == "input"]
    if len(inputs) != 1 or len(g._succ[inputs[0]]) != 1:
        return None
    (node,) = g._succ[inputs[0]]
    attrs = g.nodes[node]
    spec = EVAL_BATCH_NORMS.get(attrs.get("implementation")) if attrs.get("type") == "function" else None
    if spec is None or attrs.get("kwargs"):
        return None
    positions, training, eps_at, tuple_out = spec
    args = list(attrs.get("args", []))
    op = attrs.get("implementation")
    if len(args) <= eps_at or args[0] != Ref(inputs[0]) or (training is not None and not eval_form(op, args[training])):
        return None
    eps = args[eps_at]
    if not isinstance(eps, (int, float)) or isinstance(eps, bool):
        return None
    getters = []
    for position, name in zip(positions, STATE_NAMES):
        arg = args[position]
        if arg is None and name in ("weight", "bias"):
            continue
        if not isinstance(arg, Ref) or arg.index is not None or g.nodes[arg.node].get("type") != "get_attr" or \
                g.nodes[arg.node].get("implementation") != name or set(g._succ[arg.node]) != {node}:
            return None
        rec = impl.state.get(name)
        if rec is None or rec.get("tie") is not None:
            return None
        getters.append(arg.node)
    if op == MODULE_BATCH_NORM and args[COUNTER_AT] is not None:  # the counter goes with the op
        counter = args[COUNTER_AT]
        if not isinstance(counter, Ref) or counter.index is not None or \
                g.nodes[counter.node].get("type") != "get_attr" or \
                g.nodes[counter.node].get("implementation") != "num_batches_tracked" or \
                set(g._succ[counter.node]) != {node}:
            return None
        getters.append(counter.node)
    if (args[positions[0]] is None) != (args[positions[1]] is None):
        return None  # a weight without a bias (or the reverse): not the shape fold_tensors computes
    if any(d.get("src_index") != (0 if tuple_out else None) for _, _, d in g.out_edges(node, data=True)):
        return None  # the batch statistics a training-form op also returns are read
    shape = impl.state["running_mean"].get("shape")
    if not (isinstance(shape, list) and len(shape) == 1 and isinstance(shape[0], int)):
        return None
    after = [a.get("implementation") if a.get("type") == "function" else a.get("type")
             for n, a in g.nodes(data=True) if n != node and a.get("type") not in ("input", "output", "get_attr")]
    keeps = f"; keeps {', '.join(map(str, after))}" if after else ""
    return OwnNorm(str(attrs["implementation"]), node, inputs[0], tuple(getters), float(eps),
                   args[positions[0]] is not None, shape[0], keeps)


def strip_norm(impl: Implementation, found: OwnNorm) -> None:
    """Remove the folded batch norm op and the reads of its state from ``impl``'s graph (what read the op reads the
    module's input), and the state records nothing reads any more."""
    dead = {found.node, *found.getters}
    nodes, edges = ordered(impl)
    kept = []
    for name, attrs in nodes:
        if name in dead:
            continue
        for field in ("args", "kwargs"):
            if field in attrs:
                attrs[field] = map_refs(attrs[field], lambda r: Ref(found.input) if r.node == found.node else r)
        kept.append((name, attrs))
    new_edges = []
    for u, v, d in edges:
        if v in dead:
            continue
        if u == found.node:
            u, d = found.input, {k: x for k, x in d.items() if k != "src_index"}
        new_edges.append((u, v, d))
    rebuild_graph(impl, kept, in_order(new_edges, kept))
    read = {a.get("implementation") for _, a in impl.graph.nodes(data=True) if a.get("type") == "get_attr"}
    for name in (*STATE_NAMES, "num_batches_tracked"):
        if name in impl.state and name not in read:
            del impl.state[name]


__all__ = ["COUNTER_AT", "EVAL_BATCH_NORMS", "OwnNorm", "eval_form", "own_norm", "strip_norm"]
