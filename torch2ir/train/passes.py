"""What train mode does that the eval-mode trace does not hold: the passes run after the export, once the IR is
built (see :mod:`torch2ir.train.dropout` for dropout, :mod:`torch2ir.train.record` for the eager passes and
:mod:`torch2ir.train.updates` for buffers written only in train mode).

The eager passes run on meta copies, or on CPU copies when that is cheaper
(:func:`torch2ir.train.device.pass_device`, decided once per conversion from the export's graph).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from common.ir import IR
from torch2ir.frontend.export import RNN_WARNING, export_root, graph_module_scopes, lean_export, traced_mode
from torch2ir.frontend.hooks import hook_scopes, relocate_hook_ops
from torch2ir.frontend.logs import torch_logs_to_debug
from torch2ir.frontend.transformers_compiling import eager_answers
from torch2ir.frontend.transformers_experts import traced_experts
from torch2ir.frontend.transformers_masks import eager_skip
from torch2ir.frontend.vmap_regions import unbatch
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.hierarchy.recover import Hierarchy
from torch2ir.trace_once.eager import EagerStandIns
from torch2ir.trace_once.trace import StandIns
from torch2ir.train.batch_norm import carry_batch_norms
from torch2ir.train.device import cpu_possible, pass_device
from torch2ir.train.dropout import (
    RANDOM_OPS,
    TrainModeWarning,
    apply_train_trace,
    has_graph_dropout,
    train_only_randomness,
    train_ops_of,
    unaligned,
)
from torch2ir.train.record import TrainOps, reads_training, record_train_ops
from torch2ir.train.updates import check_train_updates


@dataclass
class TrainPass:
    """One conversion's context for its train-mode analysis (``ep``: the eval export; ``preserved``: the paths of
    the leaves whose call signature export keeps; ``standins``: the export's, when alike blocks were traced once)."""

    model: nn.Module
    args: tuple
    kwargs: Mapping[str, Any] | None
    table: ModuleTable
    hierarchy: Hierarchy
    ep: torch.export.ExportedProgram
    strict: bool
    dynamic_shapes: Any
    hooked: list[str]
    preserved: list[str]
    standins: StandIns | None = None
    eager: EagerStandIns | None = field(init=False, default=None)
    device: str = field(init=False, default="meta")
    #: why the last pass failed, when it failed alike on CPU copies and on meta (see :meth:`record`)
    failure: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.eager = EagerStandIns(self.standins, self.model) if self.standins is not None else None

    def record(self, training: bool = True) -> TrainOps | None:
        """The eager pass (:func:`~torch2ir.train.record.record_train_ops`) in train or eval mode; once a pass on
        CPU copies failed and ran again on meta, the later ones run on meta at once.

        When the pass fails on meta and on CPU copies with the same exception (type and message), :attr:`failure`
        names it: the model's own code refuses these inputs in that mode whatever the values (``BatchNorm`` in
        train mode on a batch of one), so a train-mode export, which runs the same code on the same shapes, would
        raise it too and is not tried. A pass that failed on meta only is run on CPU copies (where it may run
        there at all, :func:`~torch2ir.train.device.cpu_possible`): its record is used when it runs there (code
        meta tensors cannot run, such as a branch on a tensor's data), and the later passes run on CPU too. A
        failure on one device alone (a meta kernel missing) or differing
        between them leaves :attr:`failure` ``None``."""
        errors: list[BaseException] = []
        ops = self._record(training, self.device, errors)
        self.failure = None
        if ops is not None:
            self.device = ops.device
            return ops
        if len(errors) == 1 and cpu_possible(self.model, self.args, self.kwargs, self.ep.graph):
            ops = self._record(training, "cpu", errors, fallback=False)
            if ops is not None:  # code meta tensors cannot run (a branch on data: brevitas' quant_layer)
                self.device = ops.device
                return ops
        if len(errors) == 2 and type(errors[0]) is type(errors[1]) and str(errors[0]) == str(errors[1]):
            self.failure = _described(errors[1])
        return ops

    def _record(self, training: bool, device: str, errors: list[BaseException], fallback: bool = True
                ) -> TrainOps | None:
        return record_train_ops(self.model, self.args, self.kwargs, self.table.is_leaf, RANDOM_OPS,
                                training=training, stand_ins=self.eager, device=device, errors=errors,
                                fallback=fallback)


def train_mode(ir: IR, run: TrainPass) -> None:
    """Mark the IR's dropout ops for train mode, and note (and warn about) whatever train mode does otherwise:
    train-only randomness, other computations, buffers only train mode writes."""
    table = run.table
    # a module inside a handled or opaque leaf is not traced (a child below an opaque leaf traced on its own had
    # its own pass)
    reads = any(reads_training(type(m)) for m in table.traced_modules())
    dropout = has_graph_dropout(ir)
    recorded = None  # the train-mode eager pass, when one ran: its writes serve the train-update check too
    if dropout or reads:
        run.device = pass_device(run.model, run.args, run.kwargs, run.ep.graph)
    if dropout:
        recorded = _train_trace(ir, run)
    elif reads:
        recorded = _check_train_randomness(ir, run)
    differs, carried = _train_computations(ir, run, recorded) if reads and recorded else ([], set())
    check_train_updates(ir, run.model, run.args, run.kwargs, table, run.ep, recorded, differs,
                        run.failure if recorded is None else None, carried)


def _train_trace(ir: IR, run: TrainPass) -> TrainOps | None:
    """Second trace in train mode, for functional dropout (see :mod:`torch2ir.train.dropout`).

    First an eager pass (:meth:`TrainPass.record`, a fraction of an export's cost); when it fails or its dropout
    ops do not line up with the eval trace's, a real export. Returns the eager pass's record (None when it failed).
    """
    model, table, hierarchy = run.model, run.table, run.hierarchy
    fast = run.record()
    if fast is None and run.failure is not None:  # the export would raise the same (TrainPass.record)
        ir.root.meta["train_trace"] = f"failed: {run.failure}"
        return None
    if fast is not None and not unaligned(hierarchy, fast, table):
        _apply_train(ir, table, hierarchy, fast)
        return fast
    try:
        # torch_logs_to_debug: a failed train trace's dumps go to DEBUG
        with traced_mode(model, training=True), graph_module_scopes(model), warnings.catch_warnings(), \
                hook_scopes(model, run.hooked, table), torch_logs_to_debug(), lean_export(), eager_skip(), \
                eager_answers(), traced_experts():
            warnings.filterwarnings("ignore", message=RNN_WARNING, category=UserWarning)
            ep = torch.export.export(export_root(model), tuple(run.args), dict(run.kwargs or {}), strict=run.strict,
                                     dynamic_shapes=run.dynamic_shapes,
                                     preserve_module_call_signature=tuple(run.preserved))
        unbatch(ep)
        relocate_hook_ops(ep)
        train_h = Hierarchy(ep, table)
    except Exception as exc:  # noqa: BLE001 - the eval IR stays valid; say why train mode may differ
        ir.root.meta["train_trace"] = f"failed: {_described(exc)}"
        return fast
    _apply_train(ir, table, hierarchy, train_ops_of(train_h))
    return fast


def _check_train_randomness(ir: IR, run: TrainPass) -> TrainOps | None:
    """No dropout op to mark, but some module reads ``training``: only look for train-only randomness
    (DropPath, LayerDrop) with the cheap eager pass alone; returns its record (None when it failed).

    A second export would double the conversion time of every such model for a warning, so when the eager pass
    cannot run, ``meta["train_trace"]`` says the check was not made instead.
    """
    train = run.record()
    if train is None:
        ir.root.meta["train_trace"] = ("not checked: the train-mode pass on meta tensors failed" if run.failure is None
                                       else f"not checked: the train-mode pass failed: {run.failure}")
    elif train_only_randomness(run.hierarchy, train, run.table):
        _apply_train(ir, run.table, run.hierarchy, train)
    return train


def _train_computations(ir: IR, run: TrainPass, train: TrainOps) -> tuple[list[str], set[int]]:
    """Keys of the modules whose train-mode call computes with other functions or submodules than their eval-mode
    call (``if self.training: return x * 2``; brevitas' TensorNorm normalising with the batch's statistics): the
    IR holds the eval trace, so the rebuild's train mode runs the eval computation. Compared on the same eager pass
    run in eval mode; modules already reported for train-only randomness or unaligned dropout are left out. The
    keys are noted in ``meta["train_trace"]``; :func:`~torch2ir.train.updates.check_train_updates` warns.

    A batch norm a module computes in its own graph whose train-mode call is its base class's is made exact instead
    (:mod:`torch2ir.train.batch_norm`): such modules are not listed, and the ids of their statistics and counter
    (which the rebuild now updates) are returned beside the keys."""
    evaluated = run.record(training=False)
    if evaluated is not None and evaluated.device != train.device:  # compare records made on one device
        train = run.record()
    if evaluated is None or train is None:
        return [], set()  # the train pass ran on the same inputs; the train notes already say what was checked
    noted = ir.root.meta.get("train_trace", "")
    already = {key for part in str(noted).split("; ") for key in part.rpartition(": ")[2].split(", ")}
    paths = {}
    for path in sorted(set(train.calls) | set(evaluated.calls) | set(train.norms) | set(evaluated.norms)):
        # the batch norms' arguments too: a ``training=self.training`` computes otherwise under the same names
        if train.calls.get(path) != evaluated.calls.get(path) or train.norms.get(path) != evaluated.norms.get(path):
            paths.setdefault(run.table.key(path) or "root", path)
    carried = set(carry_batch_norms(ir, run.table, train, evaluated, [(p, k) for k, p in paths.items()]))
    carried |= {k for k, p in paths.items() if run.table.key(_home(run, p)) in carried}  # become instances of those
    state = {id(t) for k in carried for t in run.table.module_of_key[k]._buffers.values() if t is not None}
    differs = [key for key in paths if key not in already and key not in carried]
    if differs:
        note = f"{COMPUTATIONS_NOTE}{', '.join(differs)}"
        ir.root.meta["train_trace"] = note if noted in ("", "applied") else f"{noted}; {note}"
    return differs, state


#: How ``meta["train_trace"]`` starts the list of the modules whose train-mode call computes otherwise.
COMPUTATIONS_NOTE = "other computations only in train mode in: "


def train_differs(ir: IR) -> list[str]:
    """The keys of the modules whose train mode the rebuild does not reproduce (noted by :func:`train_mode`): those
    computing otherwise in train mode, and the owners of buffers only train mode updates (``"root"``: the root)."""
    note = str(ir.root.meta.get("train_trace", ""))
    keys = [key for part in note.split("; ") if part.startswith(COMPUTATIONS_NOTE)
            for key in part.removeprefix(COMPUTATIONS_NOTE).split(", ")]
    buffers = ir.root.meta.get("train_buffers")
    if isinstance(buffers, list):
        keys += [name.rpartition(".")[0] or "root" for name in buffers if isinstance(name, str)]
    return list(dict.fromkeys(keys))


def _home(run: TrainPass, path: str) -> str:
    """The path of the module of the traced block that the module at ``path`` becomes an instance of (below a block
    stood in for in the eager passes, whose records are the traced block's), else ``path``."""
    for member, home in (run.eager.done.items() if run.eager is not None else ()):
        if path == member or path.startswith(member + "."):
            return home + path[len(member):]
    return path


def _described(exc: BaseException) -> str:
    """``"ValueError: <first line of the message, at most 200 characters>"``."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


def _apply_train(ir: IR, table: ModuleTable, hierarchy: Hierarchy, train: TrainOps) -> None:
    skipped = apply_train_trace(ir, hierarchy, train, table)
    random = train_only_randomness(hierarchy, train, table)
    notes = ([f"dropout ops not aligned in: {', '.join(skipped)}"] if skipped else []) + (
        [f"random ops only in train mode in: {', '.join(random)}"] if random else [])
    ir.root.meta["train_trace"] = "; ".join(notes) or "applied"
    if notes:
        warnings.warn(
            f"torch2ir: the rebuilt model's train mode will differ from the original's ({'; '.join(notes)}): "
            "train-only randomness such as DropPath or LayerDrop is decided in Python and cannot be replayed; "
            "eval mode is exact", TrainModeWarning, stacklevel=7)


__all__ = ["COMPUTATIONS_NOTE", "TrainPass", "train_differs", "train_mode"]
