"""Strict, bounded JSON for the library's documents (IR and FlatIR files, a weights file's header and metadata):
deterministic text, parsing that refuses NaN literals and duplicate keys, regular files only, and the
``format`` / ``format_version`` header check. Every failure is an :class:`~common.errors.IRFormatError`.

Parsing is bounded before it starts, from a scan of the text's structure (strings skipped, no Python object
made): nesting at most :data:`MAX_JSON_DEPTH` deep; in a document over :data:`DENSE_FROM` bytes at most one
array or object per :data:`MIN_BYTES_PER_CONTAINER` bytes (a parsed container costs about 64 bytes: the parse
then takes at most about ten times the file's size, where ``[[],[],...]`` would take twenty); and under a node
budget at most ``JSON_VALUES_PER_NODE * max_nodes`` values (arrays, objects and scalars alike) and
``JSON_OBJECTS_PER_NODE * max_nodes`` objects."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from .atomic_files import NotRegularFileError, read_regular
from .errors import IRError, IRFormatError, UnsupportedFormatVersionError
from .schema import JSON_OBJECTS_PER_NODE, budget_error, check_max_nodes

PathLike = str | os.PathLike

#: Deepest nesting of arrays and objects a document may have (real IR and FlatIR files: at most 14,
#: as ``tests/docs/measured.py`` measures them).
MAX_JSON_DEPTH = 64
#: Least text per array or object in a document of :data:`DENSE_FROM` bytes or more (real files: 53 or more).
MIN_BYTES_PER_CONTAINER = 12
#: Size from which the density of containers is checked (below it a parse costs at most about 20 MB).
DENSE_FROM = 1 << 20
#: JSON values and keys allowed per node of the budget while a file is parsed (real files: at most 96 per node,
#: FlatIRs of CNNs; IRs fewer).
JSON_VALUES_PER_NODE = 8 * JSON_OBJECTS_PER_NODE

#: Every byte but a quote and ``[]{},:`` (deleted to read a document's structure).
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{},:')
#: Bytes of a document's structure read at once by :func:`structure`.
_CHUNK = 1 << 22


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


def structure(data: bytes) -> tuple[int, int, int]:
    """``(depth, containers, values)`` of JSON text: its deepest nesting of arrays and objects, how many arrays
    and objects it holds and an upper bound of its values and keys, read without parsing (string contents
    skipped). Linear, in C and numpy, in chunks of :data:`_CHUNK` bytes (a few times that in memory beyond a copy
    of the text): escaped backslashes and quotes are dropped, then every byte but quotes and ``[]{},:``; a byte
    after an odd number of quotes is inside a string."""
    import numpy as np

    skeleton = data.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    depth = level = containers = separators = parity = 0
    for start in range(0, len(skeleton), _CHUNK):
        codes = np.frombuffer(skeleton, dtype=np.uint8, count=min(_CHUNK, len(skeleton) - start), offset=start)
        quotes = codes == 0x22
        outside = ((np.cumsum(quotes, dtype=np.uint8) + parity) & 1) == 0  # parity survives uint8 wrapping
        parity = (parity + int(np.count_nonzero(quotes))) & 1
        codes = codes[outside & ~quotes]
        opening = (codes == 0x5B) | (codes == 0x7B)  # [ {
        closing = (codes == 0x5D) | (codes == 0x7D)  # ] }
        containers += int(np.count_nonzero(opening))
        separators += int(np.count_nonzero((codes == 0x2C) | (codes == 0x3A)))  # , :
        steps = opening[opening | closing].astype(np.int8) * 2 - 1
        if len(steps):
            levels = np.cumsum(steps, dtype=np.int64) + level
            depth, level = max(depth, int(levels.max())), int(levels[-1])
    # every value but the first, and every key, follows a '[', '{', ',' or ':' (one more for each empty container)
    return depth, containers, containers + separators + 1


def _check_structure(data: bytes, source: str, max_nodes: int | None) -> None:
    depth, containers, values = structure(data)
    if depth > MAX_JSON_DEPTH:
        raise IRFormatError(f"{source} nests arrays and objects {depth} deep (at most {MAX_JSON_DEPTH})",
                            key=source, hint="no IR file nests that deep: the file is not one save() wrote")
    if len(data) >= DENSE_FROM and containers * MIN_BYTES_PER_CONTAINER > len(data):
        raise IRFormatError(f"{source} holds {containers} arrays and objects in {len(data)} bytes (at most one per "
                            f"{MIN_BYTES_PER_CONTAINER} bytes: parsing it would take far more memory than the "
                            "file's size)", key=source, hint="the file is not one save() wrote")
    if max_nodes is not None and values > JSON_VALUES_PER_NODE * max_nodes:
        raise budget_error("JSON values", values, JSON_VALUES_PER_NODE * max_nodes, max_nodes, key=source)


def loads_json(text: str | bytes, *, source: str = "document", max_nodes: int | None = None) -> Any:
    """Parse strict JSON, turning every parser failure into :class:`IRFormatError`.

    The text's structure is checked first (see the module docstring): nesting, density of containers and, with a
    node budget, the number of values. ``max_nodes`` (default: the :func:`node_budget` in force, else none):
    parsing also stops with an :class:`IRFormatError` past ``JSON_OBJECTS_PER_NODE * max_nodes`` objects, before
    the document is all built.
    """
    max_nodes = max_nodes if max_nodes is not None else _MAX_NODES.get()
    hook = _no_duplicates if max_nodes is None else _counting_hook(max_nodes, source)
    try:
        _check_structure(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"), source,
                         max_nodes)
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
    if "\0" in str(name):
        raise IRFormatError(f"the path {name!r} holds a NUL character; no file has such a name", key=str(name),
                            hint="give the path of the JSON file written by save()")
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

