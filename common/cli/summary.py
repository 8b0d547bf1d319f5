"""Text for ``ir2torch show`` (what a file holds) and ``ir2torch diff`` (how two files differ).

Both work on either kind of file, told apart by the JSON header's ``format``: the module-level IR
(``torch2ir.ir``) or the ATen-level FlatIR (``torch2ir.flat``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections import Counter
from pathlib import Path

from ..compare import differences
from ..errors import IRFormatError
from ..flat import FlatIR
from ..flat_files import document_format
from ..flat_schema import FLAT_FORMAT
from ..ir import IR
from ..render.graphs import compact_count, flat_hierarchy_graph
from ..serialize import IR_FORMAT
from ..textview import elements, ir_summary_lines, tensor_text, top_counts, tree_lines
from ..treespec import viewing
from .app import CommandError

__all__ = ["describe", "diff", "load_any"]


def load_any(path: str | os.PathLike, *, allow: list[str] | None = None) -> IR | FlatIR:
    """Load an IR or FlatIR file, whichever its header names (both are validated on load); ``allow``:
    operators of other namespaces to accept (``--allow-op``). A file whose pytree spec names a transformers
    output class is read again after importing transformers' output classes, if transformers is installed;
    one naming a class no installed library registers is read for viewing (:func:`common.treespec.viewing`:
    the class kept as a named placeholder), enough to show, view or diff it, not to rebuild it.

    Raises:
        IRFormatError: the file is missing, not JSON, or not valid for its format.
        CommandError: the header names neither format.
    """
    try:
        return _load(path, allow)
    except IRFormatError as first:
        exc = first
    if "'transformers." in exc.message and _import_transformers():
        try:
            return _load(path, allow)  # once more, with transformers' output classes registered
        except IRFormatError as again:
            exc = again
    if "names type" not in exc.message:
        raise exc
    with viewing():  # an output class no installed library registers: read it as a named placeholder
        return _load(path, allow)


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
    return differences(a, b)
