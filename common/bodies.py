"""Shared bodies: one stored graph for the module instances that are alike (decoder layers, ViT blocks, ...).

An IR holds one implementation per module instance. Eighty decoder layers of one model have eighty equal
graphs, equal attributes and equal state records; only their keys (and the keys of the children they call)
differ. A saved file (format version 2) stores such an implementation once, in the document's ``bodies``, under
the key of the first instance, its **home**; every instance (the home included) is then
``{"name": key, "$body": home}`` plus what is its own: ``aliases`` and the ``meta`` entries that differ between
instances. Expanding instance ``key`` of body ``home`` gives back the implementation exactly: the body's fields,
its own ``meta`` entries over the body's (which lists every key in order, ``null`` where each instance gives
its own value; an instance's keys the body lacks come after), and every module call of the body's graphs that
names ``home.<path>`` naming ``key.<path>`` instead (calls of modules outside ``home`` stay as they are).

Two implementations share a body when they are equal once their keys are set aside (:func:`signature`), so the
sharing is exact by construction; :func:`share` groups them when a document is written, and a loaded IR keeps
the instances unexpanded until a graph is asked for (:meth:`common.ir.Implementation.body`).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import networkx as nx
import torch

from .errors import IRFormatError
from .schema import NODE_KINDS, check_node_budget, expect
from .values import TRAINING, Ref

__all__ = ["BODY_FIELDS_REFUSED", "INSTANCE_FIELDS", "copy_value", "from_shared", "group", "is_call", "relocate",
           "relocated_graph", "share", "signature"]

#: Fields an instance entry may have in a file: everything else comes from its body.
INSTANCE_FIELDS = frozenset({"name", "$body", "aliases", "meta"})
#: Fields a body may not have (they belong to instances).
BODY_FIELDS_REFUSED = frozenset({"name", "$body", "aliases"})
_SELF = "\x00self"  # stands for an instance's own key in a signature (no key contains a NUL)


def relocate(target: str, home: str, key: str) -> str:
    """The module ``target`` a call in the graph of ``home`` names, seen from instance ``key``: ``home.<path>``
    becomes ``key.<path>``; any other module (a sibling, a module shared by all instances) is the same."""
    if target.startswith(home) and target[len(home):len(home) + 1] == ".":
        return key + target[len(home):]
    return target


def is_call(attrs: Mapping[str, Any]) -> bool:
    """Whether a node (its attribute dict) calls a module: its type is not one of the node kinds."""
    return attrs.get("type") not in NODE_KINDS


def _relative_nodes(nodes: Any, key: str) -> Any:
    if not isinstance(nodes, Mapping):
        return nodes
    out = {}
    for name, attrs in nodes.items():
        target = attrs.get("implementation") if isinstance(attrs, Mapping) else None
        if isinstance(target, str) and is_call(attrs):
            attrs = {**attrs, "implementation": relocate(target, key, _SELF)}
        out[name] = attrs
    return out


def signature(key: str, entry: Mapping[str, Any]) -> str:
    """What an implementation (its plain, JSON-ready dict) is once its own key is set aside: two implementations
    with one signature expand from one body. ``meta`` is left out (instances keep the entries that differ)."""
    rest: dict[str, Any] = {f: v for f, v in entry.items() if f not in ("name", "aliases", "meta")}
    meta = entry.get("meta", {})
    rest["\x00meta_keys"] = list(meta) if isinstance(meta, Mapping) else None  # meta's order is kept exactly
    rest["nodes"] = _relative_nodes(entry.get("nodes", {}), key)
    if isinstance(rest.get("variants"), list):
        rest["variants"] = [{**v, "nodes": _relative_nodes(v.get("nodes", {}), key)} if isinstance(v, Mapping)
                            else v for v in rest["variants"]]
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), allow_nan=False)


def group(entries: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """``{home: [instance keys, home first]}`` of the implementations (plain dicts by key, in document order)
    that share a body: two or more with one :func:`signature`; the root never does."""
    by_sig: dict[str, list[str]] = {}
    for key, entry in entries.items():
        if key == "root" or not isinstance(entry, Mapping) or "$body" in entry:
            continue
        by_sig.setdefault(signature(key, entry), []).append(key)
    return {keys[0]: keys for keys in by_sig.values() if len(keys) > 1}


_MISSING = object()


def share(entries: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``implementations`` and ``bodies`` of a format-2 document for ``entries`` (plain, JSON-ready dicts by
    key): instances of a shared body become references; ``bodies`` is empty when nothing is shared."""
    groups = group(entries)
    out: dict[str, Any] = dict(entries)
    bodies: dict[str, Any] = {}
    for home, keys in groups.items():
        first = entries[home]
        metas = [entries[k].get("meta", {}) for k in keys]
        # the entries alike in every instance; the others hold their place with null (each instance gives its own)
        common = {f: v for f, v in first.get("meta", {}).items() if all(m.get(f, _MISSING) == v for m in metas)}
        body = {f: v for f, v in first.items() if f not in ("name", "aliases", "meta")}
        if metas[0]:
            body["meta"] = {f: common.get(f) for f in metas[0]}
        bodies[home] = body
        for key, meta in zip(keys, metas):
            instance: dict[str, Any] = {"name": key, "$body": home}
            if entries[key].get("aliases"):
                instance["aliases"] = entries[key]["aliases"]
            own = {f: v for f, v in meta.items() if f not in common}
            if own:
                instance["meta"] = own
            out[key] = instance
    return out, bodies


_IMMUTABLE = frozenset({str, int, float, bool, type(None), complex, Ref, type(TRAINING), torch.dtype, torch.device,
                        torch.memory_format, torch.layout, torch.Size, slice, type(Ellipsis)})


def copy_value(value: Any) -> Any:
    """A copy of a decoded value (of a body's attributes, state records or meta) that shares nothing mutable with
    it: dicts and lists are copied, strings, numbers and other immutable leaves are shared, anything else is
    deep-copied (``copy.deepcopy`` of a whole body's meta costs more than the rest of loading an instance)."""
    kind = type(value)
    if kind in _IMMUTABLE:
        return value
    if kind is dict:
        return {k: copy_value(v) for k, v in value.items()}
    if kind is list:
        return [copy_value(v) for v in value]
    if kind is tuple:
        return tuple(copy_value(v) for v in value)
    return copy.deepcopy(value)


def from_shared(ir: Any, d: Mapping[str, Any], bodies: Any, value_fn: Any, max_nodes: int | None) -> Any:
    """:meth:`common.ir.IR.from_dict` of a document with shared ``bodies`` (into the empty ``ir``): each body
    parsed once, its instances unexpanded; every reference checked first."""
    from .ir import Implementation

    expect(bodies, Mapping, "bodies")
    homes: dict[str, int] = {}
    for key, entry in d.items():
        if isinstance(entry, Mapping) and "$body" in entry:
            where = f"implementations[{key!r}]"
            extra = set(entry) - INSTANCE_FIELDS
            if extra:
                raise IRFormatError(f"an instance of a shared body has fields {sorted(map(str, extra))}",
                                    implementation=str(key), key=where,
                                    hint="an instance holds 'name', '$body', 'aliases' and 'meta' only; the rest "
                                         "is its body's")
            home = entry["$body"]
            if not isinstance(home, str) or home not in bodies:
                raise IRFormatError(f"'$body' {str(home)[:80]!r} names no entry of the document's bodies",
                                    implementation=str(key), key=f"{where}.body",
                                    hint="an instance names the key of its body in 'bodies' with '$body'")
            homes[home] = homes.get(home, 0) + 1
    for home in bodies:
        if home not in homes:
            raise IRFormatError(f"body {str(home)[:80]!r} is used by no implementation", key=f"bodies[{home!r}]",
                                hint="remove it, or make its instances name it with '$body'")
        home_entry = d.get(home)
        if not isinstance(home_entry, Mapping) or home_entry.get("$body") != home:
            raise IRFormatError(f"body {home!r} is not an instance of itself: implementation {home!r} must name "
                                f"it with '$body'", key=f"bodies[{home!r}]",
                                hint="a body is stored under the key of its first instance, which names it")
        expect(bodies[home], Mapping, f"bodies[{home!r}]", home)
        refused = set(bodies[home]) & BODY_FIELDS_REFUSED
        if refused:
            raise IRFormatError(f"body {home!r} has fields {sorted(refused)}, which belong to instances",
                                key=f"bodies[{home!r}]", hint="a body holds no 'name', '$body' or 'aliases'")
    # the budget counts each instance's expansion: sharing shrinks the file, not what a rebuild builds
    check_node_budget({k: bodies[e["$body"]] if isinstance(e, Mapping) and "$body" in e else e for k, e in d.items()},
                      max_nodes)
    parsed = {home: Implementation.from_dict(home, {**body, "name": home}, value_fn=value_fn, max_nodes=None)
              for home, body in bodies.items()}
    for key, entry in d.items():
        if not isinstance(key, str) or not key:
            raise IRFormatError(f"implementation key {key!r} is not a non-empty string", key="document")
        if not (isinstance(entry, Mapping) and "$body" in entry):
            ir._impls[key] = Implementation.from_dict(key, entry, value_fn=value_fn, max_nodes=None)
            continue
        if "name" in entry and entry["name"] != key:
            raise IRFormatError(f"name {entry['name']!r} differs from its key {key!r}", implementation=key,
                                hint="an implementation's name must equal its key in the IR")
        where = f"implementations[{key!r}]"
        aliases = entry.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
            raise IRFormatError("'aliases' must be a list of module paths", implementation=key, key=f"{where}.aliases")
        meta = entry.get("meta", {})
        expect(meta, Mapping, f"{where}.meta", key)
        ir._impls[key] = Implementation.instance_of(
            key, parsed[entry["$body"]], aliases=list(aliases),
            meta={str(k): value_fn(v, f"{where}.meta.{k}") for k, v in meta.items()})
    return ir


def relocated_graph(graph: nx.MultiDiGraph, home: str, key: str) -> nx.MultiDiGraph:
    """A copy of ``graph`` (of a body whose home is ``home``) as the graph of instance ``key``: attributes deep-copied,
    module calls of ``home.<path>`` naming ``key.<path>``, nodes and each node's in-edges in the same order."""
    out = nx.MultiDiGraph()
    for name, attrs in graph._node.items():
        own = copy_value(attrs)
        target = own.get("implementation")
        if isinstance(target, str) and is_call(own):
            own["implementation"] = relocate(target, home, key)
        out.add_node(name)
        out._node[name].update(own)
    for dst in graph._node:
        for src, keyed in graph._pred[dst].items():
            for k, attrs in keyed.items():
                out.add_edge(src, dst, key=k, **copy_value(attrs))
    return out
