"""Versioned, deterministic, safe JSON files for IRs.

File layout::

    {"format": "torch2ir.ir", "format_version": 1, "implementations": {<key>: <plain dict>},
     "tensors": {"file": "<stem>.tensors.<sha256[:16]>.safetensors", "sha256": <hex>, "keys": [...]}}

- Values are encoded by :mod:`common.values` (tuples, dtypes, infinities are tagged);
  tensors are never inlined.
- The same IR gives the same bytes: keys keep the IR's order, numbers and strings have
  one spelling, no timestamps or versions of the writing machine go in.
- Writes go to a temporary file in the same folder, then ``os.replace``: a crash never
  leaves a half-written file behind. The JSON and its tensors file are one unit: the tensors
  file is content-addressed and its sha256 recorded in the JSON, saves to one path are
  serialized by a lock and clean up after interrupted ones (:mod:`common.atomic_files`,
  :mod:`common.tensor_files`; shared with FlatIR files).
- Only regular files are read: a FIFO or device is refused before it is opened.
- Loading parses plain JSON (no NaN literals, no duplicate keys), refuses unknown format
  versions, decodes values through fixed tables and validates the IR, including the
  allow-list of function names, before returning it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .bodies import share
from .errors import IRFormatError
from .ir import IR
from .json_files import PathLike, check_header, dumps, node_budget
from .required_ops import check_required_ops, function_names
from .safety import DEFAULT_ALLOWLIST, Allowlist
from .schema import DEFAULT_MAX_NODES
from .tensor_files import load_with_tensors, save_with_tensors
from .values import decode, encode

IR_FORMAT = "torch2ir.ir"
#: Version written by this library; files of versions 1..FORMAT_VERSION are read.
FORMAT_VERSION = 2
#: Version of a file without shared bodies: it reads as before in a library that knows version 1 only.
PLAIN_FORMAT_VERSION = 1


def ir_to_document(ir: IR, tensors: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of ``ir`` (plain data, values encoded); ``tensors`` is the entry naming its tensors file."""
    impls, bodies = share(ir.to_dict(value_fn=encode, edge_list=True))
    doc: dict[str, Any] = {
        "format": IR_FORMAT,
        "format_version": FORMAT_VERSION if bodies else PLAIN_FORMAT_VERSION,
        "implementations": impls,
    }
    if bodies:  # alike instances stored once (common.bodies): a reader must know version 2
        doc["bodies"] = bodies
    ops = DEFAULT_ALLOWLIST.required(function_names(ir))
    if ops:  # operators a loader must opt in to: named up front, so a load can list them all at once
        doc["ops"] = ops
    if tensors is not None:
        doc["tensors"] = dict(tensors)
    return doc


def ir_from_document(doc: Any, *, source: str = "document", validate: bool = True,
                     allowlist: Allowlist | None = None, max_nodes: int | None = DEFAULT_MAX_NODES) -> IR:
    """Build (and by default validate, against ``allowlist``) an IR from a parsed JSON document
    (``max_nodes``: its node budget, see :meth:`IR.from_dict <common.ir.IR.from_dict>`)."""
    check_header(doc, IR_FORMAT, FORMAT_VERSION, source)
    impls = doc.get("implementations")
    if not isinstance(impls, Mapping):
        raise IRFormatError(f"{source} has no 'implementations' object", key=source)
    extra = set(doc) - {"format", "format_version", "implementations", "tensors", "ops", "bodies"}
    if extra:
        raise IRFormatError(f"{source} has unknown top-level keys {sorted(extra)}", key=source)
    bodies = doc.get("bodies")
    if bodies is not None and doc["format_version"] < 2:
        raise IRFormatError(f"{source} has shared 'bodies' but format_version {doc['format_version']}", key=source,
                            hint="shared bodies need format_version 2")
    check_required_ops(doc, allowlist, source)
    ir = IR.from_dict(impls, value_fn=decode, max_nodes=max_nodes, bodies=bodies)
    if validate:
        ir.validate(allowlist=allowlist)
    return ir


def save_ir(ir: IR, path: PathLike) -> Path:
    """Save ``ir`` to ``path`` (atomic, deterministic); the text is built before any file is touched.

    Tensors held by the IR (``ir.tensors``) go to a content-addressed ``.safetensors`` file beside
    the JSON, written first; see :func:`save_with_tensors`.

    Raises:
        IRSerializationError: a value cannot be written, or a tensor is on the meta device.
        OSError: the files cannot be written (nothing half-written is left in place).
    """
    return save_with_tensors(path, ir.tensors, lambda entry: dumps(ir_to_document(ir, entry)),
                             meta_hint="drop it from ir.tensors or convert a model with values")


def load_ir(path: PathLike, *, validate: bool = True, allowlist: Allowlist | None = None,
            max_nodes: int | None = DEFAULT_MAX_NODES) -> IR:
    """Load an IR JSON file written by :func:`save_ir` (and its tensors file, if any).

    ``max_nodes``: the file's node budget (:meth:`IR.from_dict <common.ir.IR.from_dict>`), also bounding the
    JSON objects parsed (:func:`loads_json`); ``None`` disables it.

    Raises:
        IRFormatError: the file, or its tensors file, is missing, malformed, or they do not belong together;
            or the file is over its node budget.
        UnsafeTargetError: the file calls operators ``allowlist`` (default: the default allow-list) does not
            allow; all of them are listed, with the ``allow=`` to pass.
        IRError: the IR is invalid (with ``validate``).
    """
    with node_budget(max_nodes):
        ir, tensors = load_with_tensors(path, lambda doc, source: ir_from_document(
            doc, source=source, validate=validate, allowlist=allowlist, max_nodes=max_nodes), tensor_records)
    ir.tensors = tensors
    return ir


def tensor_records(ir: IR) -> dict[str, tuple[str, list[Any]]]:
    """``{state path: (dtype name, shape)}`` of the IR's state records: what its tensors file may hold."""
    out = {}
    for key, impl in ir.items():
        prefix = "" if key == "root" else key + "."
        for name, rec in impl.state.items():
            if isinstance(rec.get("shape"), list) and rec.get("dtype") is not None:
                out[prefix + name] = (str(rec["dtype"]).removeprefix("torch."), rec["shape"])
    return out

