"""What a side-by-side view of two IRs marks: which modules and graph nodes were added, removed or changed.

``ir2torch view A.ir.json --compare B.ir.json`` (``ir.view(path, compare=other)``) draws A on the left and B on the
right; selecting a module, drawing a graph or clicking a node on one side does the same on the other, at the
counterpart. Counterparts are found from the view data of both sides (:mod:`common.htmlview.data`), so what is
compared is exactly what the page shows:

- a module of B stands for the module of A at the same path when its ``meta.provenance`` (if any) names that path
  among the modules it was made from (a folded conv for the conv), else for the original module its provenance
  names (:func:`common.provenance.original_path`: a fused ``qkv`` for the last projection it replaced);
- within two counterparts, graph nodes are matched by name, graph by graph (the main graph, then the per-call
  graphs in order); a node is *changed* when its kind, op, output, arguments or called module differ (a called
  module compared through the counterparts above);
- a module is *changed* when its class, attributes, state records, aliases, meta (a rewritten module's new
  ``provenance`` included: a folded conv is marked although only its weights changed) or any graph node differ,
  *removed* when only A has it, *added* when only B has it.

The document, one JSON object (``cmp`` in the page): ``{"names": [a, b], "pair": [{path of A: path of B}, {path of
B: path of A}], "m": [{path: status}, {path: status}], "n": [{path: {"<graph>:<node>": status}}, ...], "count":
{status: modules}}``; statuses are ``"added"``, ``"removed"`` and ``"changed"`` (anything absent is the same on both
sides).
"""

from __future__ import annotations

from typing import Any

from ..bodies import relocate
from ..ir import IR
from ..provenance import original_path, records

__all__ = ["compare_data", "graphs_of"]

def graphs_of(impls: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The graphs of ``key`` as the page draws them: an instance of a shared body that holds no graphs of its own
    shows its home's, its calls relocated from the home to itself, with its own rows over them (as view.js does)."""
    entry = impls[key]
    if "g" in entry:
        return entry["g"]
    home = entry["sb"][0]
    graphs = [{"e": g["e"], "n": [[*r[:5], relocate(r[5], home, key) if r[5] else r[5]] for r in g["n"]],
               **({"h": g["h"]} if "h" in g else {})} for g in impls[home]["g"]]
    for v, i, row in entry.get("ro", []):
        graphs[v]["n"][i] = row
    return graphs


def _pairs(a: IR, b: IR) -> dict[str, str]:
    """``{key of B: key of A}`` for every implementation of B with a counterpart in A."""
    out = {}
    for key, impl in b.items():
        sources = {item["source"] for rec in records(impl) for item in rec["from"]}
        origin = key if key in a and (not sources or key in sources) else original_path(impl)
        if origin in a:
            out[key] = origin
        elif key in a:
            out[key] = key
    return out


def _module_rows(entry: dict[str, Any]) -> tuple[Any, ...]:
    return entry["cls"], entry["a"], entry["s"], entry["al"], entry["m"]


def _node_rows(graphs: list[dict[str, Any]], called: Any) -> dict[str, list[Any]]:
    """``{"<graph>:<node>": comparable row}`` with the called module put through ``called``."""
    return {f"{v}:{row[0]}": [*row[1:5], called(row[5]) if row[5] else ""]
            for v, g in enumerate(graphs) for row in g["n"]}


def compare_data(a: IR, b: IR, data_a: dict[str, Any], data_b: dict[str, Any],
                 names: tuple[str, str] = ("A", "B")) -> dict[str, Any]:
    """The comparison of ``a`` and ``b`` the page marks (module docstring); ``data_a`` and ``data_b`` are their
    view data (:func:`common.htmlview.data.view_data`)."""
    b_to_a = _pairs(a, b)
    a_to_b: dict[str, str] = {}
    for key_b, key_a in b_to_a.items():
        a_to_b.setdefault(key_a, key_b)  # a module a rewrite split in two: the first stands for it
    modules: list[dict[str, str]] = [{}, {}]
    nodes: list[dict[str, dict[str, str]]] = [{}, {}]
    for key in a:
        if key not in a_to_b:
            modules[0][key] = "removed"
    for key_b in b:
        key_a = b_to_a.get(key_b)
        if key_a is None:
            modules[1][key_b] = "added"
            continue
        ia, ib = data_a["impls"][key_a], data_b["impls"][key_b]
        rows_a = _node_rows(graphs_of(data_a["impls"], key_a), lambda p: p)
        rows_b = _node_rows(graphs_of(data_b["impls"], key_b), lambda p: b_to_a.get(p, "+" + p))
        marks_a = {n: ("removed" if n not in rows_b else "changed") for n, r in rows_a.items() if rows_b.get(n) != r}
        marks_b = {n: ("added" if n not in rows_a else "changed") for n, r in rows_b.items() if rows_a.get(n) != r}
        if marks_a:
            nodes[0][key_a] = marks_a
        if marks_b:
            nodes[1][key_b] = marks_b
        if marks_a or marks_b or _module_rows(ia) != _module_rows(ib):
            modules[0][key_a] = modules[1][key_b] = "changed"
    count = {status: sum(1 for m in modules for s in m.values() if s == status) for status in ("added", "removed")}
    count["changed"] = sum(1 for s in modules[1].values() if s == "changed")
    return {"names": list(names), "pair": [a_to_b, b_to_a], "m": modules, "n": nodes, "count": count}
