"""The names of the sizes read from data (export's unbacked symbols ``u0``, ``u1``...) in an IR, numbered without
gaps.

Export numbers those symbols in the order it makes them, model-wide, also for values nothing uses: HunyuanVL's
vision tower reads ``t, h, w`` of each image's grid with ``grid_thw.tolist()`` and uses ``h`` and ``w`` only, so
its graph names them ``u6`` and ``u7``, ``u5`` (``t``) appearing nowhere. A rebuilt model reads the two it uses
(its graph holds no read of ``t``), export names them ``u5`` and ``u6``, and converting the rebuild gave another
IR: the same graph, other names.

So the names one export gave (the graphs of one conversion; a child traced on its own is converted by an export of
its own) are numbered again in the order of their numbers, without the ones that appear nowhere: ``u6``, ``u7``
become ``u5``, ``u6`` when ``u5`` is absent. It is a one-to-one renaming of the symbols in the texts that name them
(the shapes and numbers of the nodes' metadata, the expression a runtime assertion's message states), which only
name them: nothing is computed from these texts, and the graph's ops and the assertions' conditions are nodes,
untouched. The root's ``range_constraints`` (export's range of every symbol) name them too: renamed alike, and
the range of a symbol no graph names is left out (it bounds nothing of the IR).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from common.ir import IR, Implementation

_SYMBOL = re.compile(r"\bu(\d+)\b")
_ASSERT = "aten._assert_scalar.default"
_EXPRESSION = re.compile(r"\A(Runtime assertion failed for expression )(.*)( on node '[^']*')\Z", re.DOTALL)


def renumber_unbacked(ir: IR) -> None:
    """Number the unbacked symbols the graphs of ``ir`` name (one export's) again without gaps, in place."""
    graphs = list(_graphs(ir))
    used: set[int] = set()
    for graph in graphs:
        for attrs in graph.values():
            _texts(attrs, lambda text: used.update(int(n) for n in _SYMBOL.findall(text)) or text)
    mapping = {f"u{old}": f"u{new}" for new, old in enumerate(sorted(used)) if old != new}
    for impl in ir.values():
        _ranges(impl, {f"u{n}" for n in used}, mapping)
    if not mapping:
        return

    def rename(text: str) -> str:
        return _SYMBOL.sub(lambda m: mapping.get(m.group(0), m.group(0)), text)

    for graph in graphs:
        for attrs in graph.values():
            _texts(attrs, rename)


def _ranges(impl: Implementation, used: set[str], mapping: dict[str, str]) -> None:
    """The ``range_constraints`` of ``impl`` (the root's: export's range of every symbol) with the unbacked
    symbols renamed, without those no graph names (a value export read and nothing used: its range bounds
    nothing of the IR)."""
    ranges = impl.meta.get("range_constraints")
    if not isinstance(ranges, dict):
        return
    impl.meta["range_constraints"] = {mapping.get(k, k): v for k, v in ranges.items()
                                      if not (isinstance(k, str) and _SYMBOL.fullmatch(k) and k not in used)}


def _graphs(ir: IR) -> Iterator[dict[str, dict[str, Any]]]:
    """The node attributes of every graph of ``ir`` (variants too; an unexpanded instance of a shared body is its
    body's, renamed once with the body)."""
    seen: set[int] = set()
    for impl in ir.values():
        own = impl if impl.body is None else impl.shared_body
        if own is not None and id(own) not in seen:
            seen.add(id(own))
            yield from _own(own)


def _own(impl: Implementation) -> Iterator[dict[str, dict[str, Any]]]:
    yield impl.graph._node
    for variant in impl.variants:
        yield variant.graph._node


def _texts(attrs: dict[str, Any], change: Callable[[str], str]) -> None:
    """Apply ``change`` to the texts of a node that name symbols: the strings of its ``meta`` and the expression of
    a runtime assertion's message."""
    if "meta" in attrs:
        attrs["meta"] = _strings(attrs["meta"], change)
    args = attrs.get("args")
    if attrs.get("implementation") == _ASSERT and isinstance(args, list) and len(args) == 2 and \
            isinstance(args[1], str):
        found = _EXPRESSION.match(args[1])
        if found is not None:
            args[1] = found.group(1) + change(found.group(2)) + found.group(3)


def _strings(value: Any, change: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, dict):
        return {k: _strings(v, change) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings(v, change) for v in value]
    if isinstance(value, tuple):
        return tuple(_strings(v, change) for v in value)
    return value


__all__ = ["renumber_unbacked"]
