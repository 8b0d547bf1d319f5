"""Per-node comparison of an executed FlatIR against the original exported program.

:func:`common.verify.verify` compares final outputs (and module calls, which a flat module has none
of). :func:`verify_nodes` goes down to single ops: it runs the original ``ExportedProgram`` and the
executed FlatIR side by side through ``torch.fx.Interpreter``, records the output of every op, pairs
the ops of the two graphs and names the first FlatIR node whose output differs::

    flat_module = ir2torch.convert(flat, model.state_dict())
    report = verify_nodes(flat_module, torch.export.export(model, args, kwargs), args, kwargs)
    assert report.ok, str(report)  # else: report.first_divergence.node / .op_type / .module_path

Ops are paired by aligning the two sequences of op names (``difflib.SequenceMatcher``), so a graph
traced on ``meta`` (which may hold a few extra ``contiguous`` calls) still pairs with one traced on
real tensors; ops found on one side only are counted, not compared. Compare graphs of the same
decomposition level (``ep.run_decompositions()`` for a FlatIR lowered with ``decompose=True``).
This module never imports torch2ir or ir2torch: it reads the ``flat_node`` / ``op_type`` /
``module_path`` entries ``ir2torch`` puts in each fx node's ``meta``.
"""

from __future__ import annotations

import difflib
import math
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx._pytree as fx_pytree
from torch import fx
from torch.utils import _pytree as pytree

from .pytree_compare import _snapshot, compare_leaf
from .safety import function_name
from .verify import VerificationError


@dataclass
class NodeDivergence:
    """The first FlatIR node whose output differs from its counterpart in the exported program."""

    node: str
    op_type: str
    module_path: str
    reference_node: str
    max_abs_diff: float  # inf when the outputs differ in structure, shape or dtype
    shapes: list[tuple[int, ...]]
    reference_shapes: list[tuple[int, ...]]


@dataclass
class NodeReport:
    """Result of :func:`verify_nodes`; ``str(report)`` summarises it."""

    ok: bool
    compared: int = 0
    unmatched_flat: list[str] = field(default_factory=list)  # FlatIR nodes with no counterpart
    unmatched_reference: list[str] = field(default_factory=list)  # exported-program nodes with none
    diverged: list[str] = field(default_factory=list)  # FlatIR nodes that differ, in execution order
    first_divergence: NodeDivergence | None = None

    def __str__(self) -> str:
        lines = [f"verify_nodes: {'OK' if self.ok else 'FAILED'} ({self.compared} ops compared, "
                 f"{len(self.unmatched_flat)} FlatIR / {len(self.unmatched_reference)} reference ops unmatched)"]
        div = self.first_divergence
        if div is not None:
            lines.append(f"first divergence: node {div.node!r} ({div.op_type}) in {div.module_path!r}, "
                         f"reference node {div.reference_node!r}: max abs diff {div.max_abs_diff:.1e}, "
                         f"shapes {div.shapes} vs {div.reference_shapes}")
            lines.append(f"{len(self.diverged)} nodes differ in all")
        return "\n".join(lines)


def verify_nodes(
    flat_module: fx.GraphModule,
    reference: torch.export.ExportedProgram,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None = None,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> NodeReport:
    """Compare the output of every op of ``flat_module`` with the paired op of ``reference``.

    Args:
        flat_module: a module from ``ir2torch.convert(flat_ir, state_dict)``.
        reference: the original model's exported program, with real weights.
        args: positional inputs of the model.
        kwargs: keyword inputs of the model.
        atol: absolute tolerance (as in ``torch.allclose``).
        rtol: relative tolerance.

    Returns:
        A :class:`NodeReport`: ``ok`` when every paired op agrees.

    Raises:
        TypeError: ``flat_module`` carries no FlatIR node metadata, or ``reference`` is not an ExportedProgram.
        VerificationError: either graph raised while running (chained to the exception).
    """
    if not isinstance(reference, torch.export.ExportedProgram):
        raise TypeError(f"reference must be a torch.export.ExportedProgram, not {type(reference).__name__}")
    if not any("flat_node" in n.meta for n in flat_module.graph.nodes):
        raise TypeError("flat_module has no FlatIR nodes; pass the module ir2torch.convert returns for a FlatIR")
    kwargs = dict(kwargs or {})
    ref_records = _run("reference", reference.graph_module, _program_inputs(reference, args, kwargs), _reference_op)
    in_spec = flat_module.graph._codegen.pytree_info.in_spec if hasattr(flat_module.graph._codegen, "pytree_info") \
        else None
    flat_inputs = fx_pytree.tree_flatten_spec((tuple(args), kwargs), in_spec) if in_spec is not None else list(args)
    flat_records = _run("FlatIR", flat_module, flat_inputs, lambda n: n.meta.get("op_type"))
    report = NodeReport(ok=True)
    matcher = difflib.SequenceMatcher(None, [op for _, op, _ in ref_records], [op for _, op, _ in flat_records],
                                      autojunk=False)
    paired: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            paired[block.b + k] = block.a + k
    report.unmatched_reference = [ref_records[i][0].name for i in range(len(ref_records)) if i not in paired.values()]
    for j, (node, op_type, output) in enumerate(flat_records):
        if j not in paired:
            report.unmatched_flat.append(node.meta["flat_node"])
            continue
        ref_node, _, ref_output = ref_records[paired[j]]
        report.compared += 1
        ok, diff = _compare(output, ref_output, atol, rtol)
        if ok:
            continue
        report.ok = False
        report.diverged.append(node.meta["flat_node"])
        if report.first_divergence is None:
            report.first_divergence = NodeDivergence(node.meta["flat_node"], op_type, node.meta.get("module_path", ""),
                                                     ref_node.name, diff, _shapes(output), _shapes(ref_output))
    return report


def _reference_op(node: fx.Node) -> str | None:
    """The op name of an exported-program node as a FlatIR names it (None: not an op, e.g. getitem)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return None
    try:
        return function_name(node.target)
    except Exception:  # noqa: BLE001 - any callable without an allow-listed name
        return str(node.target)


def _program_inputs(ep: torch.export.ExportedProgram, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The flat placeholder values of ``ep.graph_module``: weights, constants and user inputs, in order."""
    user = iter(fx_pytree.tree_flatten_spec((tuple(args), kwargs), ep.call_spec.in_spec))
    values: list[Any] = []
    for spec in ep.graph_signature.input_specs:
        kind = spec.kind.name
        if kind == "USER_INPUT":
            values.append(next(user))
        elif spec.target in ep.state_dict:
            values.append(ep.state_dict[spec.target])
        else:
            values.append(ep.constants[spec.target])
    return values


class _Recorder(fx.Interpreter):
    """Runs a graph, keeping ``(node, op name, output snapshot)`` for every node ``op_of`` names."""

    def __init__(self, module: fx.GraphModule, op_of: Any) -> None:
        super().__init__(module)
        self.op_of = op_of
        self.records: list[tuple[fx.Node, str, Any]] = []

    def run_node(self, n: fx.Node) -> Any:
        out = super().run_node(n)
        op = self.op_of(n) if n.op == "call_function" else None
        if op is not None:
            self.records.append((n, op, _snapshot(out)))
        return out


def _run(which: str, module: fx.GraphModule, inputs: list[Any], op_of: Any) -> list[tuple[fx.Node, str, Any]]:
    recorder = _Recorder(module, op_of)
    try:
        with torch.no_grad():
            recorder.run(*_snapshot(list(inputs)))
    except Exception as exc:
        raise VerificationError(f"the {which} graph raised {type(exc).__name__} while running: {exc}",
                                hint="run it alone on the same inputs to debug it") from exc
    return recorder.records


def _compare(a: Any, b: Any, atol: float, rtol: float) -> tuple[bool, float]:
    xs, ys = pytree.tree_leaves(a), pytree.tree_leaves(b)
    if len(xs) != len(ys):
        return False, math.inf
    ok, worst = True, 0.0
    for x, y in zip(xs, ys):
        leaf_ok, diff = compare_leaf(x, y, atol, rtol)
        ok, worst = ok and leaf_ok, max(worst, diff)
    return ok, worst


def _shapes(tree: Any) -> list[tuple[int, ...]]:
    return [tuple(x.shape) for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]


__all__ = ["NodeDivergence", "NodeReport", "verify_nodes"]
