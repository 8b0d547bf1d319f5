"""Assemble the IR of a model: implementations, graphs, calling convention, tensors."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Collection, Mapping
from typing import Any

import networkx as nx
from torch import fx, nn

from common.errors import ConversionError, IRError, listing
from common.ir import CARRIED_NOTES, IR, NOTES_KEY, Implementation
from common.module_state import kept_attributes
from common.notes import CUSTOM_BACKWARD_KEY, UnreachedExpertsWarning, unreached_experts, unreached_experts_message
from common.required_ops import function_names, required_ops_error
from common.safety import Allowlist
from common.validate import validate
from torch2ir.frontend import brevitas_branches, custom_backward
from torch2ir.frontend.export import (
    ExportFailedError,
    OpaqueCallError,
    export,
    naming_failure,
    needs_signature,
)
from torch2ir.frontend.functional_calls import method_calls, name_methods
from torch2ir.frontend.hooks import check_hooked_frames, check_hooks, hook_scopes, is_stand_in, relocate_hook_ops
from torch2ir.frontend.transformers_experts import traced_experts
from torch2ir.hierarchy.base_class import record_bases
from torch2ir.hierarchy.call_types import real_sequentials, sync_call_types
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.hierarchy.program_facts import (
    _mutations,
    calling_convention,
    keep_tensors,
    module_conventions,
    record_constants,
    shape_of,
)
from torch2ir.hierarchy.recover import Frame, Hierarchy, Problem
from torch2ir.hierarchy.unbacked_names import renumber_unbacked
from torch2ir.lowering.capture import Capture
from torch2ir.opaque.custom_calls import warn as warn_custom_backward
from torch2ir.opaque.driver import with_opaque
from torch2ir.opaque.recording import StandIns as OpaqueStandIns
from torch2ir.quant.int8 import has_int8, int8_stand_ins, refuse_int8
from torch2ir.quant.pt2e_prepared import record_pt2e_prepared
from torch2ir.quant.torchao_weights import torchao_stand_ins
from torch2ir.signatures.record import record_calls, signature_targets
from torch2ir.trace_once.instances import check_stood_in_calls, instantiate
from torch2ir.trace_once.lower import plan
from torch2ir.trace_once.trace import StandIns, TraceOnceFallback, alike_groups
from torch2ir.train.dropout import (
    DROPOUT_OPS,
    SDPA,
)
from torch2ir.train.passes import TrainPass, train_mode


def build_ir(
    converter: Any, model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, *, strict: bool,
    dynamic_shapes: Any, allowlist: Allowlist | None = None, captured: list[Capture] | None = None,
    train_checks: bool = True, trace_once: bool | Collection[str] = False,
    opaque: str | Collection[type | str] | None = None,
) -> IR:
    """The IR of ``model(*args, **kwargs)``, with the :class:`~torch2ir.lowering.capture.Capture` of its export
    attached.

    ``captured``: a list the capture is appended to as soon as the export succeeded (so that a caller can lower
    a model whose module-level IR fails); the IR is then returned without its capture attached.
    ``train_checks=False`` skips the train-mode analysis (for an IR that is only lowered).
    ``trace_once``: trace each group of alike blocks once (:mod:`torch2ir.trace_once.trace`; a collection of attribute
    names: those may differ between alike blocks, e.g. ``("layer_idx",)``); ignored with ``strict=True`` and when
    ``captured`` is given (the export must then be the model's whole computation, to be lowered).

    ``opaque``: ``"auto"`` or module classes (or their qualified names) to keep as opaque leaves
    (:mod:`torch2ir.opaque.leaves`; ``"auto"``: the smallest module whose trace fails, each in turn, when the
    export fails); ignored when ``captured`` is given.

    Raises:
        ConversionError: every construct the IR cannot hold, listed together.
    """
    # the model's code runs for real: its own attributes are put back after; torchao weights are stood in for;
    # transformers' eager experts loops run their traceable form (entered before any stand-in takes a forward)
    with kept_attributes(model), traced_experts(), \
            torchao_stand_ins(model, lambda: ModuleTable(model, converter)) as stood:
        try:
            ir = _convert(converter, model, args, kwargs, strict=strict, dynamic_shapes=dynamic_shapes,
                          allowlist=allowlist, captured=captured, train_checks=train_checks, trace_once=trace_once,
                          opaque=opaque)
        finally:
            stood.refuse_lowering(captured or [])
        stood.record(ir)
        return ir


def _convert(converter: Any, model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, *, strict: bool,
             dynamic_shapes: Any, allowlist: Any, captured: Any, train_checks: bool, trace_once: Any,
             opaque: Any) -> IR:
    # the custom autograd.Functions the exports trace are warned about once, naming the modules calling them
    # (torch2ir.opaque.custom_calls; opaque="auto" keeps those opaque)
    with custom_backward.collected() as calls:
        if opaque and captured is None:
            if strict:
                raise ConversionError("opaque leaves need the non-strict export: strict export (dynamo) traces "
                                      "their stand-ins' Python and cannot", implementation="root",
                                      hint="convert with strict=False (the default) to use opaque=")
            ir = with_opaque(_build_ir, converter, model, args, kwargs, opaque, strict=strict,
                             dynamic_shapes=dynamic_shapes, allowlist=allowlist, train_checks=train_checks,
                             trace_once=trace_once)
        else:
            ir = _build_ir(converter, model, args, kwargs, strict=strict, dynamic_shapes=dynamic_shapes,
                           allowlist=allowlist, captured=captured, train_checks=train_checks, trace_once=trace_once)
    warn_custom_backward(model, calls, converter.has_handler)
    experts = unreached_experts(ir.values())
    if experts:
        warnings.warn(f"torch2ir: {unreached_experts_message('the converted model', experts)}",
                      UnreachedExpertsWarning, stacklevel=4)
    return ir


def _build_ir(
    converter: Any, model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, *, strict: bool,
    dynamic_shapes: Any, allowlist: Allowlist | None = None, captured: list[Capture] | None = None,
    train_checks: bool = True, trace_once: bool | Collection[str] = False,
    opaque_standins: OpaqueStandIns | None = None,
) -> IR:
    """:func:`build_ir` (``opaque_standins``: the stand-ins of the opaque leaves, installed while exporting)."""
    allowlist = allowlist or Allowlist()
    table = ModuleTable(model, converter)
    hook_problems, hooked = check_hooks(model, table)
    _raise(hook_problems)
    if table.is_leaf(model):  # the whole model is one handled module (nn.LSTM, ...)
        ir = table.build(called=set())
        _raise(table.errors)
        keep_tensors(ir, table, {})
        capture = Capture(None, model, args, kwargs, allowlist, refused=f"the whole model is one handled "
                          f"{type(model).__name__} (no export ran)")
        if captured is None:
            capture.seal(ir)
        return ir
    refuse_int8(model)  # before tracing: export's own error names neither the module nor what to do
    groups: list[Any] = []
    fallbacks: list[tuple[str, str]] = []  # trace_once: each group traced in full after all, and why
    # strict export (dynamo) would trace the stand-in wrappers; opaque leaves: every block is traced
    if trace_once and captured is None and not strict and opaque_standins is None:
        ignored = () if trace_once is True else tuple(trace_once)
        groups = [g for g in alike_groups(model, ignored, table.is_leaf) if not table.is_leaf(g.modules[0])]
        if groups:
            standins = StandIns(groups)
            try:
                with method_calls(model, table) as methods:
                    return _traced(model, args, kwargs, table, hooked, methods, strict=strict,
                                   dynamic_shapes=dynamic_shapes, allowlist=allowlist, captured=captured,
                                   train_checks=train_checks, standins=standins)
            except TraceOnceFallback as exc:
                fallbacks = [*standins.fallbacks, ("the model", exc.message)]
                table = ModuleTable(model, converter)  # a fresh table: the failed attempt recorded errors in it
    with method_calls(model, table) as methods:  # FloatFunctional.add(...) is traced as a call of the module
        ir = _traced(model, args, kwargs, table, hooked, methods, strict=strict,
                     dynamic_shapes=dynamic_shapes, allowlist=allowlist, captured=captured, train_checks=train_checks,
                     opaque_standins=opaque_standins)
    if trace_once and getattr(ir, "capture", None) is not None:
        ir.capture.trace_once_fallbacks = fallbacks
    return ir


def _traced(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None, table: ModuleTable,
            hooked: list[str], methods: dict[int, set[str]], *, strict: bool, dynamic_shapes: Any,
            allowlist: Allowlist, captured: list[Capture] | None, train_checks: bool,
            standins: StandIns | None = None, opaque_standins: OpaqueStandIns | None = None) -> IR:
    """:func:`build_ir` from the export on (``methods``: :func:`torch2ir.frontend.functional_calls.method_calls`'s)."""
    custom: list[str] = []  # custom autograd.Functions the forward calls (common.notes)
    with brevitas_branches.decided(model, args, kwargs):  # brevitas' branches on its quantizers' state
        while True:
            try:
                with hook_scopes(model, hooked, table), record_calls(signature_targets(model, table)) as calls, \
                        int8_stand_ins(model, table.is_leaf), \
                        (standins.installed() if standins is not None else contextlib.nullcontext()), \
                        (opaque_standins.installed() if opaque_standins is not None else contextlib.nullcontext()):
                    ep = export(model, args, kwargs, strict=strict, dynamic_shapes=dynamic_shapes,
                                preserve=_preserved(model, table),
                                on_attempt=_forgetting(calls, standins, opaque_standins),
                                custom_functions=custom, required=[p for p, _ in opaque_standins.modules]
                                if opaque_standins is not None else None)
            except ExportFailedError as exc:
                if standins is not None:
                    raise TraceOnceFallback("the export with stand-ins failed") from exc
                if isinstance(exc, OpaqueCallError):
                    raise  # names the opaque leaves already
                raise naming_failure(exc, model, args, kwargs) from exc.__cause__
            failed = [*((g, g.failure) for g in standins.failed()),
                      *((g, "its traced call reads tensor constants export lifted") for g in standins.with_constants(
                          ep.graph_signature.inputs_to_lifted_tensor_constants.values())),
                      *((g, "its traced call holds a higher-order op") for g in standins.with_subgraphs(ep.graph))
                      ] if standins is not None else []
            if not failed:
                break
            for group, why in failed:  # a group whose traced call a stand-in cannot repeat: export again without it
                group.enabled = False
                standins.fallbacks.append((type(group.modules[0]).__name__, str(why)))
            custom.clear()
    fallbacks = list(standins.fallbacks) if standins is not None else []
    for group, why in standins.traced_in_full() if standins is not None else []:  # no second export needed
        fallbacks.append((type(group.modules[0]).__name__, why))
    if standins is not None and not standins.used():
        standins = None
    relocate_hook_ops(ep)
    stand_ins = [p for p, m in model.named_modules() if is_stand_in(m) and table.is_leaf(m)]
    refused = (f"quantization observers / stubs ({', '.join(stand_ins[:3])}{', ...' if len(stand_ins) > 3 else ''})"
               " are traced as stand-ins" if stand_ins else None)
    if has_int8(model):
        refused = "eager int8 modules are traced as stand-ins (their kernels have no traceable implementation)"
    if opaque_standins is not None:
        paths = [p for p, _ in opaque_standins.modules]
        refused = (f"opaque leaves ({', '.join(paths[:3])}{', ...' if len(paths) > 3 else ''}) are traced as "
                   "stand-ins (their own forward is not in the trace)")
    capture = Capture(ep, model, args, kwargs, allowlist, refused=refused)
    if captured is not None:
        captured.append(capture)
    hierarchy = Hierarchy(ep, table, calls, capture.same_input)
    if standins is not None:  # lowering copies each traced call in place of its stand-ins
        check_stood_in_calls(hierarchy, standins)
        capture.copies, why = plan(hierarchy, table, standins)
        if why is not None and capture.refused is None:
            capture.refused = f"alike blocks were traced once (trace_once=True) and {why}"
    try:  # the size computations it copies into frames leave export's graph again (torch2ir.hierarchy.local_sizes)
        frames = list(hierarchy.graph_frames())
        called = {table.key(f.path) or "root" for f in frames}
        ir = table.build(called)
        problems: list[Problem] = [*table.errors, *check_hooked_frames(hierarchy, hooked)]
        capture.link(hierarchy, _per_call_graphs(ir, table, hierarchy, frames, problems))
        problems += hierarchy.problems
        real_sequentials(ir, table)
        record_bases(ir, table)  # the torch.nn class a module traced as a graph subclasses (common.base_class)
        sync_call_types(ir)
        problems += name_methods(ir, table, methods)
        record_constants(ir, table, ep)
        _mutations(ep, hierarchy, problems)
        _raise(problems)
        calling_convention(ir.root, ep)
        module_conventions(ir, table, hierarchy, frames)
        if train_checks:
            train_mode(ir, TrainPass(model, args, kwargs, table, hierarchy, ep, strict=strict,
                                     dynamic_shapes=dynamic_shapes, hooked=hooked,
                                     preserved=_preserved(model, table), standins=standins))
        # after the train-mode analysis, which marks the traced member's dropout ops (a stood-in frame has none)
        instances = instantiate(ir, table, standins, called) if standins is not None else {}
        sync_call_types(ir, instances)
        if custom:
            ir.root.meta[CUSTOM_BACKWARD_KEY] = custom
        _carried_notes(ir, model)
        record_pt2e_prepared(ir, model)  # what convert_pt2e reads from a prepared model (common.pt2e_prepared)
        keep_tensors(ir, table, ep.constants)
        _instance_tensors(ir, instances)
        renumber_unbacked(ir)  # the sizes read from data, named without export's gaps
        missing = allowlist.required(function_names(ir))
        if missing:
            error = required_ops_error(missing, "the model calls")
            raise ConversionError(error.message, hint=error.hint) from error
        try:
            validate(ir, allowlist=allowlist)
        except IRError as exc:
            raise ConversionError(f"the converter produced an invalid IR: {exc}",
                                  implementation=exc.implementation, node=exc.node,
                                  hint="this is a torch2ir bug; please report it with the model") from exc
        if captured is None:
            capture.seal(ir)
            capture.trace_once_fallbacks = fallbacks
        return ir
    finally:
        hierarchy.restore_graph()


def _forgetting(calls: list[Any], standins: StandIns | None, opaque: OpaqueStandIns | None = None) -> Any:
    """What to forget when export starts another attempt: the call records, and the stand-ins' records."""
    def forget() -> None:
        calls.clear()
        if standins is not None:
            standins.reset()
        if opaque is not None:
            opaque.reset()
    return forget


def _instance_tensors(ir: IR, instances: Mapping[str, str]) -> None:
    """Constants of stood-in members (export lifted them only from the traced member): the traced member's."""
    for key, home in instances.items():
        for name, rec in ir[key].state.items():
            if rec["kind"] == "constant" and f"{home}.{name}" in ir.tensors and f"{key}.{name}" not in ir.tensors:
                ir.tensors[f"{key}.{name}"] = ir.tensors[f"{home}.{name}"].clone()


def _carried_notes(ir: IR, model: nn.Module) -> None:
    """A model rebuilt by ir2torch stands for the original: its root carries the original's train-mode notes,
    which replace the ones computed for the rebuild (whose train mode is the eval trace's, by construction)."""
    recorded = getattr(model, "meta", None)
    notes = recorded.get(NOTES_KEY) if isinstance(model, fx.GraphModule) and isinstance(recorded, dict) else None
    if not isinstance(notes, dict):
        return
    for key in CARRIED_NOTES:
        ir.root.meta.pop(key, None)
        if key in notes:
            ir.root.meta[key] = notes[key]


def _preserved(model: nn.Module, table: ModuleTable) -> list[str]:
    """Paths of the outermost handled leaves whose call signature export must keep (see :func:`needs_signature`)."""
    return [p for p in table.outermost_leaves() if needs_signature(table.module_of_key[table.key_of_path[p]])]


def _per_call_graphs(ir: IR, table: ModuleTable, hierarchy: Hierarchy, frames: list[Frame],
                     problems: list[Problem]) -> dict[int, tuple[str, int, Implementation]]:
    """Each module's graph, and one further graph (a variant) per distinct way its calls trace.

    Every call is written to a graph of its own; modules are then settled children first, so a parent's
    graphs already say which variant of each child they call (``variant`` on the call node) when the
    parent's calls are compared. Calls whose graphs have the same structure share one graph.

    Returns:
        ``{id(graph written for a call): (key, variant, graph written for the call whose graph it shares)}``.
    """
    placed: dict[int, tuple[str, int, Implementation]] = {}
    written: dict[int, Implementation] = {}
    for frame in frames:
        key = table.key(frame.path) or "root"
        if key in ir:
            written[id(frame)] = Implementation(key, ir[key].type)
            hierarchy.build_graph(frame, written[id(frame)])
    by_key: dict[str, list[Frame]] = {}
    inside = nx.DiGraph()  # key -> keys called (at any depth) from one of its calls
    for frame in frames:
        if id(frame) in written:
            key = written[id(frame)].name
            by_key.setdefault(key, []).append(frame)
            inside.add_node(key)
            for outer in list(frame.chain())[1:]:
                if id(outer) in written:
                    inside.add_edge(written[id(outer)].name, key)
    for key in reversed(list(nx.topological_sort(inside))):  # a module after every module its calls call
        frame = by_key[key][0]
        ir[key].graph = written[id(frame)].graph
        placed[id(written[id(frame)])] = (key, 0, written[id(frame)])
        if len(by_key[key]) == 1:
            continue  # one call, one graph
        shapes: list[list[tuple]] = []
        shared: list[Implementation] = []
        for call in by_key[key]:
            shape = shape_of(written[id(call)])
            if shape not in shapes:
                shapes.append(shape)
                shared.append(written[id(call)])
                if len(shapes) > 1:
                    ir[key].add_variant().graph = written[id(call)].graph
            index = shapes.index(shape)
            placed[id(written[id(call)])] = (key, index, shared[index])
            if index and id(call) in hierarchy.call_nodes:
                graph, node = hierarchy.call_nodes[id(call)]
                graph.graph.nodes[node]["variant"] = index
        if len(shapes) > 1 and any(a.get("implementation") in (*DROPOUT_OPS, SDPA) for v in ir[key].variants
                                   for _, a in v.graph.nodes(data=True)):
            problems.append((key, f"module is called {len(by_key[key])} times, its calls trace to different "
                             "graphs, and one of them holds dropout: train mode could not be matched per call",
                             "call it the same way each time, or give its class a handler"))
    return placed


def _raise(problems: list[Problem]) -> None:
    if not problems:
        return
    lines = "  " + listing([f"- {where}: {message} (fix: {hint})" for where, message, hint in problems], sep="\n  ")
    raise ConversionError(f"{len(problems)} unsupported construct(s):\n{lines}",
                          implementation=problems[0][0], hint="see the list above; each line names its module")

