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
  :func:`save_with_tensors`, :func:`load_with_tensors`; shared with FlatIR files).
- Only regular files are read: a FIFO or device is refused before it is opened.
- Loading parses plain JSON (no NaN literals, no duplicate keys), refuses unknown format
  versions, decodes values through fixed tables and validates the IR, including the
  allow-list of function names, before returning it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

from .atomic_files import (
    NotRegularFileError,
    atomic_path,
    clean_stale,
    read_regular,
    save_lock,
    sidecar_name,
    sync_folder,
    try_save_lock,
    write_bytes_atomic,
    write_text_atomic,
)
from .collector import collector_paused
from .errors import IRError, IRFormatError, IRSerializationError, UnsupportedFormatVersionError
from .ir import IR
from .safety import DEFAULT_ALLOWLIST, Allowlist, check_required_ops, function_names
from .schema import DEFAULT_MAX_NODES, JSON_OBJECTS_PER_NODE, budget_error, check_max_nodes
from .values import decode, encode

IR_FORMAT = "torch2ir.ir"
#: Version written by this library; files of versions 1..FORMAT_VERSION are read.
FORMAT_VERSION = 1

PathLike = str | os.PathLike


def dumps(document: Any) -> str:
    """Deterministic JSON text (UTF-8 friendly, no NaN, one node per line group)."""
    return json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):  # some key came twice: name the first one that did
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise IRFormatError(f"duplicate key {key!r} in JSON object", hint="each key may appear once")
            seen.add(key)
    return out


def _bad_constant(name: str) -> Any:
    raise IRFormatError(f"JSON constant {name} is not allowed", hint='write {"$float": "inf"} / {"$float": "nan"}')


#: The node budget of the loads under way in this context (:func:`node_budget`), read by :func:`loads_json`.
_MAX_NODES: ContextVar[int | None] = ContextVar("torch2ir_max_nodes", default=None)


@contextmanager
def node_budget(max_nodes: int | None) -> Iterator[None]:
    """Within the block, :func:`loads_json` parses at most ``JSON_OBJECTS_PER_NODE * max_nodes`` objects
    (``None``: no limit)."""
    check_max_nodes(max_nodes)
    token = _MAX_NODES.set(max_nodes)
    try:
        yield
    finally:
        _MAX_NODES.reset(token)


def _counting_hook(max_nodes: int, source: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """:func:`_no_duplicates` that also stops the parser past the objects ``max_nodes`` allows."""
    limit = JSON_OBJECTS_PER_NODE * max_nodes
    count = 0

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal count
        count += 1
        if count > limit:
            raise budget_error("JSON objects", count, limit, max_nodes, key=source)
        out = dict(pairs)
        return out if len(out) == len(pairs) else _no_duplicates(pairs)

    return hook


def loads_json(text: str | bytes, *, source: str = "document", max_nodes: int | None = None) -> Any:
    """Parse strict JSON, turning every parser failure into :class:`IRFormatError`.

    ``max_nodes`` (default: the :func:`node_budget` in force, else none): parsing stops with an
    :class:`IRFormatError` past ``JSON_OBJECTS_PER_NODE * max_nodes`` objects, before the document is all built.
    """
    max_nodes = max_nodes if max_nodes is not None else _MAX_NODES.get()
    hook = _no_duplicates if max_nodes is None else _counting_hook(max_nodes, source)
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, object_pairs_hook=hook, parse_constant=_bad_constant)
    except IRError:
        raise
    except UnicodeDecodeError as exc:
        raise IRFormatError(f"{source} is not UTF-8 text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise IRFormatError(f"{source} is not valid JSON: {exc}", hint="check the file is an IR JSON file") from None
    except (ValueError, RecursionError) as exc:  # e.g. integers too long to parse, nesting too deep
        raise IRFormatError(f"{source} cannot be parsed: {exc}") from None


def read_text(path: PathLike) -> bytes:
    """Read a JSON file's bytes, with a clear error for a missing, unreadable or special file.

    Symbolic links are followed; the target must be a regular file (a FIFO or a device is refused
    before it is opened, so it never blocks).

    Raises:
        IRFormatError: the file is missing, not a regular file, or unreadable.
    """
    name = os.fspath(path)
    try:
        return read_regular(path)
    except (FileNotFoundError, NotADirectoryError):
        raise IRFormatError(f"no such file: {name}", key=name) from None
    except NotRegularFileError as exc:
        raise IRFormatError(f"{exc}; cannot read it as a document", key=name,
                            hint="give the path of the JSON file written by save()") from None
    except OSError as exc:
        raise IRFormatError(f"cannot read {name}: {exc.strerror or exc}", key=name) from None


def check_header(doc: Any, expected_format: str, supported: int, source: str) -> None:
    """Check the ``format`` / ``format_version`` header of a loaded document."""
    if not isinstance(doc, Mapping):
        raise IRFormatError(f"{source} is a JSON {type(doc).__name__}, not an object", key=source)
    fmt = doc.get("format")
    if fmt != expected_format:
        raise IRFormatError(f"{source} has format {fmt!r}, expected {expected_format!r}", key=source,
                            hint="is this the right kind of IR file?")
    version = doc.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise IRFormatError(f"{source} has invalid format_version {version!r}", key=source)
    if version > supported:
        raise UnsupportedFormatVersionError(
            f"{source} has format_version {version}; this library reads up to {supported}",
            key=source,
            hint="upgrade torch2ir/ir2torch to read it",
        )


def ir_to_document(ir: IR, tensors: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON document of ``ir`` (plain data, values encoded); ``tensors`` is the entry naming its tensors file."""
    doc: dict[str, Any] = {
        "format": IR_FORMAT,
        "format_version": FORMAT_VERSION,
        "implementations": ir.to_dict(value_fn=encode, edge_list=True),
    }
    ops = DEFAULT_ALLOWLIST.required(function_names(ir))
    if ops:  # operators a loader must opt in to: named up front, so a load can list them all at once
        doc["ops"] = ops
    if tensors is not None:
        doc["tensors"] = dict(tensors)
    return doc


def tensors_path(path: PathLike, sha256: str | None = None) -> Path:
    """The tensors file of the JSON at ``path`` whose bytes have this ``sha256``.

    ``model.ir.json`` -> ``model.ir.tensors.<sha256[:16]>.safetensors``; without ``sha256``, the
    name format_version 1 files used before content addressing: ``model.ir.tensors.safetensors``.
    """
    return Path(path).with_name(sidecar_name(path, sha256))


def write_tensors_atomic(path: PathLike, tensors: Mapping[str, Any], metadata: dict[str, str] | None = None) -> Path:
    """Save tensors to a .safetensors file through a temporary file, ``fsync`` and an atomic rename."""
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, tmp, metadata=metadata)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
    return Path(path)


def ir_from_document(doc: Any, *, source: str = "document", validate: bool = True,
                     allowlist: Allowlist | None = None, max_nodes: int | None = DEFAULT_MAX_NODES) -> IR:
    """Build (and by default validate, against ``allowlist``) an IR from a parsed JSON document
    (``max_nodes``: its node budget, see :meth:`IR.from_dict <common.ir.IR.from_dict>`)."""
    check_header(doc, IR_FORMAT, FORMAT_VERSION, source)
    impls = doc.get("implementations")
    if not isinstance(impls, Mapping):
        raise IRFormatError(f"{source} has no 'implementations' object", key=source)
    extra = set(doc) - {"format", "format_version", "implementations", "tensors", "ops"}
    if extra:
        raise IRFormatError(f"{source} has unknown top-level keys {sorted(extra)}", key=source)
    check_required_ops(doc, allowlist, source)
    ir = IR.from_dict(impls, value_fn=decode, max_nodes=max_nodes)
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
            doc, source=source, validate=validate, allowlist=allowlist, max_nodes=max_nodes))
    ir.tensors = tensors
    return ir


# -- the JSON and its tensors file, one unit on disk -------------------------------------------
#: a load retries this often when a concurrent save replaced the JSON between its reads
_LOAD_ATTEMPTS = 3
_ENTRY_KEYS = {"file", "sha256", "keys"}
_HEX64 = re.compile(r"[0-9a-f]{64}")
T = TypeVar("T")


def save_with_tensors(path: PathLike, tensors: Mapping[str, Any], text_for: Callable[[dict[str, Any] | None], str],
                      *, meta_hint: str) -> Path:
    """Save a JSON document and its tensors file at ``path`` as one unit (shared by IR and FlatIR).

    ``text_for(entry)`` gives the JSON text, where ``entry`` is the document's ``tensors`` entry
    (``{"file", "sha256", "keys"}``, or None without tensors). The tensors' ``.safetensors`` bytes and
    the text are built before any file is touched. Then, under the lock of ``path``: the tensors
    file ``<stem>.tensors.<sha256[:16]>.safetensors`` is written, then the JSON (each atomically),
    then stale tensors files of the stem and temporary files left by interrupted saves are removed.
    Whatever the moment a save is killed, the JSON on disk names a tensors file with its own bytes.

    Raises:
        IRSerializationError: a tensor is on the meta device or cannot be saved, or the text cannot be built.
        OSError: the files cannot be written.
    """
    path = Path(path)
    data = _tensor_bytes(tensors, meta_hint) if tensors else None
    entry = None
    if data is not None:
        digest = hashlib.sha256(data).hexdigest()
        entry = {"file": sidecar_name(path, digest), "sha256": digest, "keys": sorted(tensors)}
    text = text_for(entry)
    with save_lock(path):
        if entry is not None:
            write_bytes_atomic(path.with_name(entry["file"]), data)
            sync_folder(path)  # the tensors file is on disk before the JSON that names it
        write_text_atomic(path, text)
        sync_folder(path)
        clean_stale(path, keep=entry["file"] if entry else None)
    return path


def _tensor_bytes(tensors: Mapping[str, Any], meta_hint: str) -> bytes:
    from safetensors.torch import save

    for key, value in tensors.items():
        if value.is_meta:
            raise IRSerializationError(f"tensor {key!r} is on the meta device and has no value to save",
                                       key=key, hint=meta_hint)
    try:
        return save({k: v.detach().contiguous().cpu() for k, v in tensors.items()})
    except (RuntimeError, ValueError) as exc:  # sparse tensors, tensors sharing memory
        raise IRSerializationError(f"tensors cannot be saved: {str(exc).strip()}", key="tensors",
                                   hint="save dense tensors that do not share memory (.to_dense(), .clone())") from None


def load_with_tensors(path: PathLike, build: Callable[[Any, str], T]) -> tuple[T, dict[str, Any]]:
    """Read the JSON at ``path`` and the tensors file it names, and ``build(document, source)`` the object.

    The tensors file must be a regular file (not a link) beside ``path``, with the recorded sha256
    (files without one, written before content addressing, are checked by their keys only) and
    exactly the recorded keys. It is read right after the JSON (a concurrent save removes it only
    after replacing the JSON); if reading it fails and the JSON was replaced meanwhile, the load
    starts again from the new JSON. Errors of the document itself come before those of the
    tensors file. After a successful load, what an interrupted save left beside ``path`` is
    removed if no save is under way (:func:`clean_after_load`).

    Raises:
        IRFormatError: the JSON or the tensors file is missing, not a regular file, malformed, or
            they do not belong together; plus whatever ``build`` raises.
    """
    with collector_paused():  # decoding and building allocate much and free nothing (see common.collector)
        return _load_with_tensors(path, build)


def _load_with_tensors(path: PathLike, build: Callable[[Any, str], T]) -> tuple[T, dict[str, Any]]:
    source = os.fspath(path)
    for attempt in range(1, _LOAD_ATTEMPTS + 1):
        identity = _identity(path)
        doc = loads_json(read_text(path), source=source)
        spec = doc.get("tensors") if isinstance(doc, Mapping) else None
        tensors: dict[str, Any] = {}
        failure = None
        if spec is not None:
            try:
                tensors = _read_tensors(Path(path), spec, source)
            except IRFormatError as exc:
                failure = exc
        obj = build(doc, source)
        if failure is None:
            clean_after_load(path, read=(identity, doc))
            return obj, tensors
        if attempt == _LOAD_ATTEMPTS or _identity(path) == identity:
            raise failure
    raise AssertionError("unreachable")  # pragma: no cover


def clean_after_load(path: PathLike, *, read: tuple[Any, Any] | None = None) -> list[str]:
    """Remove temp files and stale tensors files of ``path`` if no save of it is under way; return their names.

    Only when the save lock file exists (a save ran here) and can be taken at once: a save in progress
    holds it, so nothing it is writing is touched. The JSON is read again under the lock to learn which
    tensors file it names now, unless ``read`` is ``(identity, document)`` of a read of it whose identity
    (:func:`_identity`: device, inode, times, size, taken before that read) is still the file's: a save
    replaces the file (a new inode), so the document read then is the one on disk. A read-only folder, or
    any other obstacle, just skips the cleanup.
    """
    try:
        with try_save_lock(path) as locked:
            if not locked:
                return []
            if read is not None and read[0] is not None and _identity(path) == read[0]:
                doc = read[1]
            else:
                doc = loads_json(read_text(path), source=os.fspath(path))
            spec = doc.get("tensors") if isinstance(doc, Mapping) else None
            keep = spec.get("file") if isinstance(spec, Mapping) and isinstance(spec.get("file"), str) else None
            return clean_stale(path, keep)
    except (OSError, IRError):
        return []


def _identity(path: PathLike) -> tuple[int, ...] | None:
    """What changes when a save replaces the file at ``path`` (even by the same bytes)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size


def _read_tensors(path: Path, spec: Any, source: str) -> dict[str, Any]:
    if not (isinstance(spec, Mapping) and isinstance(spec.get("file"), str) and isinstance(spec.get("keys"), list)
            and all(isinstance(k, str) for k in spec["keys"]) and set(spec) <= _ENTRY_KEYS):
        raise IRFormatError(f"{source}: 'tensors' must be {{'file': name, 'sha256': hex, 'keys': [str, ...]}}",
                            key="tensors")
    name, digest = spec["file"], spec.get("sha256")
    if Path(name).name != name or name in ("", ".", ".."):
        raise IRFormatError(f"{source}: tensors file {name!r} must be a plain file name beside the JSON",
                            key="tensors.file")
    if digest is not None and not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
        raise IRFormatError(f"{source}: tensors sha256 {digest!r} is not 64 lowercase hex digits", key="tensors.sha256")
    file = path.with_name(name)
    fix = f"put back the {name} written together with this JSON, or save the IR again"
    try:
        data = read_regular(file, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        raise IRFormatError(f"{source}: tensors file {name!r} is missing", key="tensors.file",
                            hint="keep the .safetensors file written by save() beside the JSON") from None
    except NotRegularFileError as exc:
        link = "replace the link by a copy of the file it points to; " if exc.kind == "symbolic link" else ""
        raise IRFormatError(f"{source}: tensors file {os.fspath(file)} is a {exc.kind}, not a regular file; "
                            "it is not read", key="tensors.file", hint=link + fix) from None
    except OSError as exc:
        raise IRFormatError(f"{source}: tensors file {name!r} is unreadable: {exc.strerror or exc}",
                            key="tensors.file") from None
    if digest is not None and (actual := hashlib.sha256(data).hexdigest()) != digest:
        raise IRFormatError(f"{source}: tensors file {os.fspath(file)} does not belong to this JSON: its sha256 is "
                            f"{actual}, the JSON records {digest}", key="tensors.sha256", hint=fix)
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        tensors = load(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise IRFormatError(f"{source}: tensors file {name!r} is unreadable: {exc}", key="tensors.file",
                            hint=fix) from None
    if sorted(tensors) != sorted(spec["keys"]):
        raise IRFormatError(f"{source}: tensors file {name!r} holds {sorted(tensors)}, expected {spec['keys']}",
                            key="tensors.keys", hint=fix)
    return dict(tensors)
