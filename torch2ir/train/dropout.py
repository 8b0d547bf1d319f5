"""Functional dropout whose arguments depend on ``self.training``.

``F.dropout(x, p, training=self.training)`` (T5) traced in eval mode records
``train=False``; ``dropout=0.0 if not self.training else p`` (BERT/GPT-2 attention)
records ``p=0``. Neither says what train mode does. When a graph implementation holds
dropout ops, the model is traced once more in train mode; where the dropout ops of a
module call line up one to one between the two traces, each eval op gets the train
trace's ``p`` and the :data:`~common.values.TRAINING` marker as its ``train`` flag, so the
rebuild drops out exactly when its module is in train mode, like the original.

``scaled_dot_product_attention(..., dropout_p=p if self.training else 0.0)`` (SDPA attention in
transformers) is handled alike: its ``dropout_p`` becomes the value of a node computing
``training * p``, which is ``p`` in train mode and ``0.0`` in eval mode.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from common.ir import IR, Implementation
from common.values import TRAINING, Ref
from torch2ir.hierarchy.graphs import add_node_with_edges
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.hierarchy.recover import Frame, Hierarchy
from torch2ir.train.record import TrainOps

#: ATen ops of the form ``op(input, p, train)``.
DROPOUT_OPS = frozenset(
    {"aten.dropout.default", "aten.feature_dropout.default", "aten.alpha_dropout.default",
     "aten.feature_alpha_dropout.default"}
)
#: ``aten.scaled_dot_product_attention.default(query, key, value, attn_mask, dropout_p, ...)``.
SDPA = "aten.scaled_dot_product_attention.default"
_SDPA_P = 4
_TARGETS = {getattr(torch.ops.aten, n.split(".")[1]).default for n in (*DROPOUT_OPS, SDPA)}


class TrainModeWarning(UserWarning):
    """Converting worked, but the rebuild's train mode will not match the original's (eval mode is exact)."""


#: Random-number ATen ops: in a train trace but not in the eval trace, they mark train-only randomness that
#: is not a dropout op (DropPath's ``torch.rand``, LayerDrop's per-step coin), which the IR cannot replay.
RANDOM_OPS = frozenset(
    {"rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "bernoulli", "bernoulli_",
     "uniform_", "normal_", "exponential_", "multinomial", "native_dropout"}
)


def _random_ops(frame: Frame) -> int:
    return sum(1 for n in frame.items if isinstance(n, fx.Node) and n.op == "call_function"
               and getattr(getattr(n.target, "_overloadpacket", None), "__name__", None) in RANDOM_OPS)


def train_ops_of(train_h: Hierarchy) -> TrainOps:
    """The :class:`TrainOps` of an exported train trace (first call of each non-leaf path, and the root)."""
    ops = TrainOps()
    frames = [("", train_h.root)] + [(p, fs[0]) for p, fs in train_h.frames_by_path.items() if fs and not fs[0].leaf]
    for path, frame in frames:
        ops.dropouts[path] = _dropouts(frame)
        ops.randoms[path] = _random_ops(frame)
    return ops


def train_only_randomness(eval_h: Hierarchy, train: TrainOps, table: ModuleTable) -> list[str]:
    """Keys of the modules whose train-mode call draws random numbers that their eval-mode call does not."""
    keys = []
    for path, count in train.randoms.items():
        if not path:
            continue
        eval_frames = eval_h.frames_by_path.get(path) or []
        if eval_frames and eval_frames[0].leaf:
            continue
        if count > (_random_ops(eval_frames[0]) if eval_frames else 0):
            keys.append(table.key(path) or "root")
    if train.randoms.get("", 0) > _random_ops(eval_h.root):
        keys.insert(0, "root")
    return keys


def has_graph_dropout(ir: IR) -> bool:
    """True when a graph implementation calls a dropout op (so a train trace can help)."""
    return any(attrs.get("implementation") in (*DROPOUT_OPS, SDPA) for impl in ir.values()
               for _, attrs in impl.graph.nodes(data=True))


def _dropouts(frame: Frame) -> list[fx.Node]:
    return [n for n in frame.items if isinstance(n, fx.Node) and n.target in _TARGETS]


def unaligned(eval_h: Hierarchy, train: TrainOps, table: ModuleTable) -> list[str]:
    """Keys of the module calls whose dropout ops do not line up one to one with the train run's."""
    pairs = [("", [eval_h.root]), *eval_h.frames_by_path.items()]
    return [table.key(path) or "root" for path, frames in pairs
            if frames and not frames[0].leaf and _dropouts(frames[0])
            and len(_dropouts(frames[0])) != len(train.dropouts.get(path, []))]


def apply_train_trace(ir: IR, eval_h: Hierarchy, train: TrainOps, table: ModuleTable) -> list[str]:
    """Mark aligned dropout ops of ``ir`` with the train trace's ``p``; returns the keys left as traced."""
    skipped = []
    pairs = [("", [eval_h.root], train.dropouts.get("", []))] + [
        (path, frames, train.dropouts.get(path, [])) for path, frames in eval_h.frames_by_path.items()
    ]
    for path, frames, train_ops in pairs:
        key = table.key(path) or "root"
        if key not in ir or not frames or frames[0].leaf:
            continue
        ops = _dropouts(frames[0])
        if not ops:
            continue
        if len(ops) != len(train_ops):
            skipped.append(key)
            continue
        impl = ir[key]
        nodes = [n for n, a in impl.graph.nodes(data=True) if a.get("implementation") in (*DROPOUT_OPS, SDPA)]
        for name, train_op in zip(nodes, train_ops):
            attrs = impl.graph.nodes[name]
            if attrs["implementation"] == SDPA:
                _sdpa_dropout(impl, name, train_op)
                continue
            args: list[Any] = list(attrs["args"])
            p = train_op.args[1] if len(train_op.args) > 1 else train_op.kwargs.get("p")
            if len(args) >= 3 and isinstance(p, float) and train_op.args[2] is True:
                args[1], args[2] = p, TRAINING
                attrs["args"] = args
    return skipped


def _sdpa_dropout(impl: Implementation, name: str, train_op: fx.Node) -> None:
    """Make SDPA node ``name`` use ``training * p`` as its ``dropout_p`` (``p`` from the train trace)."""
    p = train_op.args[_SDPA_P] if len(train_op.args) > _SDPA_P else train_op.kwargs.get("dropout_p", 0.0)
    if not isinstance(p, float) or p <= 0.0:
        return
    attrs = impl.graph.nodes[name]
    args: list[Any] = list(attrs["args"])
    kwargs: dict[str, Any] = dict(attrs.get("kwargs", {}))
    factor = add_node_with_edges(impl, f"{name}_dropout_p", "function", "operator.mul", [TRAINING, p], {})
    ref = Ref(factor)
    if len(args) > _SDPA_P:
        args[_SDPA_P] = ref
        impl.add_edge(factor, name, slot=_SDPA_P)
    else:
        kwargs["dropout_p"] = ref
        impl.add_edge(factor, name, slot="dropout_p")
    attrs["args"], attrs["kwargs"] = args, kwargs
