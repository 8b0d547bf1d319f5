"""Versioned, deterministic, safe JSON files for IRs.

File layout::

    {"format": "torch2ir.ir", "format_version": 1, "implementations": {<key>: <plain dict>}}

- Values are encoded by :mod:`common.values` (tuples, dtypes, infinities are tagged);
  tensors are never inlined.
- The same IR gives the same bytes: keys keep the IR's order, numbers and strings have
  one spelling, no timestamps or versions of the writing machine go in.
- Writes go to a temporary file in the same folder, then ``os.replace``: a crash never
  leaves a half-written file behind.
- Loading parses plain JSON (no NaN literals, no duplicate keys), refuses unknown format
  versions, decodes values through fixed tables and validates the IR, including the
  allow-list of function names, before returning it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from .errors import IRError, IRFormatError, IRSerializationError, UnsupportedFormatVersionError
from .ir import IR
from .values import decode, encode

IR_FORMAT = "torch2ir.ir"
#: Version written by this library; files of versions 1..FORMAT_VERSION are read.
FORMAT_VERSION = 1

PathLike = str | os.PathLike


def dumps(document: Any) -> str:
    """Deterministic JSON text (UTF-8 friendly, no NaN, one node per line group)."""
    return json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n"


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on failure it is removed."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file gets the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_text_atomic(path: PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and an atomic rename."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    return Path(path)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise IRFormatError(f"duplicate key {key!r} in JSON object", hint="each key may appear once")
        out[key] = value
    return out


def _bad_constant(name: str) -> Any:
    raise IRFormatError(f"JSON constant {name} is not allowed", hint='write {"$float": "inf"} / {"$float": "nan"}')


def loads_json(text: str | bytes, *, source: str = "document") -> Any:
    """Parse strict JSON, turning every parser failure into :class:`IRFormatError`."""
    try:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_bad_constant)
    except IRError:
        raise
    except UnicodeDecodeError as exc:
        raise IRFormatError(f"{source} is not UTF-8 text: {exc}") from None
    except json.JSONDecodeError as exc:
        raise IRFormatError(f"{source} is not valid JSON: {exc}", hint="check the file is an IR JSON file") from None
    except (ValueError, RecursionError) as exc:  # e.g. integers too long to parse, nesting too deep
        raise IRFormatError(f"{source} cannot be parsed: {exc}") from None


def read_text(path: PathLike) -> bytes:
    """Read a file's bytes, with a clear error for a missing or unreadable file."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise IRFormatError(f"no such file: {os.fspath(path)}", key=os.fspath(path)) from None
    except (IsADirectoryError, PermissionError) as exc:
        raise IRFormatError(f"cannot read {os.fspath(path)}: {exc.strerror}", key=os.fspath(path)) from None


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


def ir_to_document(ir: IR, tensors_file: str | None = None) -> dict[str, Any]:
    """The JSON document of ``ir`` (plain data, values encoded)."""
    doc: dict[str, Any] = {
        "format": IR_FORMAT,
        "format_version": FORMAT_VERSION,
        "implementations": ir.to_dict(value_fn=encode, edge_list=True),
    }
    if ir.tensors:
        doc["tensors"] = {"file": tensors_file, "keys": sorted(ir.tensors)}
    return doc


def tensors_path(path: PathLike) -> Path:
    """Where the tensors of the IR saved at ``path`` go: ``model.ir.json`` -> ``model.ir.tensors.safetensors``."""
    path = Path(path)
    stem = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    return path.with_name(f"{stem}.tensors.safetensors")


def write_tensors_atomic(path: PathLike, tensors: Mapping[str, Any], metadata: dict[str, str] | None = None) -> Path:
    """Save tensors to a .safetensors file through a temporary file and an atomic rename."""
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, tmp, metadata=metadata)
    return Path(path)


def ir_from_document(doc: Any, *, source: str = "document", validate: bool = True) -> IR:
    """Build (and by default validate) an IR from a parsed JSON document."""
    check_header(doc, IR_FORMAT, FORMAT_VERSION, source)
    impls = doc.get("implementations")
    if not isinstance(impls, Mapping):
        raise IRFormatError(f"{source} has no 'implementations' object", key=source)
    extra = set(doc) - {"format", "format_version", "implementations", "tensors"}
    if extra:
        raise IRFormatError(f"{source} has unknown top-level keys {sorted(extra)}", key=source)
    ir = IR.from_dict(impls, value_fn=decode)
    if validate:
        ir.validate()
    return ir


def save_ir(ir: IR, path: PathLike) -> Path:
    """Save ``ir`` to ``path`` (atomic, deterministic); the text is built before the file is touched.

    Tensors held by the IR (``ir.tensors``) go to ``tensors_path(path)``, written first.
    """
    sidecar = tensors_path(path) if ir.tensors else None
    text = dumps(ir_to_document(ir, sidecar.name if sidecar else None))
    if sidecar is not None:
        for key, value in ir.tensors.items():
            if value.is_meta:
                raise IRSerializationError(f"tensor {key!r} is on the meta device and has no value to save",
                                           key=key, hint="drop it from ir.tensors or convert a model with values")
        write_tensors_atomic(sidecar, ir.tensors)
    return write_text_atomic(path, text)


def load_ir(path: PathLike, *, validate: bool = True) -> IR:
    """Load an IR JSON file written by :func:`save_ir` (and its tensors file, if any)."""
    source = os.fspath(path)
    doc = loads_json(read_text(path), source=source)
    ir = ir_from_document(doc, source=source, validate=validate)
    spec = doc.get("tensors")
    if spec is not None:
        ir.tensors = _load_tensors(Path(path), spec, source)
    return ir


def _load_tensors(path: Path, spec: Any, source: str) -> dict[str, Any]:
    if not (isinstance(spec, Mapping) and isinstance(spec.get("file"), str) and isinstance(spec.get("keys"), list)):
        raise IRFormatError(f"{source}: 'tensors' must be {{'file': name, 'keys': [...]}}", key="tensors")
    name = spec["file"]
    if Path(name).name != name or name in ("", ".", ".."):
        raise IRFormatError(f"{source}: tensors file {name!r} must be a plain file name beside the JSON",
                            key="tensors.file")
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(path.with_name(name))
    except FileNotFoundError:
        raise IRFormatError(f"{source}: tensors file {name!r} is missing", key="tensors.file",
                            hint="keep the .safetensors file written by save() beside the JSON") from None
    except (SafetensorError, OSError) as exc:
        raise IRFormatError(f"{source}: tensors file {name!r} is unreadable: {exc}", key="tensors.file") from None
    if sorted(tensors) != sorted(spec["keys"]):
        raise IRFormatError(f"{source}: tensors file {name!r} holds {sorted(tensors)}, expected {spec['keys']}",
                            key="tensors.keys")
    return dict(tensors)
