"""Compare two IRs (or two FlatIRs) field by field: :func:`differences`, :func:`equal`.

``a == b`` is the IRs' full equality (every attribute, node, edge, state record and ``meta`` field). A loop
that rewrites or re-converts a model often wants equality up to fields it expects to change (the rewrite
history in ``meta.provenance``, per-node shape notes); :func:`equal` takes those as ``ignore`` patterns,
and :func:`differences` lists what differs, one line each, as ``ir2torch diff`` prints it.

The order of the implementations (``order``) and of each graph's nodes (``node_order``: the execution order) is
part of an IR, as in its file: two IRs holding the same nodes in another order differ for ``==``, for
:func:`differences` and in their saved bytes alike.

Paths are dotted, within an implementation: ``type``, ``meta.provenance``, ``nodes.add.meta.shape``,
``edges.x->add.slot``, ``state.weight.dtype``, ``variants[0].nodes.add.args[1]`` (FlatIR:
``nodes.add.meta``, ``weights.w.shape``...). An ``ignore`` pattern is an ``fnmatch`` glob over such a path
and ignores the path and everything under it (``"meta"``, ``"nodes.*.meta"``); a pattern without a dot also
matches any one component of the path (``"provenance"`` is ``meta.provenance``, wherever a ``provenance``
key sits).
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable
from typing import Any

from .flat import FlatIR
from .ir import IR
from .ir import _same_tensor as same_tensor
from .values import encode


def _keyed(items: list[Any], key: str) -> dict[str, Any]:
    """A list of dicts as a dict keyed by ``item[key]`` (with ``#n`` for repeats), so diffs align by name."""
    out: dict[str, Any] = {}
    for item in items:
        name = str(item.get(key)) if isinstance(item, dict) else str(item)
        unique, n = name, 1
        while unique in out:
            unique, n = f"{name}#{n}", n + 1
        out[unique] = item
    return out


def _comparable_impl(impl_doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(impl_doc)
    edges = [{**e, "key": f"{e['src']}->{e['dst']}"} for e in doc.get("edges", [])]
    doc["edges"] = {k: {f: v for f, v in e.items() if f != "key"} for k, e in _keyed(edges, "key").items()}
    if "variants" in doc:
        doc["variants"] = [_comparable_impl(v) for v in doc["variants"]]
    return doc


def _comparable_flat(flat: FlatIR) -> dict[str, Any]:
    doc = flat.to_dict(value_fn=encode)
    for field in ("nodes", "weights", "graph_inputs", "graph_outputs"):
        doc[field] = _keyed(doc[field], "name")
    return doc


def _short(value: Any, limit: int = 70) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _walk(a: Any, b: Any, path: str, out: list[tuple[str, str]]) -> None:
    """Append ``(path, "A -> B")`` for each leaf that differs (dicts by key; lists by position)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in b:
                out.append((sub, f"{_short(a[key])} -> (absent)"))
            elif key not in a:
                out.append((sub, f"(absent) -> {_short(b[key])}"))
            else:
                _walk(a[key], b[key], sub, out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{path}[{i}]", out)
    elif a != b or type(a) is not type(b):
        out.append((path, f"{_short(a)} -> {_short(b)}"))


_COMPONENTS = re.compile(r"[.\[]")


def _ignored(path: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``path`` or one of its prefixes matches a pattern (see the module docstring)."""
    if not patterns:
        return False
    prefixes = [path[: m.start()] for m in _COMPONENTS.finditer(path)] + [path]
    components = [c.rstrip("]") for c in _COMPONENTS.split(path)]
    for pattern in patterns:
        if any(fnmatch.fnmatchcase(p, pattern) for p in prefixes):
            return True
        if "." not in pattern and any(fnmatch.fnmatchcase(c, pattern) for c in components):
            return True
    return False


def differences(a: IR | FlatIR, b: IR | FlatIR, *, ignore: Iterable[str] = ()) -> list[str]:
    """What differs between ``a`` and ``b``, one line each; empty when they are equal up to ``ignore``.

    Lines: ``- KEY (type)`` for an implementation only in ``a``, ``+ KEY (type)`` only in ``b``, and
    ``~ KEY: field.path: A -> B`` for each differing attribute, node, edge, state record, ``meta`` field or
    per-call graph (FlatIR: ``~ field.path: A -> B``). The tensors an IR carries (``ir.tensors``) are compared
    by dtype, shape and values, as ``==`` does, under the path ``tensors.NAME``.

    Args:
        a, b: two IRs, or two FlatIRs.
        ignore: ``fnmatch`` patterns of field paths to leave out (module docstring), e.g. ``("provenance",)``
            or ``("nodes.*.meta",)``.

    Raises:
        TypeError: ``a`` and ``b`` are not both IRs or both FlatIRs.
    """
    patterns = tuple(ignore)
    if isinstance(a, FlatIR) and isinstance(b, FlatIR):
        changes: list[tuple[str, str]] = []
        _walk(_comparable_flat(a), _comparable_flat(b), "", changes)
        return [f"~ {path}: {text}" for path, text in changes if not _ignored(path, patterns)] + \
            _tensor_lines(a, b, patterns)
    if not (isinstance(a, IR) and isinstance(b, IR)):
        raise TypeError(f"compare two IRs or two FlatIRs, not {type(a).__name__} and {type(b).__name__}")
    out = [f"- {k} ({a[k].type})" for k in a if k not in b]
    out += [f"+ {k} ({b[k].type})" for k in b if k not in a]
    both = [k for k in a if k in b]
    if both != [k for k in b if k in a] and not _ignored("order", patterns):
        out.append(f"~ order: {_order_text(both, [k for k in b if k in a])}")
    doc_a = a.to_dict(value_fn=encode, edge_list=True)
    doc_b = b.to_dict(value_fn=encode, edge_list=True)
    for key in both:
        changes = []
        _walk(_comparable_impl(doc_a[key]), _comparable_impl(doc_b[key]), "", changes)
        _node_orders(doc_a[key], doc_b[key], "", changes)
        out += [f"~ {key}: {path}: {text}" for path, text in changes if not _ignored(path, patterns)]
    return out + _tensor_lines(a, b, patterns)


def _order_text(a: list[str], b: list[str]) -> str:
    """The first place two orders of the same names part, as ``... x, y ... -> ... y, x ...``."""
    i = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    return f"{_short(a[i:i + 4])} -> {_short(b[i:i + 4])} (from position {i})"


def _node_orders(a: dict[str, Any], b: dict[str, Any], path: str, out: list[tuple[str, str]]) -> None:
    """Append a ``node_order`` line when a graph holds the same nodes in another order (the execution order: an
    IR's file, ``==`` and this comparison all see it), for the graph and each per-call variant."""
    names_a, names_b = list(a.get("nodes") or {}), list(b.get("nodes") or {})
    if set(names_a) == set(names_b) and names_a != names_b:
        out.append((f"{path}node_order", _order_text(names_a, names_b)))
    variants_a, variants_b = a.get("variants") or [], b.get("variants") or []
    for i, (x, y) in enumerate(zip(variants_a, variants_b)):
        _node_orders(x, y, f"{path}variants[{i}].", out)


def _tensor_lines(a: IR | FlatIR, b: IR | FlatIR, patterns: tuple[str, ...]) -> list[str]:
    """The carried tensors (``.tensors``) that differ, compared as ``==`` compares them."""
    out = []
    for name in sorted(a.tensors.keys() | b.tensors.keys()):
        path = f"tensors.{name}"
        x, y = a.tensors.get(name), b.tensors.get(name)
        if _ignored(path, patterns) or (x is not None and y is not None and same_tensor(x, y)):
            continue
        if x is None or y is None:
            out.append(f"~ {path}: {'(absent)' if x is None else 'tensor'} -> {'(absent)' if y is None else 'tensor'}")
        else:
            same_kind = (x.dtype, x.shape) == (y.dtype, y.shape)
            out.append(f"~ {path}: {x.dtype} {list(x.shape)} -> {y.dtype} {list(y.shape)}"
                       + (" (values differ)" if same_kind else ""))
    return out


def equal(a: IR | FlatIR, b: IR | FlatIR, *, ignore: Iterable[str] = ()) -> bool:
    """Whether ``a`` and ``b`` are equal up to the field paths ``ignore`` matches (see :func:`differences`).

    ``equal(a, b)`` is ``a == b``; ``equal(a, b, ignore=("provenance",))`` compares a rewritten IR with
    another one without their rewrite history.

    Raises:
        TypeError: ``a`` and ``b`` are not both IRs or both FlatIRs.
    """
    patterns = tuple(ignore)
    if not patterns and type(a) is type(b) and isinstance(a, (IR, FlatIR)):
        return a == b
    return not differences(a, b, ignore=patterns)


__all__ = ["differences", "equal"]
