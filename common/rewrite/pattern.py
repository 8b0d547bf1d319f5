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

A pattern may return several values (a tuple or a list), as in torch.fx: the replacement returns as many, and
each reader of the pattern's ``i``-th output reads the replacement's ``i``-th. Its first output is anchored at
each node in turn, the others at any node computing their op, backtracking over the choices; matched nodes other
than the outputs must be read inside the match only (:mod:`~common.rewrite.pattern_match`). The replacement
takes the place of the first output in graph order; a match where a value it reads is computed only after that
place is not replaced (``skipped`` says so), since other nodes would have to move.

A match spread over a module call (part of it in the callee's graph, part in the caller's) is found by inlining
that call first (:func:`~common.rewrite.inline`): each call whose graph holds one of the pattern's ops is
inlined on a trial copy, and kept inlined only where a match then spans its nodes and the caller's; a match of
several outputs over several calls of one graph is found by inlining them together
(:mod:`~common.rewrite.pattern_inline`).

A call of a stateless activation module rebuilt by its handler (``nn.SiLU``, ``nn.ReLU``, ``nn.GELU``, ...: no graph)
matches as the ATen op its forward runs (:data:`~common.rewrite.pattern_match.LEAF_OPS`: ``aten.silu.default`` of
its argument; ``nn.GELU(approximate="tanh")`` with that keyword): a replacement takes the call's place, and the
module stays, called by nothing, as torch2ir records an unused module. An in-place one (``inplace=True``) never
matches: it also changes its input, which the replacement would not. A call of an ``nn.Linear`` matches as
``aten.linear.default(x, weight, bias)`` (:data:`~common.rewrite.pattern_match.STATE_OPS`), its parameters binding
pattern arguments: a replacement reading them reads the module's parameters (``get_attr`` nodes, as a conversion
writes a forward reading ``self.query.weight``), and the module stays with its state, called by nothing. What is
not matched, by design: tensor constants inside the pattern or the replacement (pass them as inputs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from common.ir import IR

from .core import (
    Match,
    NodeRef,
    RewriteError,
    Where,
    all_graphs,
    callee,
    matches_where,
)
from .passes import Rewritten
from .pattern_inline import inline_spanning
from .pattern_match import PatternMatcher
from .pattern_splice import Found, splice
from .pattern_trace import SizedReplacements, trace
from .session import Session

#: A match filter: called with each candidate match and the IR, keeps the match when it returns true.
MatchFilter = Callable[[Match, IR], bool]


def replace_pattern(ir: IR, state: Mapping[str, torch.Tensor] | None, pattern: Callable[..., Any],
                    replacement: Callable[..., Any], *, example_inputs: Sequence[Any] | None = None,
                    where: Where = None, match_filters: Iterable[MatchFilter] = (),
                    allow: Iterable[str] | None = None, across_calls: bool = True) -> Rewritten:
    """Replace every match of ``pattern`` by ``replacement`` in every graph of ``ir`` (see the module docstring).

    Args:
        ir: the IR (not changed: the result is a new IR).
        state: its state dict, or ``None``; patterns compute on values only, so the state comes back unchanged.
        pattern: a function of tensors, e.g. ``lambda x: x * torch.sigmoid(x)``; returning a tuple (or list) of
            tensors, a pattern of several outputs.
        replacement: a function of the same arguments, e.g. ``lambda x: torch.nn.functional.silu(x)``, returning
            as many values as the pattern, in the same order.
        example_inputs: what both are traced with; default one float tensor of shape ``(2, 3, 4, 4)`` per argument.
            Only the traced operations matter: a match may have any shape.
        where: the graphs to rewrite: an implementation key glob or a predicate on keys (default every graph).
        match_filters: predicates ``(match, ir) -> bool``; a match is replaced only if each returns true
            (``match.nodes`` are the matched nodes in graph order).
        allow: extra op names the result may call (the default allow-list otherwise).
        across_calls: a match spread over a module call (part of it in the callee's graph, part in the caller's)
            is found by inlining just that call first (:func:`~common.rewrite.inline`), one call at a time, and
            only where such a match exists; a match of several outputs spread over several calls of one graph, by
            inlining those calls together (:mod:`~common.rewrite.pattern_inline`); ``False`` matches inside each
            graph only.

    Returns:
        :class:`~common.rewrite.Rewritten`: ``(new_ir, new_state)``, with ``changes`` (one line per replaced match),
        ``count``, ``inlined`` (one line per module call inlined for a match) and ``skipped`` (one line per match of
        several outputs left because a value its replacement reads is computed after its first output). Replaced
        nodes go; the replacement's nodes get names as a conversion would give them (numbered within the graph in
        computation order) and the shape and dtype they compute, so converting the rebuilt model gives the same IR.

    Raises:
        RewriteError: a function cannot be traced or does not return one tensor or a tuple of distinct tensors, the
            two take different numbers of arguments or return different numbers of values, the pattern returns one
            of its arguments, or the result does not validate (e.g. the replacement calls an op outside ``allow``).
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
    if len(pat.outputs) != len(rep.outputs):
        raise RewriteError(f"the pattern returns {len(pat.outputs)} values and the replacement {len(rep.outputs)}",
                           hint="return one replacement value per pattern output, in the same order")
    if len(set(pat.outputs)) != len(pat.outputs):
        raise RewriteError("the pattern returns one value twice", hint="return each value once")
    if any(out.op == "placeholder" for out in pat.outputs):
        raise RewriteError("the pattern returns one of its arguments: it would match every value",
                           hint="the pattern must compute each value it returns")
    filters = list(match_filters)
    sized = SizedReplacements(replacement, example_inputs)
    s = Session(ir, state, allow=allow, pass_name="replace_pattern")
    inlined = inline_spanning(s, pat, where) if across_calls else []
    skipped: list[str] = []
    for key, variant, graph in list(all_graphs(s.ir)):
        if not matches_where(where, key):
            continue
        where_text = key + (f"[variant {variant}]" if variant else "")
        matcher = PatternMatcher(pat, graph, s.ir, key)
        found: list[Found] = []
        texts: list[str] = []
        used: set[str] = set()
        order = {n: i for i, n in enumerate(graph.graph.nodes)}
        for name in list(graph.graph.nodes):
            hit = matcher.at(name, used)
            if hit is None:
                continue
            calls, inputs, outputs = hit
            inside = set(calls.values())
            refs = tuple(NodeRef(key, n, variant) for n in sorted(inside, key=order.__getitem__))
            match = Match(refs, tuple(callee(graph.node(ref.node)) for ref in refs))
            if not all(f(match, s.ir) for f in filters):
                continue
            one = Found(inside, [inputs[p] for p in pat.inputs], outputs)
            if not one.placeable(graph, order):
                skipped.append(f"{where_text}: {', '.join(r.node for r in refs)} (a value the replacement reads "
                               f"is computed after {one.place(order)!r}, where it would go)")
                continue
            used |= inside
            found.append(one)
            texts.append(", ".join(ref.node for ref in refs))
        if found:
            splice(s.ir, graph, key, found, lambda metas: sized(metas) or rep)
            made = ", ".join(rep.names[n] for n in rep.calls if n in rep.names) or "an argument"
            s.changes += [f"{where_text}: {text} -> {made}" for text in texts]
    result = Rewritten(*s.finish(), s.changes)
    result.inlined = inlined
    result.skipped = skipped
    return result


def _arg_count(fn: Any, role: str) -> int:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise RewriteError(f"the {role} must be a function of tensors", hint="pass a plain Python function") from None
    return sum(1 for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


__all__ = ["MatchFilter", "replace_pattern"]
