"""Find the input-independent part of a rebuilt graph and split it off (constant folding).

Export records everything a forward computes, including values eager PyTorch builds once and caches (BEiT's
relative-position index behind an LRU cache) or builds from constants only (an all-true attention mask from
``arange``/``ge``/``where`` of static shapes). :func:`plan_fold` finds those nodes; :func:`split` makes two graphs
of them: one computing the values once (no inputs), and the forward that reads them instead of recomputing them
(:mod:`ir2torch.codegen.fold_cache` runs both and keeps the values per module).

A node is *foldable* when it is a ``call_function`` of an ``aten`` ``OpOverload`` (or an ``operator.getitem`` of a
foldable node) whose arguments are only literals (``None``, bools, ints, floats, strings, dtypes, devices, layouts,
memory formats, lists and tuples of them; never a symbolic size) and foldable nodes, and whose op is not random
(``torch.Tag.nondeterministic_seeded``, or a name of the random families), not bitwise nondeterministic, and not a
producer of uninitialised memory (``empty*``, ``new_empty*``, ``resize_``, ``set_``). Nothing reading an input, a
parameter, buffer or attribute (``get_attr``), a submodule call, a higher-order op or any other Python function is
foldable, and neither is anything depending on one; except the ``get_attr`` of a lifted constant that only
``lift_fresh_copy`` reads (its value is compared on every call: see :mod:`ir2torch.codegen.fold_cache`).

In-place ops are foldable under the same rule, which makes their mutations part of the one-time computation. That
is exact only while the folded values' storage is the folded region's alone, so the rule is then narrowed, per
*storage class* (a node producing fresh storage, and every view or in-place result of it, following the schemas'
alias annotations) until nothing changes:

* a value that *escapes* (a non-folded node consumes it through an argument its schema annotates as aliased or
  written: an in-place op, ``out=``, a view such as ``expand``/``view``/``slice``/``contiguous``/``to``; or the
  graph output, a submodule call or any non-ATen function consumes it) is *copied*: the forward reads a fresh
  ``clone`` of the cached value, made once per call and shared by all its readers of that call, exactly what a
  recomputation would hand them. That holds only for a value with fresh storage of its own (its class's root,
  no view or in-place result) that is the only value of its class read outside the fold, and only when the
  computed tensor is contiguous and fills its storage from offset 0 (so that the clone has its strides; checked
  when the values are computed, see :func:`ir2torch.codegen.fold_cache.exact_copy`, which turns the module's fold off
  otherwise). An escaping value that is not such a root refuses its class (every node of it stops being
  foldable, and so does everything depending on one);
* a class is also refused when a non-folded node reads one of its values before the last folded in-place op on
  the class has run (it would see the final value early);
* the nodes that stay foldable and have a non-folded user are the *frontier*: the values the forward reads.

So a cached value is only ever read by ATen ops that neither write nor alias it; anything else gets its own copy.
The rule trusts the ops' schemas (the alias annotations PyTorch's own passes rely on).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import fx

from ir2torch.codegen.direct_op import direct_op

#: Types a literal argument of a foldable node may have (exact types: a ``SymInt`` is none of them).
_LITERALS = frozenset({type(None), bool, int, float, complex, str, torch.dtype, torch.device, torch.layout,
                       torch.memory_format})

#: Op names never folded: uninitialised memory, storage swaps, and the random families (besides the tag).
_NEVER = re.compile(r"(_?empty|new_empty|resize|set_|.*(rand|bernoulli|dropout|normal|uniform|multinomial|poisson|"
                    r"cauchy|exponential|geometric|log_normal|seed))")

_CLONE = torch.ops.aten.clone.default
_LIFT = torch.ops.aten.lift_fresh_copy.default

#: Fewest ATen ops worth a fold (the cached path's per-call check costs about as much as one small op).
MIN_FOLDED_OPS = 2


def overload_of(node: fx.Node) -> torch._ops.OpOverload | None:
    """The ATen ``OpOverload`` a ``call_function`` node runs (through a ``DirectOp`` too), else ``None``."""
    if node.op != "call_function":
        return None
    target = getattr(node.target, "overload", node.target)
    return target if isinstance(target, torch._ops.OpOverload) else None


def _foldable_op(op: torch._ops.OpOverload) -> bool:
    if op.namespace != "aten" or _NEVER.match(op._opname):
        return False
    tags = op.tags
    return torch.Tag.nondeterministic_seeded not in tags and torch.Tag.nondeterministic_bitwise not in tags


def _leaves(value: Any, nodes: list[fx.Node]) -> bool:
    """Collect the nodes in ``value``; ``False`` when it holds anything but nodes and literals."""
    if isinstance(value, fx.Node):
        nodes.append(value)
        return True
    if type(value) in _LITERALS:
        return True
    if isinstance(value, (list, tuple)):
        return all(_leaves(v, nodes) for v in value)
    return False


def bound_arguments(node: fx.Node, op: torch._ops.OpOverload) -> list[tuple[Any, Any]]:
    """``(schema argument, value)`` for each argument the node passes (positionally in schema order, or by name)."""
    schema = op._schema.arguments
    pairs = list(zip(schema, node.args))
    by_name = {a.name: a for a in schema}
    pairs += [(by_name[k], v) for k, v in node.kwargs.items() if k in by_name]
    return pairs


def _nodes_in(value: Any) -> list[fx.Node]:
    found: list[fx.Node] = []
    _leaves(value, found)
    return found


def storage_roots(graph: fx.Graph) -> dict[fx.Node, fx.Node]:
    """Each node's storage class: the node whose fresh storage it views or mutates in place (itself if none)."""
    root: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        root[node] = node
        if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[0], fx.Node):
            root[node] = root[node.args[0]]
            continue
        op = overload_of(node)
        if op is None:
            continue
        aliased = {s for r in op._schema.returns if r.alias_info is not None for s in r.alias_info.before_set}
        for arg, value in bound_arguments(node, op):
            if arg.alias_info is not None and aliased & set(arg.alias_info.before_set):
                sources = _nodes_in(value)
                if sources:
                    root[node] = root[sources[0]]
                    break
    return root


def _candidates(graph: fx.Graph, constants: frozenset[str]) -> set[fx.Node]:
    foldable: set[fx.Node] = set()
    for node in graph.nodes:
        if node.op == "get_attr":  # a lifted constant that only ``lift_fresh_copy`` reads (it copies)
            if node.target in constants and node.users and all(overload_of(u) is _LIFT for u in node.users):
                foldable.add(node)
            continue
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:
            ok = isinstance(node.args[0], fx.Node) and node.args[0] in foldable and type(node.args[1]) is int
        else:
            op = overload_of(node)
            found: list[fx.Node] = []
            ok = op is not None and _foldable_op(op) and _leaves((node.args, tuple(node.kwargs.values())), found) \
                and all(n in foldable for n in found)
        if ok:
            foldable.add(node)
    return foldable


def _refused_by(user: fx.Node, value: fx.Node) -> bool:
    """Whether a non-folded ``user`` may see cached ``value`` mutated, aliased or escape (see the module docstring)."""
    op = overload_of(user)
    if op is None:
        return True  # output, submodule call, higher-order op, any other function
    return any(arg.alias_info is not None and value in _nodes_in(v) for arg, v in bound_arguments(user, op))


def _close(foldable: set[fx.Node], order: Iterable[fx.Node]) -> None:
    """Drop every node that depends on a node no longer foldable (in graph order)."""
    for node in order:
        if node in foldable and any(n not in foldable for n in node.all_input_nodes):
            foldable.discard(node)


@dataclass(frozen=True)
class FoldPlan:
    """The nodes computed once (``folded``, graph order), those of them the forward reads (``frontier``), and
    those of the frontier it reads as a fresh copy made on every call (``copied``)."""

    folded: list[fx.Node]
    frontier: list[fx.Node]
    copied: list[fx.Node] = field(default_factory=list)

    @property
    def attrs(self) -> list[str]:
        """The lifted constants (module attributes) the folded values are computed from."""
        return [str(n.target) for n in self.folded if n.op == "get_attr"]

    @property
    def op_count(self) -> int:
        """ATen ops folded (``getitem``s not counted)."""
        return sum(1 for n in self.folded if overload_of(n) is not None)


def plan_fold(graph: fx.Graph, constants: frozenset[str] = frozenset()) -> FoldPlan | None:
    """What of ``graph`` to compute once (see the module docstring), or ``None`` when fewer than
    :data:`MIN_FOLDED_OPS` ATen ops would be. ``constants``: the module's lifted constants (plain tensor
    attributes) the fold may read, through ``lift_fresh_copy`` only."""
    order = list(graph.nodes)
    # a folded region starts at a call of literals only or at a lifted constant: without one, nothing folds
    if not any((n.op == "call_function" and not n.all_input_nodes) or (n.op == "get_attr" and n.target in constants)
               for n in order):
        return None
    position = {n: i for i, n in enumerate(order)}
    foldable = _candidates(graph, constants)
    root = storage_roots(graph)
    while foldable:
        last_write: dict[fx.Node, int] = {}
        for node in order:
            op = overload_of(node) if node in foldable else None
            if op is not None and op._schema.is_mutable:
                for arg, value in bound_arguments(node, op):
                    if arg.alias_info is not None and arg.alias_info.is_write:
                        for target in _nodes_in(value):
                            last_write[root[target]] = position[node]
        refused: set[fx.Node] = set()
        copied: set[fx.Node] = set()
        for node in foldable:
            for user in node.users:
                if user in foldable:
                    continue
                if position[user] < last_write.get(root[node], -1):
                    refused.add(root[node])
                elif _refused_by(user, node):
                    # fresh storage of its own (no view, no in-place result): handed out as a copy per call
                    (copied if root[node] is node else refused).add(root[node])
        refused |= {n for n in foldable if n.op == "get_attr" and any(u not in foldable for u in n.users)}
        for node in copied - refused:  # a copy is exact only as its class's one value read outside the fold
            if any(n is not node and root[n] is node and any(u not in foldable for u in n.users) for n in foldable):
                refused.add(node)
        if not refused:
            break
        foldable -= {n for n in foldable if root[n] in refused}
        _close(foldable, order)
    folded = [n for n in order if n in foldable]
    frontier = [n for n in folded if any(u not in foldable for u in n.users)]
    plan = FoldPlan(folded, frontier, [n for n in frontier if n in copied])
    return plan if plan.op_count >= MIN_FOLDED_OPS else None


def split(graph: fx.Graph, plan: FoldPlan, values_attr: str,
          codegen: Callable[[], Any] | None = None) -> tuple[fx.Graph, fx.Graph]:
    """``(constants, forward)``: a graph without inputs returning the frontier's values as a tuple, and a copy of
    ``graph`` without the folded nodes that reads the frontier from attribute ``values_attr`` (a name the rebuilder
    chose) of its module. ``codegen()`` makes the forward's calling convention (``graph``'s plain one if ``None``)."""
    folded = set(plan.folded)
    constants = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for node in plan.folded:
        env[node] = constants.node_copy(node, env.__getitem__)
    constants.output(tuple(env[n] for n in plan.frontier))
    forward = fx.Graph()
    if codegen is not None:
        forward._codegen = codegen()
    index = {n: i for i, n in enumerate(plan.frontier)}
    reads: dict[fx.Node, fx.Node] = {}
    holder: list[fx.Node] = []

    copied = set(plan.copied)

    def mapped(node: fx.Node) -> fx.Node:
        if node not in index:
            return reads[node]
        if node not in reads:
            if not holder:
                holder.append(forward.get_attr(values_attr))
            reads[node] = forward.call_function(operator.getitem, (holder[0], index[node]))
            if node in copied:  # every reader of this call sees one fresh tensor, as a recomputation gives
                reads[node] = forward.call_function(direct_op(_CLONE, {}, 1), (reads[node],))
            reads[node].meta.update(node.meta)
        return reads[node]

    for node in graph.nodes:
        if node not in folded:
            reads[node] = forward.node_copy(node, mapped)
    return constants, forward


def attach_fold(gm: fx.GraphModule, graph: fx.Graph, implementation: str, codes: Any = None,
                codegen: Callable[[], Any] | None = None, constants: frozenset[str] = frozenset()) -> bool:
    """Give ``gm`` (running ``graph``, already installed) a folded forward when :func:`plan_fold` finds enough to
    fold, or when attention on repeated key/value heads can run on the grouped heads
    (:mod:`ir2torch.codegen.grouped_attention`), a node has an exact fast path (:mod:`ir2torch.codegen.fast_paths`:
    the experts' product, or at least ``MIN_ENTRIES`` fast entries) or an attention mask can be made in one op when
    it is all true (:mod:`ir2torch.codegen.causal_mask`): the folded forward holds those rewrites; all its variants
    go through the same checks and code cache as every graph (:func:`ir2torch.codegen.source.compile_variant`).
    ``codegen()`` makes the calling convention. Returns whether it did.

    Raises:
        IRError: as :func:`~ir2torch.codegen.source.compile_variant` (a graph it cannot generate code for).
    """
    from ir2torch.codegen import causal_mask, fast_paths, fold_cache, grouped_attention
    from ir2torch.codegen.source import compile_variant

    plan = plan_fold(graph, constants)
    grouped = bool(grouped_attention.find(graph))
    fast = bool(fast_paths.find(graph)) or fast_paths.entries(graph) >= fast_paths.MIN_ENTRIES or \
        (codegen is None and causal_mask.find(graph))
    if plan is None and not grouped and not fast:
        return False
    plan = plan or FoldPlan([], [])  # nothing folded: the folded forward only runs the rewrites below
    once, forward = split(graph, plan, fold_cache.VALUES_ATTR, codegen)
    if grouped:  # attention on grouped key/value heads, without their copies (ir2torch.codegen.grouped_attention)
        grouped_attention.rewrite(forward)

    def compiled(variant: fx.Graph) -> Callable[..., Any]:
        fast_paths.rewrite(variant)  # exact fast paths checked at each call (ir2torch.codegen.fast_paths)
        return compile_variant(variant, implementation, codes)

    # a plain calling convention: the module's inputs are its call's arguments (an all-true mask made in one op)
    skip = causal_mask.skipping(forward, compiled) if codegen is None else None
    fold_cache.install(gm, fold_cache.FoldPlan(compile_variant(once, implementation, codes), compiled(forward),
                                               plan.op_count, tuple(plan.frontier.index(n) for n in plan.copied),
                                               tuple(plan.attrs), skip, values=bool(plan.frontier)))
    return True


__all__ = ["MIN_FOLDED_OPS", "FoldPlan", "attach_fold", "bound_arguments", "overload_of", "plan_fold", "split",
           "storage_roots"]
