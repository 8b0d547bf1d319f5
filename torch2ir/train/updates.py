"""Buffers a model updates only in train mode, outside its handled leaves.

The IR follows the eval-mode trace. A handled leaf updates its own buffers in train mode as its rebuilt class
does (``nn.BatchNorm2d``'s running statistics), and an in-place op of the eval trace (eager QAT's
``fused_moving_avg_obs_fake_quant`` updating observer statistics) is replayed in both modes. What neither
covers is a buffer written only when ``self.training`` is set, in Python the trace never saw:
``torch.nn.utils.parametrizations.spectral_norm`` runs its power iteration and updates ``_u`` / ``_v`` only in
train mode. The rebuild never updates them, so its train mode differs: :func:`check_train_updates` finds such
buffers with the cheap meta-tensor train pass (:func:`torch2ir.train.record.copied`: in-place writes show as
version-counter bumps of the meta copies) and warns with :class:`~torch2ir.train.dropout.TrainModeWarning`.

The pass runs only when a module outside the handled leaves reads ``training`` and holds such buffers in its
own module tree (the usual place of a train-only update), so most models never pay for it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.ir import IR
from torch2ir.frontend.export import traced_mode
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.train.dropout import TrainModeWarning
from torch2ir.train.record import TrainOps, copied, reads_training


def _outside_leaves(model: nn.Module, table: ModuleTable) -> list[tuple[str, nn.Module]]:
    """``(path, module)`` of every module that is neither a handled leaf nor inside one."""
    leaves = set(table.outermost_leaves())
    out: list[tuple[str, nn.Module]] = []
    inside: set[str] = set()
    for path, module in model.named_modules():
        if path in leaves or (path and path.rpartition(".")[0] in inside):
            inside.add(path)
        else:
            out.append((path, module))
    return out


def written_in_graph(ep: torch.export.ExportedProgram) -> set[str]:
    """Buffers the exported (eval) graph writes: by in-place ops (mutable schema arguments) or as outputs."""
    buffers = ep.graph_signature.inputs_to_buffers
    written = set(ep.graph_signature.buffers_to_mutate.values())
    for node in ep.graph.nodes:
        schema = getattr(node.target, "_schema", None) if node.op == "call_function" else None
        if schema is None:
            continue
        for i, arg in enumerate(schema.arguments):
            if arg.alias_info is None or not arg.alias_info.is_write:
                continue
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            if isinstance(value, torch.fx.Node) and value.name in buffers:
                written.add(buffers[value.name])
    return written


def train_only_updates(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, table: ModuleTable,
                       ep: torch.export.ExportedProgram, recorded: TrainOps | None = None,
                       failure: str | None = None, carried: set[int] | frozenset[int] = frozenset()
                       ) -> list[str] | None:
    """Names of the buffers outside handled leaves that a train-mode forward writes and the eval graph does not.

    ``recorded``: the result of the train-mode meta pass conversion already made for dropout and train-only
    randomness (:func:`~torch2ir.train.record.record_train_ops`), whose writes are used instead of a second pass;
    ``failure``: why that pass failed alike on meta and on CPU copies (``TrainPass.failure``): this pass, the same
    train-mode forward, would fail too and is not run; ``carried``: ids of buffers the rebuild updates as the
    original does (the statistics of batch norms made exact, :mod:`torch2ir.train.batch_norm`).

    Returns:
        the buffer names (``[]`` when the check is not needed), or ``None`` when the train pass failed.
    """
    outside = _outside_leaves(model, table)
    candidates: dict[int, str] = {}
    for path, module in outside:
        for name, buf in module._buffers.items():
            if buf is not None and id(buf) not in carried:
                candidates.setdefault(id(buf), f"{path}.{name}" if path else name)
    readers = [p for p, m in outside if reads_training(type(m))]
    if not any(r == "" or name.startswith(r + ".") for r in readers for name in candidates.values()):
        return []  # no module that reads `training` holds such a buffer: skip the pass
    if recorded is not None:
        return [name for i, name in candidates.items() if i in recorded.written and name not in written_in_graph(ep)]
    if failure is not None:
        return None
    try:
        from torch._export.utils import _compiling_state_context
    except ImportError:  # pragma: no cover - older torch
        _compiling_state_context = contextlib.nullcontext  # type: ignore[assignment]
    try:
        meta = pytree.tree_map_only(torch.Tensor, lambda t: t.to("meta"), (tuple(args), dict(kwargs or {})))
        with copied(model) as copies, traced_mode(model, training=True), _compiling_state_context():
            before = {i: copies[i]._version for i in candidates if i in copies}
            model(*meta[0], **meta[1])
            changed = [candidates[i] for i in copies.written(before) if i in candidates]
    except Exception:  # noqa: BLE001 - data-dependent code and the like: the check cannot be made
        return None
    in_graph = written_in_graph(ep)
    return [name for name in changed if name not in in_graph]


def check_train_updates(ir: IR, model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None,
                        table: ModuleTable, ep: torch.export.ExportedProgram, recorded: TrainOps | None = None,
                        computations: list[str] | None = None, failure: str | None = None,
                        carried: set[int] | frozenset[int] = frozenset()) -> None:
    """Warn (:class:`TrainModeWarning`) about buffers only train mode updates, and record them in
    ``ir.root.meta["train_buffers"]`` (or why they could not be looked for); ``recorded``: see
    :func:`train_only_updates`; ``computations``: keys of the modules whose train-mode call computes otherwise
    than their eval-mode call (one warning names both); ``failure``: see :func:`train_only_updates`."""
    updated = train_only_updates(model, args, kwargs, table, ep, recorded, failure, carried)
    if updated is None:
        ir.root.meta["train_buffers"] = ("not checked: the train-mode pass on meta tensors failed" if failure is None
                                         else f"not checked: the train-mode pass failed: {failure}")
        updated = []
    if updated:
        ir.root.meta["train_buffers"] = updated
    reasons = []
    if computations:
        reasons.append(f"modules whose forward computes otherwise when self.training is set (the IR holds the "
                       f"eval-mode computation): {', '.join(computations)}")
    if updated:
        owners = ", ".join(f"{name.rpartition('.')[0] or 'root'} ({name.rpartition('.')[2]})" for name in updated)
        reasons.append(f"buffers updated only in train mode, by Python code the eval-mode trace does not hold, are "
                       f"not updated by the rebuild: {owners} (e.g. spectral_norm's power iteration)")
    if reasons:
        owners = [*(computations or []), *(table.key(name.rpartition(".")[0]) or "root" for name in updated)]
        warnings.warn(f"torch2ir: the rebuilt model's train mode will differ from the original's: "
                      f"{'; '.join(reasons)}; eval mode is exact{_opaque_advice(table, owners)}", TrainModeWarning,
                      stacklevel=7)


def _opaque_advice(table: ModuleTable, keys: list[str]) -> str:
    """How to keep the modules of ``keys`` (IR keys, ``"root"``) as opaque leaves, rebuilt as their real classes
    running their own train-mode code: their qualified classes in ``opaque=[...]`` (docs/opaque.md)."""
    classes = []
    for key in keys:
        module = table.module_of_key.get(key)
        if module is not None:
            classes.append(f"{type(module).__module__}.{type(module).__qualname__}")
    if not classes:
        return ""
    listed = ", ".join(repr(c) for c in dict.fromkeys(classes))
    return (f"; to train the rebuild as the original, keep them as opaque leaves, rebuilt as their real classes: "
            f"opaque=[{listed}] (with \"auto\" in the list to keep the other modules opaque it finds; "
            "docs/opaque.md)")
