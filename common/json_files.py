"""Strict, bounded JSON for the library's documents (IR and FlatIR files): deterministic text, parsing that
refuses NaN literals and duplicate keys and stops past a node budget, regular files only, and the
``format`` / ``format_version`` header check. Every failure is an :class:`~common.errors.IRFormatError`."""

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

