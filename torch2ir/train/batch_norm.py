"""Batch norms a module computes in its own graph, made exact in train mode (issue 51, point 3).

A subclass of ``nn.BatchNorm{1,2,3}d`` with a forward of its own (timm's ``BatchNormAct2d``: a copy of the base's
forward, then its ``drop`` and ``act`` children) is traced to a graph in eval mode: one eval-form
``aten.batch_norm`` of its running statistics. In train mode its forward normalises with the batch's statistics,
updates the running statistics and counts ``num_batches_tracked``, which that op does not say.

Where the eager passes (:mod:`torch2ir.train.record`) show that the module's train-mode call is its eval-mode call
with the batch norm computed as the base class computes it in train mode (``num_batches_tracked.add_(1)`` when it
tracks statistics, then ``F.batch_norm`` of its own state with ``training=True``, its ``momentum`` and ``eps``), and
its graph holds that batch norm in eval form of its own state, the op becomes a call of
:func:`common.python_functions.module_batch_norm` (``"ir.module_batch_norm"``) with the module's
``training`` flag (:data:`~common.values.TRAINING`): the rebuild computes the base's forward there in either mode.
Anything else (``momentum=None``, whose cumulative average reads ``num_batches_tracked``'s value and fails on meta;
another batch-norm call; a forward that computes otherwise around it) stays as traced and warned about.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from torch import nn

from common.ir import IR, Implementation
from common.python_functions import MODULE_BATCH_NORM
from common.values import TRAINING, Ref
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.train.record import TrainOps

#: the IR types of the bases whose forward :func:`~common.python_functions.module_batch_norm` computes
BASES = frozenset({"batchnorm1d", "batchnorm2d", "batchnorm3d"})
_OP = "aten.batch_norm.default"
_F = "torch.nn.functional.batch_norm"
_ADD = "TensorBase.add_"
#: batch-norm ops of an eval graph: a graph holding more than the one rewritten is left alone
_NORM_OPS = frozenset({_OP, "aten._native_batch_norm_legit_no_training.default",
                       "aten._native_batch_norm_legit.default",
                       "aten.native_batch_norm.default", "aten._batch_norm_with_update.default",
                       "aten._batch_norm_no_update.default", MODULE_BATCH_NORM})


def carry_batch_norms(ir: IR, table: ModuleTable, train: TrainOps, evaluated: TrainOps,
                      modules: Iterable[tuple[str, str]]) -> list[str]:
    """Rewrite the batch norm of each module of ``modules`` (``(path, key)`` pairs whose train-mode call differs from
    their eval-mode call) that computes its base's forward in both modes (see the module's docstring); returns the
    keys rewritten. ``train``/``evaluated``: the eager passes in both modes, run on one device."""
    done = []
    for path, key in modules:
        module = table.module_of_key.get(key)
        impl = ir.get(key, None)
        if not isinstance(module, nn.modules.batchnorm._BatchNorm) or impl is None or impl.type != "module" \
                or (impl.meta.get("base") or {}).get("type") not in BASES or impl.variant_count:
            continue
        options = _options(module)
        if options is None or (options["counts"] and "num_batches_tracked" not in impl.state) or \
                not _computes_base(path, options, train, evaluated):
            continue
        node = _eval_op(impl, options)
        if node is not None:
            _rewrite(impl, node, options)
            done.append(key)
    return done


def _options(module: nn.modules.batchnorm._BatchNorm) -> dict[str, Any] | None:
    """The options and state the base's forward reads, or ``None`` when they are not carried."""
    momentum, eps, track = module.momentum, module.eps, module.track_running_stats
    if any(type(v) not in (int, float) or not math.isfinite(v) for v in (momentum, eps)) or type(track) is not bool:
        return None  # momentum None: a cumulative average of num_batches_tracked's value
    if module.running_mean is None or module.running_var is None or (module.weight is None) != (module.bias is None):
        return None
    return {"momentum": momentum, "eps": eps, "track": track, "affine": module.weight is not None,
            "counts": track and module.num_batches_tracked is not None}


def _computes_base(path: str, options: dict[str, Any], train: TrainOps, evaluated: TrainOps) -> bool:
    """Whether the module's train-mode call is its eval-mode call with the base's train-mode batch norm in place of
    its eval-mode one: the batch-norm calls and in-place additions as expected, the other calls the same."""
    affine = ("own:weight", "own:bias") if options["affine"] else (None, None)
    tail = (options["momentum"], options["eps"])
    want_eval = [(_F, ("tensor", "own:running_mean", "own:running_var", *affine, False, *tail))]
    stats = ("own:running_mean", "own:running_var") if options["track"] else (None, None)
    want_train = ([(_ADD, ("own:num_batches_tracked", 1, 1))] if options["counts"] else []) + \
        [(_F, ("tensor", *stats, *affine, True, *tail))]
    if evaluated.norms.get(path) != want_eval or train.norms.get(path) != want_train:
        return False
    calls, train_calls = evaluated.calls.get(path) or [], train.calls.get(path) or []
    if calls.count(_F) != 1 or _ADD in calls:
        return False
    at = calls.index(_F)
    return train_calls == calls[:at] + ([_ADD] if options["counts"] else []) + calls[at:]


def _eval_op(impl: Implementation, options: dict[str, Any]) -> str | None:
    """The graph's one batch-norm op when it is ``aten.batch_norm`` in eval form of the module's own state, with its
    momentum and eps; else ``None``."""
    g = impl.graph
    norms = [n for n, a in g.nodes(data=True) if a.get("type") == "function" and a.get("implementation") in _NORM_OPS]
    if len(norms) != 1 or g.nodes[norms[0]].get("implementation") != _OP or g.nodes[norms[0]].get("kwargs"):
        return None
    node = norms[0]
    args = list(g.nodes[node].get("args", []))
    if len(args) != 9 or args[5] is not False or args[6] != options["momentum"] or args[7] != options["eps"]:
        return None
    names = ("weight", "bias", "running_mean", "running_var")
    for position, name in zip(range(1, 5), names):
        arg = args[position]
        if arg is None and name in ("weight", "bias") and not options["affine"]:
            continue
        if not isinstance(arg, Ref) or arg.index is not None or g.nodes[arg.node].get("type") != "get_attr" or \
                g.nodes[arg.node].get("implementation") != name:
            return None
        rec = impl.state.get(name)
        if rec is None or rec.get("tie") is not None:
            return None
    return node


def _rewrite(impl: Implementation, node: str, options: dict[str, Any]) -> None:
    """Make ``node`` (``aten.batch_norm(x, weight, bias, mean, var, False, momentum, eps, cudnn)``) a call of
    ``ir.module_batch_norm(x, weight, bias, mean, var, num_batches_tracked, TRAINING, track, momentum, eps)``."""
    attrs = impl.graph.nodes[node]
    args = list(attrs["args"])
    counter = None
    if options["counts"]:
        getters = [n for n, a in impl.graph.nodes(data=True)
                   if a.get("type") == "get_attr" and a.get("implementation") == "num_batches_tracked"]
        if getters:
            counter = getters[0]
        else:
            counter = _fresh(impl, "num_batches_tracked")
            impl.add_node(counter, "get_attr", "num_batches_tracked",
                          meta={"shape": [], "dtype": impl.state["num_batches_tracked"]["dtype"]})
        impl.add_edge(counter, node, slot=5)
    attrs["args"] = [*args[:5], Ref(counter) if counter is not None else None, TRAINING, options["track"],
                     options["momentum"], options["eps"]]
    attrs["implementation"] = MODULE_BATCH_NORM


def _fresh(impl: Implementation, base: str) -> str:
    name, i = base, 1
    while name in impl.graph:
        name, i = f"{base}_{i}", i + 1
    return name


__all__ = ["BASES", "carry_batch_norms"]
