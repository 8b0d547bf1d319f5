"""Functional dropout whose arguments depend on ``self.training``.

``F.dropout(x, p, training=self.training)`` (T5) traced in eval mode records
``train=False``; ``dropout=0.0 if not self.training else p`` (BERT/GPT-2 attention)
records ``p=0``. Neither says what train mode does. When a graph implementation holds
dropout ops, the model is traced once more in train mode; where the dropout ops of a
module call line up one to one between the two traces, each eval op gets the train
trace's ``p`` and the :data:`~common.values.TRAINING` marker as its ``train`` flag, so the
rebuild drops out exactly when its module is in train mode, like the original.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from common.ir import IR
from common.values import TRAINING

from .hierarchy import Frame, Hierarchy
from .modules import ModuleTable

#: ATen ops of the form ``op(input, p, train)``.
DROPOUT_OPS = frozenset(
    {"aten.dropout.default", "aten.feature_dropout.default", "aten.alpha_dropout.default",
     "aten.feature_alpha_dropout.default"}
)
_TARGETS = {getattr(torch.ops.aten, n.split(".")[1]).default for n in DROPOUT_OPS}


def has_graph_dropout(ir: IR) -> bool:
    """True when a graph implementation calls a dropout op (so a train trace can help)."""
    return any(attrs.get("implementation") in DROPOUT_OPS for impl in ir.values()
               for _, attrs in impl.graph.nodes(data=True))


def _dropouts(frame: Frame) -> list[fx.Node]:
    return [n for n in frame.items if isinstance(n, fx.Node) and n.target in _TARGETS]


def apply_train_trace(ir: IR, eval_h: Hierarchy, train_h: Hierarchy, table: ModuleTable) -> list[str]:
    """Mark aligned dropout ops of ``ir`` with the train trace's ``p``; returns the keys left as traced."""
    skipped = []
    for path, frames in eval_h.frames_by_path.items():
        key = table.key(path) or "root"
        if key not in ir or not frames or frames[0].leaf:
            continue
        ops = _dropouts(frames[0])
        train_frames = train_h.frames_by_path.get(path) or []
        train_ops = _dropouts(train_frames[0]) if train_frames else []
        if not ops:
            continue
        if len(ops) != len(train_ops):
            skipped.append(key)
            continue
        nodes = [n for n, a in ir[key].graph.nodes(data=True) if a.get("implementation") in DROPOUT_OPS]
        for name, train_op in zip(nodes, train_ops):
            attrs = ir[key].graph.nodes[name]
            args: list[Any] = list(attrs["args"])
            p = train_op.args[1] if len(train_op.args) > 1 else train_op.kwargs.get("p")
            if len(args) >= 3 and isinstance(p, float) and train_op.args[2] is True:
                args[1], args[2] = p, TRAINING
                attrs["args"] = args
    return skipped
