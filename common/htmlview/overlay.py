"""Overlays: a number per module or graph node drawn on the view (a colour scale and the value).

An overlay is a JSON object ``{key: number}``: a key is a module path (``"layers.3.mlp"``, ``"root"``) or a graph node
as ``"<module path>:<node name>"``; a value is a finite number, or ``null`` for "no value" (``ir2torch verify
--report`` writes ``null`` where shapes differ). ``ir2torch verify --report`` writes one (each module's max abs
diff); any tool can write one (per-module forward time, a team's own cost model). Without one, the view shows
parameter counts as it always did.

The file is data: read as strict JSON (no ``NaN``, no duplicate keys), bounded in size and entries, every key a
string and every value a number; anything else is an :class:`~common.errors.IRFormatError` naming the key. Keys that
name nothing in the IR are counted and said on the page and by the CLI, never dropped silently.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from ..errors import IRFormatError

#: Largest overlay file read (bytes) and most entries.
MAX_BYTES = 64 << 20
MAX_ENTRIES = 1_000_000
#: Longest key (a module path and a node name).
MAX_KEY = 2000


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise IRFormatError(f"the overlay names {key[:80]!r} twice", key=key[:80])
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise IRFormatError(f"the overlay holds {name}, which is not a JSON number", hint="write null for no value")


def read_overlay(path: str | os.PathLike) -> dict[str, float | None]:
    """The overlay in the JSON file ``path`` (see the module docstring).

    Raises:
        IRFormatError: the file is missing, too large, not a JSON object of numbers, or a key or value is invalid.
    """
    try:
        size = os.path.getsize(path)
        if size > MAX_BYTES:
            raise IRFormatError(f"the overlay {os.fspath(path)} has {size} bytes, more than {MAX_BYTES}",
                                hint="an overlay holds one number per module or node")
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise IRFormatError(f"cannot read the overlay {os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text, object_pairs_hook=_pairs, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, IRFormatError):
            raise
        raise IRFormatError(f"the overlay {os.fspath(path)} is not JSON: {exc}") from None
    return check_overlay(doc)


def check_overlay(doc: Any) -> dict[str, float | None]:
    """``doc`` as an overlay: a mapping of string keys to finite numbers or ``None``.

    Raises:
        IRFormatError: naming the first key or value that is not one.
    """
    if not isinstance(doc, Mapping):
        raise IRFormatError(f"an overlay is a JSON object {{key: number}}, not {type(doc).__name__}",
                            hint='write {"layers.0.mlp": 1.5, "layers.0.mlp:add": 0.2}')
    if len(doc) > MAX_ENTRIES:
        raise IRFormatError(f"the overlay has {len(doc)} entries, more than {MAX_ENTRIES}")
    out: dict[str, float | None] = {}
    for key, value in doc.items():
        if not isinstance(key, str) or not key or len(key) > MAX_KEY or any(ord(c) < 32 for c in key):
            raise IRFormatError(f"overlay key {str(key)[:80]!r} is not a module path or 'path:node' of at most "
                                f"{MAX_KEY} printable characters", key=str(key)[:80])
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise IRFormatError(f"overlay value of {key[:80]!r} is not a finite number or null", key=key[:80],
                                hint="write numbers; null for no value")
        out[key] = None if value is None else float(value)
    return out


def overlay_data(overlay: Mapping[str, float | None], modules: set[str], nodes: set[str], name: str) -> dict[str, Any]:
    """What the page embeds: ``{"name", "m": {path: [value, text]}, "n": {"path:node": [value, text]}, "lo", "hi",
    "unmatched"}`` (``value`` is ``None`` for no value; ``lo``/``hi`` span the values shown)."""
    mods: dict[str, list[Any]] = {}
    hits: dict[str, list[Any]] = {}
    unmatched = 0
    for key, value in overlay.items():
        text = "n/a" if value is None else f"{value:.3g}"
        if key in modules:
            mods[key] = [value, text]
        elif key in nodes:
            hits[key] = [value, text]
        else:
            unmatched += 1
    values = [v for v, _ in [*mods.values(), *hits.values()] if v is not None]
    return {"name": name, "m": mods, "n": hits, "lo": min(values, default=0.0), "hi": max(values, default=0.0),
            "unmatched": unmatched}


__all__ = ["MAX_BYTES", "MAX_ENTRIES", "check_overlay", "overlay_data", "read_overlay"]
