"""Symbolic sizes are computed in the module that reads them, from the tensors it has.

Under ``dynamic_shapes`` export computes each size once and reads it wherever the same number is needed:
``sym_size_int_9`` (the batch of ``input_ids``) is read inside every decoder layer, and a token count computed
in one layer's router is read by the next layer's. A module reading a number computed outside it would need
that number as one more input (and the module computing it, one more output) that its call signature does not
have: the module then lost its signature and fell back to data-flow arguments (Llama's decoder layers and
attention under ``dynamic_shapes``, JetMoE's routers).

Before frames are written, :func:`localize_sizes` gives each module call that reads a symbolic number computed
in another frame its own copy of that number, computed right before the first op that reads it:

- the frame's own node computing the same expression, if it has one;
- ``aten.sym_size.int(t, d)`` of a tensor ``t`` the frame has before that op (its call's tensor arguments first,
  then what its ops read or compute, and what it passes down to the calls it makes), whose size ``d`` is the
  same symbolic expression (two sizes with one expression are equal on every input the trace's guards admit:
  that is what the expression means), else ``aten.sym_numel.default(t)`` of one with that many elements, else
  the floor division by ``c`` of a size that is ``c`` times the number (Swin-V2-CR's attention gets the batch
  back from its windows);
- else the same computation (``operator.mul``, ``sym_size`` of a tensor the frame has...) applied to numbers
  found this way.

A number computed from numbers read from outside is itself looked up first (JetMoE's router computes
``batch * seq`` from the two sizes of the input; its argument has that size). The ops inside a leaf (a
``MultiheadAttention``, an ``LSTM``: written as one call) get copies the same way from the leaf's arguments, so
no graph is left reading a number computed inside another module's leaf (``nn.Transformer``'s ``batch * heads``,
timm's Sequencer: an internal error before).

A number a module returns without computing it (``return y, x.shape[0] * 2``: export computes the product where
the caller first uses it) is computed at the end of the call the same way, the call returns that copy, and the
caller's later reads of the number read the call's result: the module keeps its call signature.

A number a module passes on to a child it calls (EdgeNeXt's blocks call their positional encoding with
``(B, H, W)``) is the caller's to have: when it was computed outside the caller, the caller gets a copy, made
the same way before the call from the tensors it has (the call's tensor arguments among them), and the call
passes the copy. A number found neither way (a count read from data and never a size of a tensor at hand) stays
read from outside, as before. The exported graph gets the copies only while the hierarchy is written: the returned
function removes them again (lowering and the capture see export's graph as it was).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import fx

from torch2ir.hierarchy.unsigned_calls import unsigned_arguments
from torch2ir.signatures.match import SYMBOLIC

if TYPE_CHECKING:
    from torch2ir.hierarchy.recover import Frame, Hierarchy
    from torch2ir.signatures.match import Signature

_SIZE = torch.ops.aten.sym_size.int
_NUMEL = torch.ops.aten.sym_numel.default
_TENSOR_QUERIES = frozenset([_SIZE, _NUMEL, torch.ops.aten.sym_stride.int,
                             torch.ops.aten.sym_storage_offset.default])


def symbolic(node: Any) -> bool:
    """Whether ``node`` computes a symbolic number (not a constant one)."""
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return isinstance(val, SYMBOLIC) and val.node.is_symbolic()


class _Local:
    """The copies made for one frame, and the tensors it has before the op being visited."""

    def __init__(self, signature: Signature | None) -> None:
        self.made: dict[fx.Node, fx.Node] = {}  # value computed elsewhere -> its copy in this frame
        self.numbers: dict[tuple[type, Any], fx.Node] = {}  # (type, expression) -> first node computing it here
        #: the call's arguments: a number among them is read as the argument; sizes are found first among them
        inputs = [v for v in signature.inputs if isinstance(v, fx.Node)] if signature is not None else []
        self.arguments = frozenset(inputs)
        #: in order: tensors the frame has so far (its arguments first, then what its ops read or compute)
        self.tensors: dict[fx.Node, None] = dict.fromkeys(v for v in inputs if isinstance(v.meta.get("val"),
                                                                                              torch.Tensor))


def localize_sizes(h: Hierarchy, signatures: dict[int, Signature],
                   pure: Callable[[Any], bool]) -> Callable[[], None]:
    """Give each non-leaf frame of ``h`` local copies of the symbolic numbers it reads from other frames (see the
    module docstring). ``signatures``: recorded calls by frame id (a number passed as an argument is read as the
    argument); ``pure(target)``: whether a call only computes with numbers. Returns the undo."""
    graph = h.ep.graph
    locals_: dict[int, _Local] = {}
    added: list[fx.Node] = []
    replaced: list[tuple[fx.Node, fx.Node, fx.Node]] = []  # (consumer, original value, copy)
    entered: set[int] = set()
    frames = {id(f): f for calls in h.frames_by_path.values() for f in calls}

    by_name: dict[str, fx.Node] = {}
    unsigned = unsigned_arguments(h, signatures)

    def local_of(frame: Frame) -> _Local:
        local = locals_.get(id(frame))
        if local is None:
            local = locals_[id(frame)] = _Local(signatures.get(id(frame)))
            local.tensors.update(unsigned.get(id(frame), {}))
            if frame.leaf:  # its arguments, as export preserved its call (the first op may read none of them)
                if not by_name:
                    by_name.update((n.name, n) for n in graph.nodes)
                preserved = h.signatures.get(h.signature_key(frame))
                for arg in preserved.inputs if preserved is not None else ():
                    value = by_name.get(getattr(arg, "name", None))  # type: ignore[arg-type]
                    if value is not None and isinstance(value.meta.get("val"), torch.Tensor):
                        local.tensors.setdefault(value)
        return local

    for node in list(graph.nodes):
        if node.op != "call_function" or node in h.dead:
            continue
        frame = h.frame_of.get(node)
        if frame is None:
            continue
        new = [f for f in frame.chain() if id(f) not in entered and not f.leaf and f.parent is not None]
        for callee in reversed(new):  # outermost first: the first node of each call just begun
            entered.add(id(callee))
            _pass_arguments(h, callee, signatures, frames, local_of(callee.parent), node, pure,  # type: ignore[arg-type]
                            added, replaced)
        local = local_of(frame)  # a leaf too: the ops inside it read what it computes, not another module's numbers
        for value in node.all_input_nodes:
            if isinstance(value.meta.get("val"), torch.Tensor):
                local.tensors.setdefault(value)
                _passed_down(h, frame, value, local_of)
        crossing = [v for v in node.all_input_nodes if symbolic(v) and h.frame_of.get(v) is not frame
                    and v not in local.arguments and not _returned(h, frame, v, signatures)]
        if crossing and symbolic(node) and pure(node.target):  # a number computed from numbers read from outside:
            found = _size_of(local, node.meta["val"])  # the number itself may be a size the frame has
            copy = local.numbers.get(_key(node))
            if copy is None and found is not None:
                copy = _insert(h, frame, local, node, node, *found, added)
            if copy is not None:
                for user in list(node.users):
                    user.replace_input_with(node, copy)
                    replaced.append((user, node, copy))
                continue
        for value in crossing:
            copy = _derive(h, frame, local, value, node, pure, added)
            if copy is not None:
                node.replace_input_with(value, copy)
                replaced.append((node, value, copy))
        if isinstance(node.meta.get("val"), torch.Tensor):
            local.tensors.setdefault(node)
        elif symbolic(node) and h.frame_of.get(node) is frame:
            local.numbers.setdefault(_key(node), node)
    _return_own_numbers(h, signatures, frames, local_of, pure, added, replaced)
    for copy in reversed(added):
        _just_before_use(h, copy, signatures)

    def undo() -> None:
        for consumer, value, copy in reversed(replaced):
            consumer.replace_input_with(copy, value)
        for copy in reversed(added):
            graph.erase_node(copy)

    return undo


def _returned(h: Hierarchy, frame: Frame, value: fx.Node, signatures: dict[int, Signature]) -> bool:
    """Whether ``value``, computed inside a call ``frame`` makes, is among that call's recorded results: the frame
    reads it as the call's result (``y, n = self.count(x)``), not as a number to compute again."""
    home = h.frame_of.get(value)
    for inner in home.chain() if home is not None else ():
        if inner.parent is frame:
            sig = signatures.get(id(inner))
            return sig is not None and any(v is value for v in sig.outputs)
    return False


def _return_own_numbers(h: Hierarchy, signatures: dict[int, Signature], frames: dict[int, Frame],
                        local_of: Callable[[Frame], _Local], pure: Callable[[Any], bool], added: list[fx.Node],
                        replaced: list[tuple[fx.Node, fx.Node, fx.Node]]) -> None:
    """A symbolic number a module call returns but does not compute (``return y, x.shape[0] * 2``: export computes
    the product where the caller first uses it) is computed at the end of the call from the tensors the module has,
    the call returns that copy, and what the caller reads of the number after the call reads the call's result."""
    order = {node: i for i, node in enumerate(h.ep.graph.nodes)}
    for frame_id, sig in signatures.items():
        frame = frames.get(frame_id)
        if frame is None or frame.leaf or frame.parent is None:
            continue
        for value in list(sig.outputs):
            if not (isinstance(value, fx.Node) and symbolic(value)) or any(v is value for v in sig.inputs):
                continue
            home = h.frame_of.get(value)
            if home is not None and frame in home.chain():
                continue  # computed in the call
            inside = [n for n in h.ep.graph.nodes if n in h.frame_of and frame in h.frame_of[n].chain()]
            end = inside[-1].next if inside else None
            if end is None or end.op == "root":
                continue
            copy = _derive(h, frame, local_of(frame), value, end, pure, added)
            if copy is None or copy is value:
                continue
            sig.outputs = [copy if v is value else v for v in sig.outputs]  # the call returns the copy
            for user in list(value.users):
                where = h.frame_of.get(user)
                if order.get(user, -1) > order[inside[-1]] and where is not None and frame not in where.chain():
                    user.replace_input_with(value, copy)
                    replaced.append((user, value, copy))


def _just_before_use(h: Hierarchy, copy: fx.Node, signatures: dict[int, Signature]) -> None:
    """Move ``copy`` among its frame's items to right before the first item that reads it (an op, or a call that
    passes it or whose frame holds a reader): where it stands then depends on what reads it, not on where export
    had computed the number, so converting the rebuilt model places it the same way (the loop stays a fixpoint)."""
    frame = h.frame_of[copy]
    if frame.leaf or copy not in frame.items:
        return
    readers = [f for f in map(h.frame_of.get, copy.users) if f is not None]
    frame.items.remove(copy)
    for index, item in enumerate(frame.items):
        if isinstance(item, fx.Node):
            reads = item in copy.users
        else:  # a call: it passes the copy (an item of a torch.Size argument), or one of its frame's ops reads it
            sig = signatures.get(id(item))
            reads = (sig is not None and any(v is copy for v in sig.inputs)) or \
                any(item in reader.chain() for reader in readers)
        if reads:
            frame.items.insert(index, copy)
            return
    frame.items.append(copy)


def _passed_down(h: Hierarchy, frame: Frame, value: fx.Node, local_of: Callable[[Frame], _Local]) -> None:
    """``value``, a tensor the ops of ``frame`` read, computed outside it: every caller between passes it down, so
    each has it (a leaf's argument is its caller's tensor, though no op of the caller reads it)."""
    home = h.frame_of.get(value, h.root)
    if frame in home.chain():
        return  # computed in the frame or inside it
    caller = frame.parent
    while caller is not None:  # up to the caller that has it (computes it, or gets it from a call it makes)
        local_of(caller).tensors.setdefault(value)
        if caller in home.chain():
            break
        caller = caller.parent


def _pass_arguments(h: Hierarchy, callee: Frame, signatures: dict[int, Signature], frames: dict[int, Frame],
                    caller: _Local, first: fx.Node, pure: Callable[[Any], bool], added: list[fx.Node],
                    replaced: list[tuple[fx.Node, fx.Node, fx.Node]]) -> None:
    """The symbolic numbers ``callee``'s call passes that its caller would read from outside: computed in the caller
    (before ``first``, the call's first node) from the tensors it has, the call's tensor arguments among them; the
    call and everything inside it then read the copy."""
    sig = signatures.get(id(callee))
    parent = callee.parent
    if sig is None or parent is None:
        return
    for value in sig.inputs:
        if isinstance(value, fx.Node) and isinstance(value.meta.get("val"), torch.Tensor):
            caller.tensors.setdefault(value)
    for value in list(sig.inputs):
        if not (isinstance(value, fx.Node) and symbolic(value)) or value in caller.arguments:
            continue
        home = h.frame_of.get(value)
        if home is not None and parent in home.chain() and callee not in home.chain():
            continue  # computed in the caller or in a call before this one: the caller has it
        # computed outside the caller, or inside this very call (export computes a size where it is first read, so
        # a torch.Size argument's items may be traced inside the callee)
        child = next(f for f in callee.chain() if f.parent is parent)
        copy = _derive(h, parent, caller, value, first, pure, added, position=parent.items.index(child)
                       if child in parent.items else None)
        if copy is None:
            continue
        for frame_id, other in signatures.items():  # the call, and calls inside it, pass the copy
            if other is sig or (frame_id in frames and callee in frames[frame_id].chain()):
                other.inputs = [copy if v is value else v for v in other.inputs]
                other.outputs = [copy if v is value else v for v in other.outputs]
        for user in list(value.users):
            home = h.frame_of.get(user)
            if home is not None and callee in home.chain():
                user.replace_input_with(value, copy)
                replaced.append((user, value, copy))


def _derive(h: Hierarchy, frame: Frame, local: _Local, value: fx.Node, before: fx.Node,
            pure: Callable[[Any], bool], added: list[fx.Node], depth: int = 0,
            position: int | None = None) -> fx.Node | None:
    """``value`` computed in ``frame`` before ``before`` from what the frame has, or None."""
    if value in local.made:
        return local.made[value]
    if h.frame_of.get(value) is frame:
        return value
    if not symbolic(value) or depth > 8:
        return None
    if _key(value) in local.numbers:  # the frame computes that number already
        return local.numbers[_key(value)]
    val = value.meta["val"]
    target: Any = None
    args: tuple = ()
    found = _size_of(local, val)
    if found is not None:
        target, args = found
    else:
        multiple = _multiple_of(local, val)
        if multiple is not None:
            tensor, dim, factor = multiple
            size = _call(h, frame, before, _SIZE, (tensor, dim), tensor.meta["val"].shape[dim], added, position)
            target, args = operator.floordiv, (size, factor)
            position = None if position is None else position + 1
    if target is None and value.op == "call_function" and (value.target in _TENSOR_QUERIES or pure(value.target)):
        if value.target in _TENSOR_QUERIES:
            if value.args[0] not in local.tensors:
                return None
            target, args = value.target, value.args
        else:
            new_args = []
            for arg in value.args:
                if isinstance(arg, fx.Node):
                    arg = _derive(h, frame, local, arg, before, pure, added, depth + 1, position)
                    if arg is None:
                        return None
                elif isinstance(arg, (list, tuple, dict)):
                    return None  # not met among size computations: left as it is
                new_args.append(arg)
            if value.kwargs:
                return None
            target, args = value.target, tuple(new_args)
    if target is None:
        return None
    return _insert(h, frame, local, value, before, target, args, added, position)


def _insert(h: Hierarchy, frame: Frame, local: _Local, value: fx.Node, before: fx.Node, target: Any, args: tuple,
            added: list[fx.Node], position: int | None = None) -> fx.Node:
    """A call ``target(*args)`` computing ``value`` in ``frame``, right before ``before`` (in the graph) and at
    ``position`` among the frame's items (default: before ``before``, or last)."""
    copy = _call(h, frame, before, target, args, value.meta["val"], added, position)
    local.made[value] = copy
    local.numbers.setdefault(_key(value), copy)
    return copy


def _call(h: Hierarchy, frame: Frame, before: fx.Node, target: Any, args: tuple, val: Any, added: list[fx.Node],
          position: int | None) -> fx.Node:
    """The node of :func:`_insert`, without the frame's bookkeeping of what it computes."""
    with h.ep.graph.inserting_before(before):
        node = h.ep.graph.call_function(target, args)
    node.meta["val"] = val
    h.frame_of[node] = frame
    if not frame.leaf:  # a leaf is written as one call: its ops are not items
        if position is None:
            position = frame.items.index(before) if before in frame.items else len(frame.items)
        frame.items.insert(position, node)
    added.append(node)
    return node


def _multiple_of(local: _Local, val: Any) -> tuple[fx.Node, int, int] | None:
    """``(t, dim, c)``: the first tensor of ``local`` with a size ``c * val`` (``c`` a whole number above 1), whose
    floor division by ``c`` is ``val`` (Swin's windows: the batch is the window batch divided by the windows)."""
    if not isinstance(val, torch.SymInt) or not val.node.is_symbolic():
        return None
    expr = val.node.expr
    for tensor in local.tensors:
        for dim, size in enumerate(tensor.meta["val"].shape):
            if isinstance(size, torch.SymInt) and size.node.is_symbolic():
                ratio = size.node.expr / expr
                if ratio.is_Integer and ratio > 1:
                    return tensor, dim, int(ratio)
    return None


def _key(node: fx.Node) -> tuple[type, Any]:
    val = node.meta["val"]
    return type(val), val.node.expr


def _size_of(local: _Local, val: Any) -> tuple[Any, tuple] | None:
    """A size query of a tensor of ``local`` whose result is ``val``'s expression: ``(sym_size.int, (t, dim))`` of
    the first tensor with such a size, else ``(sym_numel, (t,))`` of the first with such a number of elements."""
    if not isinstance(val, torch.SymInt) or not val.node.is_symbolic():
        return None
    expr = val.node.expr
    for tensor in local.tensors:
        for dim, size in enumerate(tensor.meta["val"].shape):
            if isinstance(size, torch.SymInt) and size.node.expr == expr:
                return _SIZE, (tensor, dim)
    for tensor in local.tensors:
        numel = tensor.meta["val"].numel()
        if isinstance(numel, torch.SymInt) and numel.node.is_symbolic() and numel.node.expr == expr:
            return _NUMEL, (tensor,)
    return None


__all__ = ["localize_sizes", "symbolic"]
