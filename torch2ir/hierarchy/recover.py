"""Recover the module hierarchy from one ``torch.export`` trace.

Every ``call_function`` node of the exported graph carries ``meta["nn_module_stack"]``:
the chain of module calls it ran in (``"L__self__blk@1"`` marks a second call). From it:

1. **Frames**: one frame per module *call*, nested like the calls. The first handled
   module on a stack closes it: everything below is that leaf's business.
2. **Flows**: a value produced in one frame and used in another becomes an output of
   each frame on the way up to their common ancestor and an input of each frame on the
   way down. A parameter/buffer is read (``get_attr``) in the deepest non-leaf frame on
   the user's chain whose module owns it, then flows down like any value.
3. **Graphs**: each non-leaf frame becomes its implementation's graph: ``input`` nodes,
   ``function`` nodes (ATen ops with their non-tensor arguments), ``get_attr`` nodes and
   one call node per child frame; leaves are called with their exact preserved signature.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx, nn
from torch.fx import _pytree as fx_pytree
from torch.utils import _pytree as pytree

from common.ir import Implementation
from torch2ir.hierarchy.local_sizes import localize_sizes
from torch2ir.hierarchy.modules import ModuleTable
from torch2ir.hierarchy.symbolic_order import canonical_positions
from torch2ir.signatures.match import Signature, match_calls
from torch2ir.signatures.record import CallRecord

Problem = tuple[str, str, str]  # (implementation, message, hint)


@dataclass(eq=False)
class Frame:
    """One call of one module during the trace."""

    key: str  # nn_module_stack key ("" for the root)
    path: str  # module path the call went through
    parent: Frame | None
    leaf: bool
    items: list[Any] = field(default_factory=list)  # fx nodes and child frames, in order
    inputs: dict[fx.Node, None] = field(default_factory=dict)
    outputs: dict[fx.Node, None] = field(default_factory=dict)
    state_reads: dict[fx.Node, str] = field(default_factory=dict)  # placeholder -> relative target
    children: dict[str, Frame] = field(default_factory=dict)
    call_index: int = 0

    def chain(self) -> Iterator[Frame]:
        frame: Frame | None = self
        while frame is not None:
            yield frame
            frame = frame.parent

    def owns(self, fqn: str) -> bool:
        """True when state ``fqn`` belongs to this frame's module or one below it."""
        return self.path == "" or fqn.startswith(self.path + ".")

    def relative(self, fqn: str) -> str:
        """The path of ``fqn`` (this frame's module or one below it) from this frame's module."""
        if self.path and not fqn.startswith(self.path + "."):
            raise ValueError(f"{fqn!r} is not below {self.path!r}")  # a caller checks first: never a cut name
        return fqn if self.path == "" else fqn[len(self.path) + 1 :]


def _strip_root(stack: dict[str, tuple[str, Any]]) -> list[tuple[str, str]]:
    return [(key, path) for key, (path, _) in stack.items() if path != ""]


_SYMBOLIC = (torch.SymInt, torch.SymFloat, torch.SymBool, int, float, bool)


def dead_symbolic(graph: fx.Graph, read: Collection[fx.Node] = ()) -> set[fx.Node]:
    """The calls of ``graph`` computing a Python number (a symbolic size, a comparison of sizes) that nothing
    reads, directly or through other such calls (``read``: numbers read from outside the graph's data flow).

    Export leaves some behind (sums of unbacked sizes a later assertion had needed); where, depends on how the
    model spelled its computation, so a rebuilt model can leave others than the original. They have no effect:
    the IR leaves them out. Tensor-valued calls are written as export gives them, read or not.
    """
    dead: set[fx.Node] = set()
    for node in reversed(graph.nodes):
        if (node.op == "call_function" and isinstance(node.meta.get("val"), _SYMBOLIC)
                and not isinstance(node.target, torch._ops.HigherOrderOperator)
                and _pure_symbolic(node.target) and node not in read and all(user in dead for user in node.users)):
            dead.add(node)
    return dead


def _pure_symbolic(target: Any) -> bool:
    """Whether ``target`` only computes with numbers: Python's operators, ``math``, ``torch.sym_*``, the
    ``aten.sym_*`` size queries."""
    if getattr(target, "__module__", None) in ("_operator", "operator", "math"):
        return True
    if isinstance(target, torch._ops.OpOverload):
        return target.namespace == "aten" and target.__name__.startswith("sym_")
    return getattr(target, "__name__", "").startswith("sym_") and getattr(target, "__module__", "") == "torch"


class Hierarchy:
    """Frames, flows and graphs of one exported program."""

    def __init__(self, ep: torch.export.ExportedProgram, table: ModuleTable,
                 calls: list[CallRecord] | None = None, same_input: dict[int, int] | None = None) -> None:
        self.ep = ep
        self.table = table
        self.problems: list[Problem] = []
        sig = ep.graph_signature
        self.state_fqn: dict[str, str] = {
            **sig.inputs_to_parameters, **sig.inputs_to_buffers, **sig.inputs_to_lifted_tensor_constants,
        }
        placeholders = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
        # every user input, constants (a bool flag passed in) included: the root keeps the original arity
        self.user_inputs = [placeholders[s.arg.name] for s in sig.input_specs
                            if s.kind.name == "USER_INPUT" and getattr(s.arg, "name", None) in placeholders]
        #: index of a user input -> index of the earlier one that was the same tensor object in the call
        #: (export gives the graph one of them to read for both; see :func:`same_objects`)
        self.same_input = dict(same_input or {})
        self.root = Frame("", "", None, leaf=False)
        self.frame_of: dict[fx.Node, Frame] = {}
        self.frames_by_path: dict[str, list[Frame]] = {}
        self.signatures = {e.fqn: e.signature for e in ep.module_call_graph if e.signature is not None}
        #: id of a non-leaf child frame -> (graph that calls it, name of the call node)
        self.call_nodes: dict[int, tuple[Implementation, str]] = {}
        #: fx node (or leaf frame) -> (graph written for its frame, node written for it): the FlatIR's links
        self.origin: dict[Any, tuple[Implementation, str]] = {}
        self._assign_frames()
        #: id of a non-leaf frame -> its recorded call signature (only frames written with it)
        self.signed: dict[int, Signature] = {}
        found = match_calls(ep.graph, self.frame_of, self._module_of, calls or [])
        #: removes the size computations copied into the frames that read them (torch2ir.hierarchy.local_sizes)
        self.restore_graph: Callable[[], None] = lambda: None
        if calls is not None:
            self.restore_graph = localize_sizes(self, found, _pure_symbolic)
            self._forget_dead({v for sig in found.values() for v in sig.inputs if isinstance(v, fx.Node)})
        self._compute_flows()
        self._sign(found)
        self._align_repeated_calls()

    # -- 1. frames -----------------------------------------------------------------------
    def _child(self, parent: Frame, key: str, path: str) -> Frame:
        frame = parent.children.get(key)
        if frame is None:
            module = self.table.module_of_key[self.table.key(path)]  # type: ignore[index]
            frame = Frame(key, path, parent, leaf=self.table.is_leaf(module))
            calls = self.frames_by_path.setdefault(path, [])
            frame.call_index = len(calls)
            calls.append(frame)
            parent.children[key] = frame
            parent.items.append(frame)
        return frame

    def _assign_frames(self) -> None:
        self.dead = dead_symbolic(self.ep.graph)
        for node in self.ep.graph.nodes:
            if node in self.dead:  # nothing reads it: not written, wherever export happened to emit it
                self.frame_of[node] = self.root
                continue
            if node.op not in ("call_function", "get_attr"):
                self.frame_of[node] = self.root
                continue
            source = node.args[0] if node.target is operator.getitem and node.args else None
            if isinstance(source, fx.Node) and source in self.frame_of:
                frame = self.frame_of[source]  # unpacking belongs with what it unpacks
            else:
                frame = self.root
                for key, path in _strip_root(node.meta.get("nn_module_stack") or {}):
                    if self.table.key(path) is None:
                        # not a registered submodule (export's placeholder for nodes without a
                        # stack, or a module kept in a plain list): its ops stay in the caller
                        continue
                    frame = self._child(frame, key, path)
                    if frame.leaf:
                        break
            self.frame_of[node] = frame
            if not frame.leaf and node.op == "call_function":
                frame.items.append(node)

    def _forget_dead(self, passed: set[fx.Node]) -> None:
        """Leave out the number-valued calls that copies made unread (:func:`dead_symbolic`); a number a signed call
        passes (``passed``, an item of a ``torch.Size`` argument that the callee never reads) is read by the call."""
        for node in dead_symbolic(self.ep.graph, passed) - self.dead:
            frame = self.frame_of.get(node)
            if frame is not None and node in frame.items:
                frame.items.remove(node)
            self.frame_of[node] = self.root
            self.dead.add(node)

    # -- 2. flows ------------------------------------------------------------------------
    def outer_value(self, value: fx.Node, consumer: Frame) -> fx.Node:
        """The value ``consumer`` reads for ``value``: a no-op ``.to()`` computed in another module's call is the
        very tensor it was applied to (the tracer names later uses of that tensor after the ``to``)."""
        while value in self.same_as and self.frame_of[value] not in consumer.chain():
            value = self.same_as[value]
        return value

    def _compute_flows(self) -> None:
        self.same_as = {n: n.args[0] for n in self.ep.graph.nodes if _noop_to(n)}
        for node in self.ep.graph.nodes:
            if node.op not in ("call_function", "output") or node in self.dead:
                continue
            consumer = self.frame_of[node]
            for value in node.all_input_nodes:
                if value.op != "get_attr":
                    self._flow(self.outer_value(value, consumer), consumer)
        by_name = {n.name: n for n in self.ep.graph.nodes}
        for frames in self.frames_by_path.values():
            for frame in frames:
                sig = self.signatures.get(self.signature_key(frame)) if frame.leaf else None
                for arg in sig.inputs if sig is not None else ():
                    if getattr(arg, "name", None) in by_name:  # a leaf may ignore an argument it is given
                        self._flow(by_name[arg.name], frame)

    def _module_of(self, frame: Frame) -> nn.Module | None:
        key = self.table.key(frame.path)
        return self.table.module_of_key.get(key) if key else None

    def _sign(self, found: dict[int, Signature]) -> None:
        """Keep the signatures of modules whose every call was recorded with one convention and reads nothing
        but its arguments; then make each signed call's arguments and results flow like used values."""
        by_key: dict[str, list[Frame]] = {}
        for frames in self.frames_by_path.values():
            for frame in frames:
                if not frame.leaf:
                    by_key.setdefault(self.table.key(frame.path) or "", []).append(frame)
        for frames in by_key.values():
            sigs = [found.get(id(f)) for f in frames]
            for f, s in zip(frames, sigs):
                if s is not None and f.parent is not None:  # a no-op .to() across the call is its source
                    s.inputs = [self.outer_value(v, f) if isinstance(v, fx.Node) else v for v in s.inputs]
                    s.outputs = [self.outer_value(v, f.parent) if isinstance(v, fx.Node) else v for v in s.outputs]
            if any(s is None for s in sigs) or len({s.convention() for s in sigs}) != 1:  # type: ignore[union-attr]
                continue
            if all(self._fits(f, s) for f, s in zip(frames, sigs)):  # type: ignore[arg-type]
                self.signed.update({id(f): s for f, s in zip(frames, sigs)})  # type: ignore[misc]
        frames_by_id = {id(f): f for fs in self.frames_by_path.values() for f in fs}
        for fid, sig in self.signed.items():
            frame = frames_by_id[fid]
            for value in sig.inputs:
                if isinstance(value, fx.Node):
                    self._flow(value, frame)
            for value in sig.outputs:
                if isinstance(value, fx.Node) and value not in sig.inputs:
                    for inner in self.frame_of[value].chain():
                        if inner is frame:
                            break
                        inner.outputs.setdefault(value)
        for fid, sig in self.signed.items():
            if not self._fits(frames_by_id[fid], sig):
                self.problems.append((self.table.key(frames_by_id[fid].path) or "root", "module reads or returns a "
                                      "value it neither receives as an argument nor computes",
                                      "pass the value as an argument"))

    def _fits(self, frame: Frame, sig: Signature) -> bool:
        ins = {v for v in sig.inputs if isinstance(v, fx.Node)}
        outs = {v for v in sig.outputs if isinstance(v, fx.Node)}
        # a parameter passed as an argument comes from outside: the module must not hold that tensor itself
        held = any(self.table.local_name(frame.path, self.state_fqn[v.name]) is not None
                   for v in ins if v.name in self.state_fqn)
        if held or not set(frame.inputs) <= ins or not set(frame.outputs) <= outs:
            return False
        return all(v in ins or frame in self.frame_of.get(v, self.root).chain() for v in outs)

    def _align_repeated_calls(self) -> None:
        """Give every call of a module the same outputs, in graph order (a run of numbers in its canonical order).

        A frame's outputs are the values used outside it, so two calls of one module differ when a caller
        ignores a result of one call only (``block(x); y = block(x)``). Outputs are matched by position among
        the nodes each call ran; a module whose calls ran different numbers of nodes is left alone (the
        comparison in :func:`torch2ir.hierarchy.build.build_ir` reports it).
        """
        position = {node: i for i, node in enumerate(self.ep.graph.nodes)}
        repeated = {id(f): f for frames in self.frames_by_path.values() if len(frames) > 1
                    for f in frames if not f.leaf}
        owned: dict[int, list[fx.Node]] = {key: [] for key in repeated}
        for node, frame in self.frame_of.items():
            if node.op in ("call_function", "get_attr"):
                for f in frame.chain():
                    if id(f) in owned:
                        owned[id(f)].append(node)
        for frames in self.frames_by_path.values():
            calls = [f for f in frames if id(f) in owned]
            nodes = [sorted(owned[id(f)], key=position.__getitem__) for f in calls]
            if len(calls) < 2 or len({len(n) for n in nodes}) != 1:
                continue
            indices = [{v: i for i, v in enumerate(n)} for n in nodes]
            wanted = sorted({index[v] for f, index in zip(calls, indices) for v in f.outputs if v in index})
            for f, n in zip(calls, nodes):
                for value in (n[i] for i in wanted):
                    for inner in self.frame_of[value].chain():
                        inner.outputs.setdefault(value)
                        if inner is f:
                            break
        frames = {id(f): f for f in self.frame_of.values()}.values()
        order = canonical_positions([f.items for f in frames if not f.leaf], position)
        for frame in frames:
            if not frame.leaf and len(frame.outputs) > 1:
                frame.outputs = dict.fromkeys(sorted(frame.outputs, key=order.__getitem__))

    @staticmethod
    def signature_key(frame: Frame) -> str:
        return frame.path if frame.call_index == 0 else f"{frame.path}@{frame.call_index}"

    def _flow(self, value: fx.Node, consumer: Frame) -> None:
        fqn = self.state_fqn.get(value.name)
        if fqn is not None:
            if consumer.leaf and self.table.owns(consumer.path, fqn):
                return  # a leaf's own weights stay inside the leaf
            # the innermost module holding the tensor reads it, under its own name for it (a tied weight)
            source, local = next((f, n) for f in consumer.chain() if not f.leaf
                                 for n in [self.table.local_name(f.path, fqn)] if n is not None)
            source.state_reads.setdefault(value, source.relative(local))
        else:
            producer = self.frame_of[value]
            if producer is consumer:
                return
            ancestors = set(consumer.chain())
            source = next(f for f in producer.chain() if f in ancestors)
            for frame in producer.chain():
                if frame is source:
                    break
                frame.outputs.setdefault(value)
        for frame in consumer.chain():
            if frame is source:
                break
            frame.inputs.setdefault(value)

    def holds_state(self, frame: Frame, value: fx.Node) -> bool:
        """True when ``value`` is a parameter/buffer placeholder whose tensor is one of ``frame``'s module's own."""
        fqn = self.state_fqn.get(value.name)
        return fqn is not None and self.table.owns(frame.path, fqn)

    # -- 3. graphs -----------------------------------------------------------------------
    def graph_frames(self) -> Iterator[Frame]:
        """Non-leaf frames, parents before children."""
        stack = [self.root]
        while stack:
            frame = stack.pop(0)
            if not frame.leaf:
                yield frame
                stack.extend(c for c in frame.items if isinstance(c, Frame))

    def build_graph(self, frame: Frame, impl: Implementation) -> None:
        """Fill ``impl.graph`` with the graph of ``frame``."""
        from torch2ir.hierarchy.graph_writer import GraphWriter

        GraphWriter(self, frame, impl).write()


def same_objects(ep: torch.export.ExportedProgram, inputs: tuple[tuple, Any]) -> dict[int, int]:
    """``{i: j}`` for each flat user input ``i`` that is the very tensor of an earlier one ``j`` (in export's
    order of the inputs: its ``in_spec``)."""
    args, kwargs = inputs
    try:
        leaves = fx_pytree.tree_flatten_spec((tuple(args), dict(kwargs or {})), ep.call_spec.in_spec)
    except Exception:  # noqa: BLE001 - a structure export normalised differently: compare in plain order
        leaves = pytree.tree_leaves((tuple(args), dict(kwargs or {})))
    first: dict[int, int] = {}
    same = {}
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            j = first.setdefault(id(leaf), i)
            if j != i:
                same[i] = j
    return same


_TO = frozenset({"to.dtype", "to.device", "to.dtype_layout", "to.other"})


def _noop_to(node: fx.Node) -> bool:
    """A ``.to()`` that returned its input itself (same dtype, device and shape; no copy or format asked)."""
    op = node.target
    if node.op != "call_function" or getattr(op, "namespace", None) != "aten" or \
            f"{getattr(op, '_opname', '')}.{getattr(op, '_overloadname', '')}" not in _TO:
        return False
    src = node.args[0] if node.args else None
    if not isinstance(src, fx.Node) or node.kwargs.get("copy") or node.kwargs.get("memory_format") is not None:
        return False
    a, b = src.meta.get("val"), node.meta.get("val")
    return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and \
        a.device == b.device and a.shape == b.shape and a.stride() == b.stride()
