"""Matches of :func:`common.rewrite.replace_pattern` spread over module calls, found by inlining those calls
(:func:`~common.rewrite.inline`) on trial copies of the IR and kept inlined only where a match then exists.

One call at a time first: a call is kept inlined when a match spans its nodes and the caller's. A pattern of
several outputs may need several calls inlined at once (three projections, each a module rebuilt from its
graph): when no single call completes a match, the calls of one graph that hold the pattern's ops are inlined
together; if that makes new matches, each call they do not need (the matches stay as many without it) is left
as a call again.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable

from common.ir import IR, Implementation

from .core import NodeRef, RewriteError, Where, all_graphs, callee, matches_where
from .inline import inline_call
from .pattern_match import PatternMatcher, node_op
from .pattern_trace import Traced
from .session import Session


def matches(pat: Traced, graph: Implementation, ir: IR | None = None, key: str | None = None) -> Iterable[set[str]]:
    """The node sets of the matches of ``pat`` in ``graph`` (overlapping ones too; before any match filter)."""
    matcher = PatternMatcher(pat, graph, ir, key)
    for name in list(graph.graph.nodes):
        hit = matcher.at(name)
        if hit is not None:
            yield set(hit[0].values())


def _holds_ops(s: Session, attrs: dict, ops: set[str]) -> str | None:
    """The key a call node calls, when that module runs a graph holding one of ``ops``."""
    target = callee(attrs)
    if target is None or target not in s.ir or not s.ir[target].node_count:
        return None
    runs = s.ir[target].graphs()[attrs.get("variant", 0)]
    return target if any((node_op(s.ir, runs.node(n), target) or ("",))[0] in ops for n in runs.nodes) else None


def inline_spanning(s: Session, pat: Traced, where: Where) -> list[str]:
    """Inline the module calls matches span (see the module docstring), until none is; calls whose graphs hold none
    of the pattern's ops are not tried. Returns one line per inlined call."""
    done: list[str] = []
    ops = set(pat.names.values())
    tried: set[tuple[str, int, str, str]] = set()
    grouped: set[tuple[str, int]] = set()
    while True:
        spanned = None
        for key, variant, graph in list(all_graphs(s.ir)):
            if not matches_where(where, key):
                continue
            for name, attrs in list(graph.graph.nodes(data=True)):
                target = _holds_ops(s, attrs, ops)
                if target is None or (key, variant, name, target) in tried:
                    continue
                tried.add((key, variant, name, target))
                nth = [n for n, a in graph.graph.nodes(data=True) if callee(a) == target].index(name)
                trial = _inlined(s, key, variant, [(target, nth, name)])
                if trial is None:
                    continue  # a call inline refuses (a callee returning a ModelOutput) is not spanned
                inlined = trial.inlined_nodes
                after = trial.ir[key].graphs()[variant]
                if any(inside & inlined and inside - inlined for inside in matches(pat, after, trial.ir, key)):
                    spanned = trial
                    break
            if spanned is not None:
                break
        if spanned is None and len(pat.outputs) > 1:
            spanned = _group(s, pat, where, ops, grouped)
        if spanned is None:
            return done
        s.ir = spanned.ir
        done += spanned.changes


def _group(s: Session, pat: Traced, where: Where, ops: set[str], grouped: set[tuple[str, int]]) -> Session | None:
    """The first graph where inlining its calls that hold the pattern's ops together makes matches neither it nor
    any of those calls' graphs holds by itself, with only the calls those matches need inlined; ``None`` when there
    is none."""
    for key, variant, graph in list(all_graphs(s.ir)):
        if not matches_where(where, key) or (key, variant) in grouped:
            continue
        grouped.add((key, variant))
        seen: dict[str, int] = {}
        calls: list[tuple[str, int, str]] = []
        for name, attrs in graph.graph.nodes(data=True):
            target = _holds_ops(s, attrs, ops)
            if target is not None:
                calls.append((target, seen.get(target, 0), name))
            if callee(attrs) is not None:
                seen[callee(attrs)] = seen.get(callee(attrs), 0) + 1
        if len(calls) < 2:
            continue
        best = _fewest(s, pat, key, variant, calls)
        if best is not None:
            return best
    return None


def _fewest(s: Session, pat: Traced, key: str, variant: int, calls: list[tuple[str, int, str]]) -> Session | None:
    """A trial with ``calls`` of one graph inlined, as few of them as give its matches of their own (see
    :func:`_group`); ``None`` when inlining them all gives none."""
    graph = s.ir[key].graphs()[variant]
    own = {c: _own(s, pat, graph, c[2]) for c in calls}
    base = len(list(matches(pat, graph, s.ir, key)))

    def gain(subset: list[tuple[str, int, str]]) -> tuple[int, Session | None]:
        trial = _inlined(s, key, variant, subset)
        if trial is None:
            return -1, None
        found = len(list(matches(pat, trial.ir[key].graphs()[variant], trial.ir, key)))
        return found - base - sum(own[c] for c in subset), trial

    best_gain, best = gain(calls)
    if best is None or best_gain <= 0:
        return None  # no match needs these calls inlined together
    for call in list(calls):
        fewer = [c for c in calls if c != call]
        got, trial = gain(fewer)
        if trial is not None and got >= best_gain:
            calls, best = fewer, trial
    return best


def _own(s: Session, pat: Traced, graph: Implementation, name: str) -> int:
    """How many matches the graph a call runs holds by itself (inlining it does not make those)."""
    attrs = graph.node(name)
    target = callee(attrs)
    body = s.ir[target].graphs()[attrs.get("variant", 0)]
    return len(list(matches(pat, body, s.ir, target)))


def _inlined(s: Session, key: str, variant: int, calls: list[tuple[str, int, str]]) -> Session | None:
    """A trial copy of ``s`` with ``calls`` of the graph ``key`` (each ``(callee, its how-many-th call there,
    name)``) inlined, in graph order; ``None`` when inline refuses one. ``inlined_nodes`` holds the nodes the
    last call became."""
    trial = copy.copy(s)
    trial.ir, trial.changes = _copy_of(s.ir, {key, *(target for target, _, _ in calls)}), []
    inlined: set[str] = set()
    for i, (target, nth, _) in enumerate(calls):
        graph = trial.ir[key].graphs()[variant]
        sites = [n for n, a in graph.graph.nodes(data=True) if callee(a) == target]
        nth -= sum(1 for t, k, _ in calls[:i] if t == target and k < nth)  # earlier calls of it are inlined already
        if nth >= len(sites):
            return None
        try:
            inlined = inline_call(trial, NodeRef(key, sites[nth], variant))
        except RewriteError:
            return None
    trial.inlined_nodes = inlined  # type: ignore[attr-defined]
    return trial


def _copy_of(ir: IR, changing: set[str]) -> IR:
    """A copy of ``ir`` for a trial: the implementations inlining changes (the caller, the callees) copied, the others
    shared, read only (a trial of a large model copies a few graphs, not every one)."""
    out = copy.copy(ir)
    out._impls = {k: copy.deepcopy(v) if k in changing else v for k, v in ir._impls.items()}
    return out


__all__ = ["inline_spanning", "matches"]
