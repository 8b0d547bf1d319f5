"""Repeated identical blocks: ``layers.0`` .. ``layers.31`` of a decoder are one block drawn once.

Two implementations are *identical blocks* when their subtrees are equal up to their own path: same
type, attributes, graph, state records (shapes, dtypes, ties inside the block), meta, and children that
are identical in turn under the same names. Siblings named by consecutive integers (``layers.0``,
``layers.1``, ...) that are identical form a *run*; :func:`fold_repeats` keeps the first of each run of
two or more in a drawing tree and drops the others with their subtrees, noting the run on the first.
A tied weight that reaches outside a block, or any other difference, keeps the blocks apart: a run is
folded only when every member would be drawn the same.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import networkx as nx

from ..flat import FlatIR
from ..ir import IR, Implementation, parent_key
from ..values import encode

__all__ = ["Run", "flat_signatures", "fold_repeats", "ir_signatures", "repeat_name", "repeat_runs"]

#: ``(first index, last index, count, member paths)`` of a run of identical siblings
Run = tuple[int, int, int, list[str]]


def _relative(value: Any, key: str) -> Any:
    """``value`` with every string naming ``key`` or a path under it written relative to it."""
    if isinstance(value, str):
        if value == key:
            return "<self>"
        return "<self>." + value[len(key) + 1:] if value.startswith(key + ".") else value
    if isinstance(value, Mapping):
        return {str(_relative(k, key)): _relative(v, key) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_relative(v, key) for v in value]
    return value


def _numbered(graph: Mapping[str, Any]) -> dict[str, Any]:
    """A graph's ``nodes``/``edges`` with node names replaced by their position (names follow the producer:
    block 0's input is ``x``, block 1's is ``add``; the blocks are still the same)."""
    names = {name: f"#{i}" for i, name in enumerate(graph.get("nodes", {}))}

    def sub(value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: names.get(v, v) if k in ("$ref", "src", "dst") and isinstance(v, str) else sub(v)
                    for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return value

    nodes = [sub({k: v for k, v in node.items() if k != "name"}) for node in graph.get("nodes", {}).values()]
    return {"nodes": nodes, "edges": sub(graph.get("edges", []))}


def _own_signature(impl: Implementation) -> str:
    """A digest of one implementation (not its children), with paths relative to its own key."""
    doc = impl.to_dict(value_fn=encode, edge_list=True)
    doc.pop("name", None)
    doc.update(_numbered(doc))
    if "variants" in doc:
        doc["variants"] = [_numbered(variant) for variant in doc["variants"]]
    text = json.dumps(_relative(doc, impl.name), sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()


def _children(keys: list[str]) -> dict[str, list[str]]:
    known = set(keys)
    out: dict[str, list[str]] = {k: [] for k in keys}
    out.setdefault("root", [])
    for key in keys:
        if key != "root":
            out.setdefault(parent_key(key, known), []).append(key)
    return out


def _combine(keys: list[str], own: Callable[[str], str]) -> dict[str, str]:
    """Subtree digests: a key's own digest with its children's (named relative to it), bottom up."""
    children = _children(keys)
    done: dict[str, str] = {}
    for key in sorted(children, key=lambda k: -k.count(".") if k != "root" else 1):  # deepest first
        parts = [own(key)]
        prefix = "" if key == "root" else key + "."
        parts += [f"{c.removeprefix(prefix)}={done[c]}" for c in children[key]]
        done[key] = hashlib.sha256("\n".join(parts).encode()).hexdigest()
    return done


def ir_signatures(ir: IR) -> dict[str, str]:
    """Implementation key -> digest of its subtree (equal digests: identical blocks)."""
    own = {key: _own_signature(impl) for key, impl in ir.items()}
    return _combine(list(ir.keys()), lambda k: own.get(k, ""))


def flat_signatures(flat: FlatIR) -> dict[str, str]:
    """Module path of a FlatIR -> digest of the ops that ran in it and its submodules (their types in order)."""
    ops: dict[str, list[str]] = {}
    for node in flat.nodes:
        ops.setdefault(node.module_path, []).append(node.op_type)
    paths: dict[str, None] = {}
    for path in ops:
        parts = path.split(".") if path != "root" else []
        for cut in range(1, len(parts) + 1):
            paths[".".join(parts[:cut])] = None
    return _combine(["root", *paths], lambda k: "|".join(ops.get(k, [])))


def repeat_name(run: Run) -> str:
    """``"0-31 x32"``: the short name a folded run is drawn with."""
    first, last, count, _ = run
    return f"{first}-{last} x{count}"


def repeat_runs(tree: nx.DiGraph, signatures: Mapping[str, str]) -> dict[str, Run]:
    """Every run of two or more identical integer-named siblings, under every parent of ``tree``, by first member.

    Args:
        tree: a drawing tree over module paths (root ``"root"``), children in module order.
        signatures: path -> subtree digest (:func:`ir_signatures`); paths without one are never in a run.
    """
    runs: dict[str, Run] = {}
    for parent in tree:
        kids = list(tree.successors(parent))
        i = 0
        while i < len(kids):
            j = i + 1
            while j < len(kids) and _follows(kids[j - 1], kids[j]) and \
                    signatures.get(kids[j]) is not None and signatures.get(kids[j]) == signatures.get(kids[i]):
                j += 1
            if j - i >= 2:
                members = kids[i:j]
                runs[members[0]] = (_index(members[0]), _index(members[-1]), len(members), members)
            i = j
    return runs


def fold_repeats(tree: nx.DiGraph, signatures: Mapping[str, str]) -> nx.DiGraph:
    """Keep the first of every run of identical integer-named siblings; the run is noted on it as ``repeat``.

    Args:
        tree: a drawing tree over module paths (root ``"root"``), children in module order.
        signatures: path -> subtree digest (:func:`ir_signatures`); paths without one are never folded.

    Returns:
        A copy of ``tree`` without the other members of each run and their subtrees.
    """
    runs = repeat_runs(tree, signatures)
    drop: set[str] = set()
    for _, _, _, members in runs.values():
        for other in members[1:]:
            drop.add(other)
            drop.update(nx.descendants(tree, other))
    out = tree.subgraph([n for n in tree if n not in drop]).copy()
    for first, run in runs.items():
        if first not in drop:  # a run inside a dropped block is drawn by the kept block's own run
            out.nodes[first]["repeat"] = run
    return out


def _index(path: str) -> int:
    return int(path.rsplit(".", 1)[-1])


def _follows(a: str, b: str) -> bool:
    """``b`` is the next integer-named sibling after ``a`` (``layers.3`` -> ``layers.4``)."""
    pa, _, ia = a.rpartition(".")
    pb, _, ib = b.rpartition(".")
    return pa == pb and ia.isdigit() and ib.isdigit() and int(ib) == int(ia) + 1
