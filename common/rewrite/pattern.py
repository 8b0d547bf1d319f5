"""Pattern -> replacement on every graph of an IR: :func:`replace_pattern`, the IR's counterpart of
``torch.fx.subgraph_rewriter.replace_pattern``.

``pattern`` and ``replacement`` are plain Python functions of tensors. Each is traced once with
``torch.export`` on ``example_inputs`` (the way torch2ir traces a model, so both come out as the same ATen
overloads the IR holds) into a small graph of ATen calls. The pattern's output node is matched against every
``function`` node of the selected graphs, walking its arguments backwards: a call matches a node calling the
same overload with equal constants, a pattern input matches any value (the same value wherever the input is
used). Matched nodes other than the output must not be read outside the match. Non-overlapping matches are
replaced, in one edit per graph, by the replacement's calls, fed by the values the pattern's inputs matched;
everything that read the matched output reads the replacement's output.

A match spread over a module call (part of it in the callee's graph, part in the caller's) is found by inlining
that call first (:func:`~common.rewrite.inline`): each call whose graph holds one of the pattern's ops is
inlined on a trial copy, and kept inlined only where a match then spans its nodes and the caller's.

A call of a stateless activation module rebuilt by its handler (``nn.SiLU``, ``nn.ReLU``, ``nn.GELU``, ...: no graph)
matches as the ATen op its forward runs (:data:`LEAF_OPS`: ``aten.silu.default`` of its argument; ``nn.GELU(
approximate="tanh")`` with that keyword): a replacement takes the call's place, and the module stays, called by
nothing, as torch2ir records an unused module. An in-place one (``inplace=True``) never matches: it also changes
its input, which the replacement would not. What is not matched, by design: tensor constants inside the pattern
or the replacement (pass them as inputs), and patterns of several outputs.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch
from torch import fx

from common.ir import IR, Implementation
from common.names import without_counter
from common.values import Ref, values_equal

from .core import (
    Match,
    NodeRef,
    RewriteError,
    Where,
    all_graphs,
    callee,
    edges_of,
    fresh_name,
    map_refs,
    matches_where,
    ordered,
    rebuild_graph,
)
from .inline import inline_call
from .ops import _in_order
from .passes import Rewritten
from .pattern_trace import SizedReplacements, Traced, replacement_metas, trace, value_meta
from .session import Session

#: A match filter: called with each candidate match and the IR, keeps the match when it returns true.
MatchFilter = Callable[[Match, IR], bool]


#: IR types of handled activation modules that match as one ATen op: ``{type: (op, {module attribute: keyword})}``
#: (a keyword mapped to ``None`` must have its default value: ``inplace`` must be false).
LEAF_OPS: dict[str, tuple[str, dict[str, str | None]]] = {
    "relu": ("aten.relu.default", {"inplace": None}),
    "silu": ("aten.silu.default", {"inplace": None}),
    "mish": ("aten.mish.default", {"inplace": None}),
    "hardswish": ("aten.hardswish.default", {"inplace": None}),
    "hardsigmoid": ("aten.hardsigmoid.default", {"inplace": None}),
    "sigmoid": ("aten.sigmoid.default", {}),
    "tanh": ("aten.tanh.default", {}),
    "gelu": ("aten.gelu.default", {"approximate": "approximate"}),
}
_LEAF_DEFAULTS = {"inplace": False, "approximate": "none"}


def node_op(ir: IR | None, attrs: Mapping[str, Any]) -> tuple[str, list[Any], dict[str, Any]] | None:
    """``(op, args, kwargs)`` a node computes, for matching: a function node's own; a call of a handled activation
    of :data:`LEAF_OPS` (with one argument), that op with the module's non-default attributes as keywords; else
    ``None``."""
    args, kwargs = list(attrs.get("args", [])), dict(attrs.get("kwargs", {}))
    if attrs.get("type") == "function":
        return str(attrs.get("implementation")), args, kwargs
    leaf = LEAF_OPS.get(str(attrs.get("type")))
    target = attrs.get("implementation")
    if leaf is None or ir is None or not isinstance(target, str) or target not in ir or len(args) != 1 or kwargs:
        return None
    module = ir[target]
    if module.node_count or module.type != attrs.get("type"):
        return None
    op, keywords = leaf
    for attribute, value in module.data.items():
        if attribute not in keywords:
            return None  # an attribute this table does not know: not this op
        if value != _LEAF_DEFAULTS.get(attribute):
            keyword = keywords[attribute]
            if keyword is None:
                return None  # in place: changes its input too
            kwargs[keyword] = value
    return op, args, kwargs


class _Matcher:
    """Matches one pattern in one graph (see the module docstring)."""

    def __init__(self, pattern: Traced, graph: Implementation, ir: IR | None = None) -> None:
        self.pattern = pattern
        self.graph = graph
        self.ir = ir

    def at(self, anchor: str) -> tuple[dict[fx.Node, str], dict[fx.Node, Ref]] | None:
        """``(pattern call -> IR node, pattern input -> IR value)`` of a match whose output is ``anchor``."""
        self.calls: dict[fx.Node, str] = {}
        self.taken: dict[str, fx.Node] = {}
        self.inputs: dict[fx.Node, Ref] = {}
        if not self._node(self.pattern.output, Ref(anchor)):
            return None
        if set(self.inputs) != set(self.pattern.inputs):
            return None  # a pattern input the output does not depend on
        inside = set(self.calls.values())
        for name in inside - {anchor}:
            if any(user not in inside for user in self.graph.graph._succ[name]):
                return None  # an inner value is read outside the match
        return self.calls, self.inputs

    def _node(self, pnode: fx.Node, value: Any) -> bool:
        if not isinstance(value, Ref):
            return False
        if pnode.op == "placeholder":
            bound = self.inputs.setdefault(pnode, value)
            return bound == value
        if pnode.target is operator.getitem:
            source, index = pnode.args
            return value.index == index and self._node(source, Ref(value.node))
        if value.index is not None:
            return False
        if pnode in self.calls:
            return self.calls[pnode] == value.node
        if value.node in self.taken:
            return False
        computed = node_op(self.ir, self.graph.node(value.node))
        if computed is None or computed[0] != self.pattern.names[pnode]:
            return False
        _, args, kwargs = computed
        if len(args) != len(pnode.args) or set(kwargs) != set(pnode.kwargs):
            return False
        self.calls[pnode] = value.node
        self.taken[value.node] = pnode
        return all(self._arg(p, v) for p, v in zip(pnode.args, args)) and \
            all(self._arg(pnode.kwargs[k], kwargs[k]) for k in pnode.kwargs)

    def _arg(self, pattern: Any, value: Any) -> bool:
        if isinstance(pattern, fx.Node):
            return self._node(pattern, value)
        if isinstance(pattern, (list, tuple)):
            return isinstance(value, (list, tuple)) and len(value) == len(pattern) and \
                all(self._arg(p, v) for p, v in zip(pattern, value))
        if isinstance(value, Ref):
            return False
        return values_equal(pattern, value) or (type(pattern) is type(value) and pattern == value)


def replace_pattern(ir: IR, state: Mapping[str, torch.Tensor] | None, pattern: Callable[..., Any],
                    replacement: Callable[..., Any], *, example_inputs: Sequence[Any] | None = None,
                    where: Where = None, match_filters: Iterable[MatchFilter] = (),
                    allow: Iterable[str] | None = None, across_calls: bool = True) -> Rewritten:
    """Replace every match of ``pattern`` by ``replacement`` in every graph of ``ir`` (see the module docstring).

    Args:
        ir: the IR (not changed: the result is a new IR).
        state: its state dict, or ``None``; patterns compute on values only, so the state comes back unchanged.
        pattern: a function of tensors, e.g. ``lambda x: x * torch.sigmoid(x)``.
        replacement: a function of the same arguments, e.g. ``lambda x: torch.nn.functional.silu(x)``.
        example_inputs: what both are traced with; default one float tensor of shape ``(2, 3, 4, 4)`` per argument.
            Only the traced operations matter: a match may have any shape.
        where: the graphs to rewrite: an implementation key glob or a predicate on keys (default every graph).
        match_filters: predicates ``(match, ir) -> bool``; a match is replaced only if each returns true
            (``match.nodes`` are the matched nodes in graph order, the output last).
        allow: extra op names the result may call (the default allow-list otherwise).
        across_calls: a match spread over a module call (part of it in the callee's graph, part in the caller's)
            is found by inlining just that call first (:func:`~common.rewrite.inline`), one call at a time, and
            only where such a match exists; ``False`` matches inside each graph only.

    Returns:
        :class:`~common.rewrite.Rewritten`: ``(new_ir, new_state)``, with ``changes`` (one line per replaced match),
        ``count`` and ``inlined`` (one line per module call inlined for a match). Replaced nodes go; the
        replacement's nodes get names as a conversion would give them (numbered within the graph in computation
        order), so converting the rebuilt model gives the same IR.

    Raises:
        RewriteError: a function cannot be traced or does not return one tensor, the two take different numbers
            of arguments, or the result does not validate (e.g. the replacement calls an op outside ``allow``).
    """
    n_args = _arg_count(pattern, "pattern")
    if example_inputs is None:
        gen = torch.Generator().manual_seed(0)
        example_inputs = [torch.randn(2, 3, 4, 4, generator=gen) for _ in range(n_args)]
    pat = trace(pattern, example_inputs, "pattern")
    rep = trace(replacement, example_inputs, "replacement")
    if len(pat.inputs) != len(rep.inputs):
        raise RewriteError(f"the pattern takes {len(pat.inputs)} arguments and the replacement {len(rep.inputs)}",
                           hint="give both functions the same arguments")
    if pat.output.op == "placeholder":
        raise RewriteError("the pattern returns one of its arguments: it would match every value",
                           hint="the pattern must compute something")
    filters = list(match_filters)
    sized = SizedReplacements(replacement, example_inputs)
    s = Session(ir, state, allow=allow, pass_name="replace_pattern")
    inlined = _inline_spanning(s, pat, where) if across_calls else []
    for key, variant, graph in list(all_graphs(s.ir)):
        if not matches_where(where, key):
            continue
        matcher = _Matcher(pat, graph, s.ir)
        found: list[tuple[str, set[str], list[Ref]]] = []
        texts: list[str] = []
        used: set[str] = set()
        order = {n: i for i, n in enumerate(graph.graph.nodes)}
        for name in list(graph.graph.nodes):
            hit = matcher.at(name)
            if hit is None:
                continue
            calls, inputs = hit
            inside = set(calls.values())
            if inside & used:
                continue
            refs = tuple(NodeRef(key, n, variant) for n in sorted(inside, key=order.__getitem__))
            match = Match(refs, tuple(None for _ in refs))
            if not all(f(match, s.ir) for f in filters):
                continue
            used |= inside
            found.append((name, inside, [inputs[p] for p in pat.inputs]))
            texts.append(", ".join(ref.node for ref in refs))
        if found:
            _splice(s.ir, graph, key, found, lambda metas: sized(metas) or rep)
            where_text = key + (f"[variant {variant}]" if variant else "")
            made = ", ".join(rep.names[n] for n in rep.calls if n in rep.names) or "an argument"
            s.changes += [f"{where_text}: {text} -> {made}" for text in texts]
    result = Rewritten(*s.finish(), s.changes)
    result.inlined = inlined
    return result


def _matches(pat: Traced, graph: Implementation, ir: IR | None = None) -> Iterable[set[str]]:
    """The node sets of the matches of ``pat`` in ``graph`` (overlapping ones too; before any match filter)."""
    matcher = _Matcher(pat, graph, ir)
    for name in list(graph.graph.nodes):
        hit = matcher.at(name)
        if hit is not None:
            yield set(hit[0].values())


def _inline_spanning(s: Session, pat: Traced, where: Where) -> list[str]:
    """Inline each module call a match would span (part of it among the callee's nodes, part outside them), one at a
    time, until no call is spanned; calls whose graphs hold none of the pattern's ops are not tried. Returns one
    line per inlined call."""
    done: list[str] = []
    ops = set(pat.names.values())
    tried: set[tuple[str, int, str, str]] = set()
    while True:
        for key, variant, graph in list(all_graphs(s.ir)):
            if not matches_where(where, key):
                continue
            spanned = None
            for name, attrs in list(graph.graph.nodes(data=True)):
                target = callee(attrs)
                if target is None or target not in s.ir or not s.ir[target].node_count or \
                        (key, variant, name, target) in tried:
                    continue
                tried.add((key, variant, name, target))
                runs = s.ir[target].graphs()[attrs.get("variant", 0)]
                if not any((node_op(s.ir, runs.node(n)) or ("",))[0] in ops for n in runs.nodes):
                    continue
                trial = copy.copy(s)
                trial.ir, trial.changes = copy.deepcopy(s.ir), []
                try:
                    inlined = inline_call(trial, NodeRef(key, name, variant))
                except RewriteError:
                    continue  # a call inline refuses (a callee returning a ModelOutput) is not spanned
                after = trial.ir[key].graphs()[variant]
                if any(inside & inlined and inside - inlined for inside in _matches(pat, after, trial.ir)):
                    spanned = trial
                    break
            if spanned is not None:
                s.ir = spanned.ir
                done += spanned.changes
                break
        else:
            return done


def _arg_count(fn: Any, role: str) -> int:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise RewriteError(f"the {role} must be a function of tensors", hint="pass a plain Python function") from None
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


Found = list[tuple[str, set[str], list[Ref]]]


def _splice(ir: IR, graph: Implementation, key: str, found: Found, rep_for: Callable[[list[Any]], Traced]) -> None:
    """Replace each ``(anchor, matched nodes, input values)`` of one graph by the replacement's calls, traced for the
    shapes and dtypes of the values each match binds (``rep_for``)."""
    nodes, edges = ordered(graph)
    removed = set().union(*(inside for _, inside, _ in found))
    taken = {n for n, _ in nodes if n not in removed}
    emitted: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    redirect: dict[str, Ref] = {}
    for anchor, _, inputs in found:
        bound = [value_meta(ir, graph, r) for r in inputs]
        rep = rep_for(bound)
        env: dict[fx.Node, Ref] = dict(zip(rep.inputs, inputs))
        metas = replacement_metas(rep, bound, key, anchor)
        new: list[tuple[str, dict[str, Any]]] = []
        for rnode in rep.calls:
            if rnode.target is operator.getitem:
                source, index = rnode.args
                env[rnode] = Ref(env[source].node, index)
                continue
            name = fresh_name(taken, without_counter(rnode.name))
            taken.add(name)
            node_attrs: dict[str, Any] = {
                "type": "function", "implementation": rep.names[rnode],
                "args": list(map_refs(_template(rnode.args, env), lambda r: r)),
                "kwargs": dict(_template(dict(rnode.kwargs), env)),
            }
            if metas.get(rnode) is not None:
                node_attrs["meta"] = metas[rnode]
            new.append((name, node_attrs))
            env[rnode] = Ref(name)
        emitted[anchor] = new
        redirect[anchor] = env[rep.output]
    new_nodes: list[tuple[str, dict[str, Any]]] = []
    for name, attrs in nodes:
        new_nodes += emitted.get(name, [])
        if name in removed:
            continue
        for f in ("args", "kwargs"):
            if f in attrs:
                attrs[f] = map_refs(attrs[f], lambda r: redirect.get(r.node, r) if r.index is None else r)
        new_nodes.append((name, attrs))
    new_edges = []
    for u, v, d in edges:
        if v in removed:
            continue
        if u in redirect:
            target = redirect[u]
            d = {k: x for k, x in d.items() if k != "src_index"}
            if target.index is not None:
                d["src_index"] = target.index
            u = target.node
        new_edges.append((u, v, d))
    for group in emitted.values():
        for name, attrs in group:
            new_edges += edges_of(name, attrs)
    bases = {without_counter(n) for n in removed} | {without_counter(n) for g in emitted.values() for n, _ in g}
    new_nodes, new_edges = _renumber(new_nodes, new_edges, bases)
    rebuild_graph(graph, new_nodes, _in_order(new_edges, new_nodes))


def _template(value: Any, env: Mapping[fx.Node, Ref]) -> Any:
    """A replacement node's argument as an IR argument: nodes become the references ``env`` gives."""
    if isinstance(value, fx.Node):
        return env[value]
    if isinstance(value, (list, tuple)):
        return [_template(v, env) for v in value]
    if isinstance(value, dict):
        return {k: _template(v, env) for k, v in value.items()}
    return value


def _renumber(nodes: list[tuple[str, dict[str, Any]]], edges: list[tuple[str, str, dict[str, Any]]],
              bases: set[str]) -> tuple[list[tuple[str, dict[str, Any]]], list[tuple[str, str, dict[str, Any]]]]:
    """Function nodes whose names share a base with a removed or new node, numbered again in graph order
    (``mul``, ``mul_1``...) as a conversion numbers them."""
    moving = [n for n, a in nodes if a.get("type") == "function" and without_counter(n) in bases]
    fixed = {n for n, _ in nodes} - set(moving)
    rename: dict[str, str] = {}
    for name in moving:
        new = fresh_name(fixed, without_counter(name))
        fixed.add(new)
        rename[name] = new
    if all(k == v for k, v in rename.items()):
        return nodes, edges
    out_nodes = []
    for name, attrs in nodes:
        for f in ("args", "kwargs"):
            if f in attrs:
                attrs[f] = map_refs(attrs[f], lambda r: Ref(rename.get(r.node, r.node), r.index))
        out_nodes.append((rename.get(name, name), attrs))
    return out_nodes, [(rename.get(u, u), rename.get(v, v), d) for u, v, d in edges]



__all__ = ["MatchFilter", "replace_pattern"]
