"""How much one forward of an IR runs, every module call expanded: a call fan-out (modules each calling their child
twice, 40 deep: 2**40 calls in a few KB) is refused when the IR is validated, before anything is built or runs."""

from __future__ import annotations

from collections.abc import Mapping

from .errors import ResourceBudgetError

#: Most graph nodes one forward may run, every module call expanded (an 80-layer Llama with Llama-3-70B dimensions
#: runs about 10**4): a file whose modules each call their child twice, 40 deep, is a few KB and 2**40 calls.
MAX_EXPANDED_NODES = 10**7


def check_expanded(calls: Mapping[str, Mapping[str, int]], sizes: Mapping[str, int]) -> None:
    """Refuse an IR whose forward would run more than :data:`MAX_EXPANDED_NODES` nodes, each module call expanded:
    an implementation costs its largest graph's nodes plus, for every call node of its graphs (all variants, an
    upper bound), its callee's cost. Computed bottom-up over the acyclic call graph, stopping past the bound.

    Raises:
        ResourceBudgetError: naming the implementation whose expansion passed the bound.
    """
    cost: dict[str, int] = {}
    for start in calls:
        stack = [start]
        while stack:
            key = stack[-1]
            if key in cost:
                stack.pop()
                continue
            pending = [c for c in calls.get(key, {}) if c not in cost]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            total = sizes.get(key, 0) + sum(n * cost[c] for c, n in calls.get(key, {}).items())
            if total > MAX_EXPANDED_NODES:
                raise ResourceBudgetError(
                    f"one call of {key!r} would run more than {MAX_EXPANDED_NODES} graph nodes, its module calls "
                    f"expanded ({total} counted)", implementation=key, key="implementations",
                    hint="its modules call each other far more often than any model does (a call fan-out); the "
                    "file is not one a conversion wrote")
            cost[key] = total


__all__ = ["MAX_EXPANDED_NODES", "check_expanded"]
