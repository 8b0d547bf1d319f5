"""Text for ``ir2torch show`` (what a file holds) and ``ir2torch diff`` (how two files differ).

Both work on either kind of file, told apart by the JSON header's ``format``: the module-level IR
(``torch2ir.ir``) or the ATen-level FlatIR (``torch2ir.flat``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from ..errors import IRFormatError
from ..flat import FlatIR
from ..flat_schema import FLAT_FORMAT, document_format
from ..ir import IR
from ..render.graphs import compact_count, flat_hierarchy_graph
from ..serialize import IR_FORMAT
from ..textview import elements, ir_summary_lines, tensor_text, top_counts, tree_lines
from ..values import encode
from .app import CommandError

__all__ = ["describe", "diff", "load_any"]


def load_any(path: str | os.PathLike, *, allow: list[str] | None = None) -> IR | FlatIR:
    """Load an IR or FlatIR file, whichever its header names (both are validated on load); ``allow``:
    operators of other namespaces to accept (``--allow-op``). A file whose pytree spec names a transformers
    output class is read again after importing transformers' output classes, if transformers is installed.

    Raises:
        IRFormatError: the file is missing, not JSON, or not valid for its format.
        CommandError: the header names neither format.
    """
    try:
        return _load(path, allow)
    except IRFormatError as exc:
        if "'transformers." not in exc.message or not _import_transformers():
            raise
    return _load(path, allow)  # once more, with transformers' output classes registered


def _import_transformers() -> bool:
    """Import ``transformers.modeling_outputs`` (a fixed module, never a name from the file) when installed and not
    imported yet, so an IR of a transformers model, whose output spec names its ``ModelOutput`` class, can be read.
    Returns whether it was imported now."""
    if "transformers" in sys.modules or importlib.util.find_spec("transformers") is None:
        return False
    importlib.import_module("transformers.modeling_outputs")
    return True


def _load(path: str | os.PathLike, allow: list[str] | None) -> IR | FlatIR:
    fmt = document_format(path)
    if fmt == FLAT_FORMAT:
        return FlatIR.load(path, allow=allow)
    if fmt in (IR_FORMAT, None):  # None: not an object, or no header; the IR loader says which
        return IR.load(path, allow=allow)
    raise CommandError(f"{os.fspath(path)} has format {fmt!r}: neither {IR_FORMAT!r} nor {FLAT_FORMAT!r}",
                       hint="pass a file written by torch2ir convert or torch2ir lower")


def describe(path: str | os.PathLike, *, depth: int | None = None, allow: list[str] | None = None,
             collapse: bool = True) -> str:
    """The summary ``ir2torch show`` prints: header, counts, inputs, parameters and the module tree.

    Args:
        path: an IR or FlatIR JSON file.
        depth: fold the tree below this depth.
        allow: operators of other namespaces to accept (``--allow-op``).
        collapse: write a run of identical blocks once (``0-31 x32``).

    Raises:
        IRError: the file cannot be loaded (see :func:`load_any`).
    """
    source = load_any(path, allow=allow)
    size = Path(path).stat().st_size
    if isinstance(source, FlatIR):
        head = [f"file             {Path(path).name} ({FLAT_FORMAT}, {size} bytes)"]
        return "\n".join(head + _describe_flat(source, depth, collapse))
    head = [f"file             {Path(path).name} ({IR_FORMAT}, {size} bytes)"]
    return "\n".join(head + ir_summary_lines(source, depth, collapse=collapse))


def _describe_flat(flat: FlatIR, depth: int | None, collapse: bool) -> list[str]:
    ops = Counter(n.op_type for n in flat.nodes)
    kinds = Counter(w.kind for w in flat.weights)
    lines = [
        f"model            {flat.meta.get('model', '?')} (torch {flat.meta.get('torch_version', '?')}, "
        f"decomposition {flat.meta.get('decomposition', '?')}, traced on {flat.meta.get('device', '?')})",
        f"ops              {len(flat.nodes)}: {top_counts(ops)}",
        f"weights          {len(flat.weights)} ({top_counts(kinds)}), "
        f"{compact_count(elements([w.to_dict() for w in flat.weights]))} elements",
        f"inputs           {', '.join(f'{m.name}: {tensor_text(m.to_dict())}' for m in flat.graph_inputs) or '-'}",
        f"outputs          {', '.join(f'{m.name}: {tensor_text(m.to_dict())}' for m in flat.graph_outputs) or '-'}",
        "tree (ops run in each module)",
    ]
    tree = flat_hierarchy_graph(flat, depth, collapse=collapse)

    def annotate(node: str) -> str:
        name, *rest = tree.nodes[node]["label"].split("\n")
        return f"{name}  ({', '.join(rest)})"

    return lines + tree_lines(tree, annotate)


# -- diff ----------------------------------------------------------------------------------------------
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


def _comparable_ir(impl_doc: dict[str, Any]) -> dict[str, Any]:
    doc = dict(impl_doc)
    edges = [{**e, "key": f"{e['src']}->{e['dst']}"} for e in doc.get("edges", [])]
    doc["edges"] = {k: {f: v for f, v in e.items() if f != "key"} for k, e in _keyed(edges, "key").items()}
    return doc


def _comparable_flat(flat: FlatIR) -> dict[str, Any]:
    doc = flat.to_dict(value_fn=encode)
    for field in ("nodes", "weights", "graph_inputs", "graph_outputs"):
        doc[field] = _keyed(doc[field], "name")
    return doc


def _short(value: Any, limit: int = 70) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _walk(a: Any, b: Any, path: str, out: list[str]) -> None:
    """Append ``path: a -> b`` for each leaf that differs (dicts by key; lists by position)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            sub = f"{path}.{key}" if path else str(key)
            if key not in b:
                out.append(f"{sub}: {_short(a[key])} -> (absent)")
            elif key not in a:
                out.append(f"{sub}: (absent) -> {_short(b[key])}")
            else:
                _walk(a[key], b[key], sub, out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, f"{path}[{i}]", out)
    elif a != b or type(a) is not type(b):
        out.append(f"{path}: {_short(a)} -> {_short(b)}")


def diff(path_a: str | os.PathLike, path_b: str | os.PathLike, *, allow: list[str] | None = None) -> list[str]:
    """The differences between two IR (or two FlatIR) files, one line each.

    Lines: ``- KEY (type)`` for an implementation only in A, ``+ KEY (type)`` only in B, and
    ``~ KEY: field.path: A -> B`` for each differing attribute, node, edge, state or meta field
    (FlatIR files: ``~ nodes.NAME.field: A -> B``, ...).

    Returns:
        The lines; empty when the files hold equal IRs.

    Raises:
        IRError: a file cannot be loaded.
        CommandError: one file is an IR and the other a FlatIR.
    """
    a, b = load_any(path_a, allow=allow), load_any(path_b, allow=allow)
    if type(a) is not type(b):
        raise CommandError(f"cannot compare a {type(a).__name__} ({os.fspath(path_a)}) with a "
                           f"{type(b).__name__} ({os.fspath(path_b)})", hint="diff two files of the same format")
    out: list[str] = []
    if isinstance(a, FlatIR):
        changes: list[str] = []
        _walk(_comparable_flat(a), _comparable_flat(b), "", changes)
        return [f"~ {c}" for c in changes]
    assert isinstance(b, IR)
    out += [f"- {k} ({a[k].type})" for k in a if k not in b]
    out += [f"+ {k} ({b[k].type})" for k in b if k not in a]
    doc_a = a.to_dict(value_fn=encode, edge_list=True)
    doc_b = b.to_dict(value_fn=encode, edge_list=True)
    for key in (k for k in a if k in b):
        changes = []
        _walk(_comparable_ir(doc_a[key]), _comparable_ir(doc_b[key]), "", changes)
        out += [f"~ {key}: {c}" for c in changes]
    return out
