"""FlatIR files: the plain document of a :class:`~common.flat.FlatIR` and its tensors, saved and loaded as one unit,
and telling a FlatIR file from an IR file by its first key (:func:`document_format`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .flat_schema import FLAT_FORMAT, FLAT_FORMAT_VERSION
from .json_files import check_header, dumps, loads_json, node_budget, read_text
from .required_ops import check_required_ops
from .safety import DEFAULT_ALLOWLIST, Allowlist
from .schema import DEFAULT_MAX_NODES
from .tensor_files import load_with_tensors, save_with_tensors
from .values import decode, encode


# -- files ---------------------------------------------------------------------------------
def flat_to_document(flat: Any, tensors: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of ``flat`` (plain data, values encoded); ``tensors`` is the entry naming its tensors file."""
    doc: dict[str, Any] = {"format": FLAT_FORMAT, "format_version": FLAT_FORMAT_VERSION}
    doc.update(flat.to_dict(value_fn=encode))
    ops = DEFAULT_ALLOWLIST.required(node.op_type for node in flat.nodes)
    if ops:  # operators a loader must opt in to (or have executors for), named up front
        doc["ops"] = ops
    if tensors is not None:
        doc["tensors"] = dict(tensors)
    return doc


def save_flat(flat: Any, path: str | os.PathLike) -> Path:
    """Save ``flat`` to ``path`` (see :meth:`common.flat.FlatIR.save`); the text is built before any file is touched.

    The JSON and its tensors file are written as one unit by :func:`common.tensor_files.save_with_tensors`.

    Raises:
        IRSerializationError: a value cannot be written, or a tensor is on the meta device.
        OSError: the files cannot be written.
    """
    return save_with_tensors(path, flat.tensors, lambda entry: dumps(flat_to_document(flat, entry)),
                             meta_hint="drop it from flat.tensors; pass its value in the state dict instead")


def flat_from_document(cls: type, doc: Any, *, source: str = "document", allowlist: Allowlist | None = None,
                       extra_ops: frozenset[str] = frozenset(), max_nodes: int | None = DEFAULT_MAX_NODES) -> Any:
    """A FlatIR from a parsed JSON document (header checked, recorded ``ops`` allowed, values decoded; not yet
    validated; ``max_nodes``: its node budget)."""
    check_header(doc, FLAT_FORMAT, FLAT_FORMAT_VERSION, source)
    check_required_ops({"ops": [o for o in doc.get("ops", []) if o not in extra_ops]}
                       if isinstance(doc.get("ops", []), list) else doc, allowlist, source)
    body = {k: v for k, v in doc.items() if k not in ("format", "format_version", "tensors", "ops")}
    return cls.from_dict(body, value_fn=decode, max_nodes=max_nodes)


def _tensor_records(flat: Any) -> dict[str, tuple[str, list[Any]]]:
    """``{state key: (dtype name, shape)}`` of the FlatIR's weights: what its tensors file may hold."""
    return {flat.weight_name_mapping.get(w.name, w.name): (w.dtype, list(w.shape)) for w in flat.weights}


def load_flat(cls: type, path: str | os.PathLike, allowlist: Allowlist | None, extra_ops: frozenset[str],
              max_nodes: int | None = DEFAULT_MAX_NODES) -> Any:
    """Load and validate a FlatIR JSON file and its tensors file, if any.

    The pair is read and checked by :func:`common.tensor_files.load_with_tensors`; ``max_nodes`` is the file's node
    budget (also bounding the JSON objects parsed, :func:`common.json_files.loads_json`).

    Raises:
        IRFormatError: the file or its tensors file is missing, malformed, or they do not belong together.
        IRError: the FlatIR is invalid.
    """
    with node_budget(max_nodes):
        flat, tensors = load_with_tensors(path, lambda doc, source: flat_from_document(
            cls, doc, source=source, allowlist=allowlist, extra_ops=extra_ops, max_nodes=max_nodes),
            _tensor_records)
    flat.tensors = tensors
    return flat.validate(allowlist=allowlist, extra_ops=extra_ops)


#: The start of a document as ``save`` writes it: its ``format`` first, a plain name.
_HEADER = re.compile(rb'\A\s*\{\s*"format"\s*:\s*"([A-Za-z0-9_.]{1,64})"\s*[,}]')


def document_format(path: str | os.PathLike) -> str | None:
    """The ``format`` named by a JSON file's header (``"torch2ir.ir"``, ``"torch2ir.flat"``), or None.

    Read from the file's first bytes when it starts as ``save`` writes it (``{"format": "<name>", ...``: a
    100 MB document is not parsed twice); otherwise from the whole document, parsed within the default node budget
    (:data:`~common.schema.DEFAULT_MAX_NODES`). The loader the caller picks parses
    and checks the whole file either way (a malformed or two-headed document is refused there).
    """
    text = read_text(path)
    head = _HEADER.match(text[:4096])
    if head is not None:
        return head.group(1).decode("ascii")
    doc = loads_json(text, source=os.fspath(path), max_nodes=DEFAULT_MAX_NODES)  # the loaders' default budget
    return doc.get("format") if isinstance(doc, Mapping) else None


__all__ = ["document_format", "flat_from_document", "flat_to_document", "load_flat", "save_flat"]
