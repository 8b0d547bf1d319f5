"""A JSON document and its content-addressed ``.safetensors`` file, saved and loaded as one unit (IR and FlatIR
files): atomic writes under a per-path lock, cleanup after interrupted saves, and a tensors reader that checks
names, dtypes, shapes and extents against the document before reading a byte of data."""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from .atomic_files import (
    NotRegularFileError,
    atomic_path,
    clean_stale,
    open_regular,
    save_lock,
    sidecar_name,
    sync_folder,
    try_save_lock,
    write_bytes_atomic,
    write_text_atomic,
)
from .collector import collector_paused
from .errors import IRError, IRFormatError, IRSerializationError
from .json_files import PathLike, loads_json, read_text


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


def load_with_tensors(path: PathLike, build: Callable[[Any, str], T],
                      records: Callable[[T], Mapping[str, tuple[str, list[Any]]]] | None = None,
                      ) -> tuple[T, dict[str, Any]]:
    """Read the JSON at ``path`` and the tensors file it names, and ``build(document, source)`` the object.

    The tensors file must be a regular file (not a link) beside ``path``, named by a plain file name.
    It is checked before its data is read: its 8-byte header length and its safetensors header
    (bounded) are read, and the file's size must be 8 + header length + the data the header
    declares, its keys must be the JSON's, and the dtype and shape of each must be those
    ``records(obj)`` gives (``{key: (dtype name, shape)}``, a string dimension matching any size;
    a key it does not give is refused). Then the file is read in chunks while its sha256 is
    computed, which must be the recorded one (files without one, written before content
    addressing, are checked by their header only). It is read right after the JSON (a concurrent
    save removes it only after replacing the JSON); if reading it fails and the JSON was replaced
    meanwhile, the load starts again from the new JSON. Errors of the document itself come before
    those of the tensors file. After a successful load, what an interrupted save left beside
    ``path`` is removed if no save is under way (:func:`clean_after_load`).

    Raises:
        IRFormatError: the JSON or the tensors file is missing, not a regular file, malformed, or
            they do not belong together; plus whatever ``build`` raises.
    """
    with collector_paused(long_lived=True):  # decoding and building allocate much and free nothing; all is kept
        return _load_with_tensors(path, build, records)


def _load_with_tensors(path: PathLike, build: Callable[[Any, str], T],
                       records: Callable[[T], Mapping[str, tuple[str, list[Any]]]] | None) -> tuple[T, dict[str, Any]]:
    source = os.fspath(path)
    for attempt in range(1, _LOAD_ATTEMPTS + 1):
        identity = _identity(path)
        doc = loads_json(read_text(path), source=source)
        spec = doc.get("tensors") if isinstance(doc, Mapping) else None
        tensors: dict[str, Any] = {}
        failure = None
        with contextlib.ExitStack() as stack:
            opened = None
            if spec is not None:
                try:
                    opened = _open_tensors(Path(path), spec, source, stack)
                except IRFormatError as exc:
                    failure = exc
            obj = build(doc, source)
            if opened is not None:
                try:
                    tensors = _read_tensors(opened, records(obj) if records is not None else None, source)
                except IRFormatError as exc:
                    failure = exc
        if failure is None:
            clean_after_load(path, read=(identity, doc))
            return obj, tensors
        if attempt == _LOAD_ATTEMPTS or _identity(path) == identity:
            raise failure
    raise AssertionError("unreachable")  # pragma: no cover


def clean_after_load(path: PathLike, *, read: tuple[Any, Any] | None = None) -> list[str]:
    """Remove temp files and stale tensors files of ``path`` if no save of it is under way; return their names.

    Only when the save lock file exists (a save was interrupted here: one that completed removed it) and can be
    taken at once: a save in progress holds it, so nothing it is writing is touched; the lock file goes too. The
    JSON is read again under the lock to learn which tensors file it names now, unless ``read`` is ``(identity,
    document)`` of a read of it whose identity (:func:`_identity`: device, inode, times, size, taken before that
    read) is still the file's: a save
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
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size


#: safetensors dtype codes: (bytes per element, torch dtype name)
_ST_DTYPES = {
    "BOOL": (1, "bool"), "U8": (1, "uint8"), "I8": (1, "int8"), "F8_E4M3": (1, "float8_e4m3fn"),
    "F8_E4M3FNUZ": (1, "float8_e4m3fnuz"), "F8_E5M2": (1, "float8_e5m2"), "F8_E5M2FNUZ": (1, "float8_e5m2fnuz"),
    "I16": (2, "int16"), "U16": (2, "uint16"), "F16": (2, "float16"), "BF16": (2, "bfloat16"),
    "I32": (4, "int32"), "U32": (4, "uint32"), "F32": (4, "float32"), "C64": (8, "complex64"),
    "I64": (8, "int64"), "U64": (8, "uint64"), "F64": (8, "float64"),
}  # fmt: skip
#: largest safetensors header read (the safetensors library's own limit)
_MAX_HEADER = 100_000_000
#: the tensors file is read (and hashed) this many bytes at a time
_CHUNK = 1 << 20
#: longest file name (bytes, UTF-8) a document may name; most file systems allow no more
_MAX_NAME = 255


def check_file_name(name: Any, key: str, source: str) -> str:
    """``name`` if it is a plain file name a document may name beside itself, else :class:`IRFormatError`.

    Refused: a non-string, an empty name, ``.`` / ``..``, a path separator (``/``, ``\\``), a NUL or other
    control character, a name that is not valid UTF-8 text, or a name longer than 255 bytes.
    """
    hint = "the JSON must name the file written beside it by save(), e.g. model.ir.tensors.<hex>.safetensors"
    if not isinstance(name, str):
        raise IRFormatError(f"{source}: {key} must be a file name (a string), got {type(name).__name__}", key=key,
                            hint=hint)
    shown = repr(name[:80]) + ("..." if len(name) > 80 else "")
    if name in ("", ".", "..") or "/" in name or "\\" in name or (os.altsep and os.altsep in name):
        raise IRFormatError(f"{source}: {key} {shown} must be a plain file name beside the JSON (no folder, "
                            "not '.' or '..')", key=key, hint=hint)
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in name):
        raise IRFormatError(f"{source}: {key} {shown} holds a NUL or other control character", key=key, hint=hint)
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise IRFormatError(f"{source}: {key} {shown} is not valid text (a lone surrogate)", key=key,
                            hint=hint) from None
    if size > _MAX_NAME:
        raise IRFormatError(f"{source}: {key} is {size} bytes long, more than {_MAX_NAME}", key=key, hint=hint)
    return name


class _Opened:
    """A tensors file opened and checked up to its data: its header, parsed, and the size it must have."""

    def __init__(self, fh: BinaryIO, file: Path, digest: str | None, header: dict[str, Any], size: int,
                 fix: str) -> None:
        self.fh, self.file, self.name, self.digest = fh, file, file.name, digest
        self.header, self.size, self.fix = header, size, fix


def _open_tensors(path: Path, spec: Any, source: str, stack: contextlib.ExitStack) -> _Opened:
    """Check the ``tensors`` entry, open the file it names and check its header and size; no data is read."""
    if not (isinstance(spec, Mapping) and isinstance(spec.get("file"), str) and isinstance(spec.get("keys"), list)
            and all(isinstance(k, str) for k in spec["keys"]) and set(spec) <= _ENTRY_KEYS):
        raise IRFormatError(f"{source}: 'tensors' must be {{'file': name, 'sha256': hex, 'keys': [str, ...]}}",
                            key="tensors")
    name, digest = check_file_name(spec["file"], "tensors.file", source), spec.get("sha256")
    if digest is not None and not (isinstance(digest, str) and _HEX64.fullmatch(digest)):
        raise IRFormatError(f"{source}: tensors sha256 {digest!r} is not 64 lowercase hex digits", key="tensors.sha256")
    file = path.with_name(name)
    fix = f"put back the {name} written together with this JSON, or save the IR again"
    try:
        fh = stack.enter_context(open_regular(file, follow_symlinks=False))
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(8) if size >= 8 else b""
    except (FileNotFoundError, NotADirectoryError):
        raise IRFormatError(f"{source}: tensors file {name!r} is missing", key="tensors.file",
                            hint="keep the .safetensors file written by save() beside the JSON") from None
    except NotRegularFileError as exc:
        link = "replace the link by a copy of the file it points to; " if exc.kind == "symbolic link" else ""
        raise IRFormatError(f"{source}: tensors file {os.fspath(file)} is a {exc.kind}, not a regular file; "
                            "it is not read", key="tensors.file", hint=link + fix) from None
    except (OSError, ValueError) as exc:
        raise IRFormatError(f"{source}: tensors file {name!r} is unreadable: {getattr(exc, 'strerror', None) or exc}",
                            key="tensors.file", hint=fix) from None

    def bad(why: str, key: str = "tensors.file") -> IRFormatError:
        return IRFormatError(f"{source}: tensors file {name!r} ({size} bytes) {why}; it is not read", key=key, hint=fix)

    if len(head) < 8:
        raise bad("is too short for a safetensors file (no 8-byte header length)")
    length = int.from_bytes(head, "little")
    keys = spec["keys"]
    budget = min(_MAX_HEADER, 65536 + sum(256 + 6 * len(k.encode("utf-8", "replace")) for k in keys))
    if length > size - 8 or length > budget:
        raise bad(f"declares a header of {length} bytes, more than "
                  + ("the file holds" if length > size - 8 else f"{budget} bytes for its {len(keys)} keys"))
    try:
        raw = fh.read(length)
    except OSError as exc:
        raise bad(f"is unreadable: {exc.strerror or exc}") from None
    try:
        header = loads_json(raw, source="its header")
    except IRFormatError as exc:
        raise bad(f"has a malformed safetensors header: {exc.message}") from None
    extent = _data_extent(header, bad)
    if size != 8 + length + extent:
        raise bad(f"should be {8 + length + extent} bytes: 8 + a {length}-byte header + the {extent} bytes of data "
                  "its header declares")
    found = sorted(k for k in header if k != "__metadata__")
    if found != sorted(keys):
        raise bad(f"holds {found[:20]}, the JSON records {sorted(keys)[:20]}", key="tensors.keys")
    return _Opened(fh, file, digest, header, size, fix)


def _data_extent(header: Any, bad: Callable[..., IRFormatError]) -> int:
    """The bytes of data a safetensors header declares, its entries checked (contiguous, sized by dtype and shape)."""
    if not isinstance(header, dict):
        raise bad("has a safetensors header that is not a JSON object")
    spans = []
    for key, entry in header.items():
        if key == "__metadata__":
            if not (isinstance(entry, dict) and all(isinstance(v, str) for v in entry.values())):
                raise bad("has a safetensors __metadata__ that is not an object of strings")
            continue
        ok = isinstance(entry, dict) and set(entry) == {"dtype", "shape", "data_offsets"}
        ok = ok and entry["dtype"] in _ST_DTYPES and isinstance(entry["shape"], list)
        ok = ok and all(type(d) is int and d >= 0 for d in entry["shape"])
        offsets = entry.get("data_offsets") if ok else None
        if not (ok and isinstance(offsets, list) and len(offsets) == 2 and all(type(o) is int for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise bad(f"has a malformed safetensors entry for {str(key)[:80]!r}")
        if offsets[1] - offsets[0] != math.prod(entry["shape"]) * _ST_DTYPES[entry["dtype"]][0]:
            raise bad(f"declares {offsets[1] - offsets[0]} bytes for {str(key)[:80]!r}, a {entry['dtype']} "
                      f"tensor of shape {entry['shape']}")
        spans.append((offsets[0], offsets[1], key))
    end = 0
    for begin, stop, key in sorted(spans):
        if begin != end:
            raise bad(f"has a gap or overlap in its data at {str(key)[:80]!r}")
        end = stop
    return end


def _read_tensors(opened: _Opened, records: Mapping[str, tuple[str, list[Any]]] | None,
                  source: str) -> dict[str, Any]:
    """Check the header's dtypes and shapes against ``records``, then read and hash the data in chunks and load it."""
    name, fix = opened.name, opened.fix
    if records is not None:
        problems = []
        for key in sorted(k for k in opened.header if k != "__metadata__"):
            entry, want = opened.header[key], records.get(key)
            dtype, shape = _ST_DTYPES[entry["dtype"]][1], entry["shape"]
            if want is None:
                problems.append((key, "no recorded state entry has this path"))
            elif len(shape) != len(want[1]) or any(isinstance(w, int) and w != n for w, n in zip(want[1], shape)):
                problems.append((key, f"expected shape {tuple(want[1])}, found {tuple(shape)} in the file"))
            elif dtype != want[0]:
                problems.append((key, f"expected dtype torch.{want[0]}, found torch.{dtype} in the file"))
        if problems:
            listed = "\n  ".join(f"{key}: {why}" for key, why in problems[:20])
            raise IRFormatError(f"{source}: tensors file {name!r} does not fit the JSON's records; it is not read "
                                f"({len(problems)} problems):\n  {listed}", key=problems[0][0], hint=fix)
    hasher, chunks, left = hashlib.sha256(), [], opened.size
    try:
        opened.fh.seek(0)
        while left > 0:
            chunk = opened.fh.read(min(_CHUNK, left))
            if not chunk:
                break
            hasher.update(chunk)
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise IRFormatError(f"{source}: tensors file {name!r} is unreadable: {exc.strerror or exc}",
                            key="tensors.file", hint=fix) from None
    if left or opened.fh.read(1):
        raise IRFormatError(f"{source}: tensors file {name!r} changed size while it was read", key="tensors.file",
                            hint=fix)
    if opened.digest is not None and (actual := hasher.hexdigest()) != opened.digest:
        raise IRFormatError(f"{source}: tensors file {os.fspath(opened.file)} does not belong to this JSON: its "
                            f"sha256 is {actual}, the JSON records {opened.digest}", key="tensors.sha256", hint=fix)
    data = b"".join(chunks)
    del chunks
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        tensors = load(data)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise IRFormatError(f"{source}: tensors file {name!r} is unreadable: {exc}", key="tensors.file",
                            hint=fix) from None
    return dict(tensors)
