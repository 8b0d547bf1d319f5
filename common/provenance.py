"""Provenance of rewritten implementations: ``meta["provenance"]``, what a module was made from.

A rewrite (:mod:`common.rewrite`) that replaces modules by a new one records, in the new
implementation's ``meta["provenance"]``, a list of records, oldest first::

    [{"pass": "fold_batchnorm",
      "from": [{"key": "layer1.0.conv1", "type": "conv2d", "source": "layer1.0.conv1"},
               {"key": "layer1.0.bn1", "type": "batchnorm2d", "source": "layer1.0.bn1"}]}]

- ``pass``: the name of the rewrite (free text, at most :data:`MAX_TEXT` characters);
- ``from``: the implementations it replaced, in data-flow order (empty: a module the rewrite
  inserted); ``key`` is the implementation key they had, ``type`` their type, ``source`` the
  module path of the *original* model they stand for (``"root"`` or an attribute path).

:func:`common.verify.verify` (``rewritten=``) compares a rewritten module's output with that of the
last original module it replaces (:func:`compared_paths`); :func:`common.remap_state_dict` refuses a
state dict that holds entries of modules a rewrite consumed (:func:`consumed_sources`): that is the
state of the IR before the rewrite, and loading it would silently run the unfused weights.

The field is data: :func:`check_provenance` (part of :func:`common.validate.validate`, so every
``IR.load`` runs it) refuses anything but the form above with an :class:`IRFormatError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import IRFormatError
from .names import check_attr_path

#: ``meta`` key of an implementation's provenance records.
PROVENANCE_KEY = "provenance"
#: Most records one implementation may carry, and most entries of one record's ``from``.
MAX_RECORDS = 256
MAX_FROM = 4096
#: Longest ``pass`` / ``type`` string.
MAX_TEXT = 200

_RECORD_KEYS = {"pass", "from"}
_FROM_KEYS = {"key", "type", "source"}
_HINT = ('meta.provenance is a list of {"pass": str, "from": [{"key", "type", "source"}, ...]} records '
         "written by common.rewrite; drop it or write it again with a rewrite")


def _text(value: Any, where: str, key: str) -> None:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise IRFormatError(f"{where} must be a non-empty string of at most {MAX_TEXT} characters, "
                            f"not {value!r:.80}", implementation=key, key=where, hint=_HINT)


def _path(value: Any, where: str, key: str) -> None:
    if value == "root":
        return
    if not isinstance(value, str):
        raise IRFormatError(f"{where} must be a module path, not {type(value).__name__}", implementation=key,
                            key=where, hint=_HINT)
    check_attr_path(value, where, implementation=key)


def check_provenance(key: str, meta: Mapping[str, Any]) -> None:
    """Check ``meta["provenance"]`` of implementation ``key`` (absent is fine).

    Raises:
        IRFormatError: it is not a list of records of the documented form (a name that is no module
            path is an :class:`~common.errors.UnsafeNameError`).
    """
    if PROVENANCE_KEY not in meta:
        return
    records = meta[PROVENANCE_KEY]
    where = f"meta.{PROVENANCE_KEY}"
    if not isinstance(records, list) or len(records) > MAX_RECORDS:
        raise IRFormatError(f"{where} must be a list of at most {MAX_RECORDS} records", implementation=key,
                            key=where, hint=_HINT)
    for i, rec in enumerate(records):
        rwhere = f"{where}[{i}]"
        if not isinstance(rec, dict) or set(rec) != _RECORD_KEYS:
            raise IRFormatError(f"{rwhere} must be a dict with exactly 'pass' and 'from'", implementation=key,
                                key=rwhere, hint=_HINT)
        _text(rec["pass"], f"{rwhere}.pass", key)
        items = rec["from"]
        if not isinstance(items, list) or len(items) > MAX_FROM:
            raise IRFormatError(f"{rwhere}.from must be a list of at most {MAX_FROM} entries", implementation=key,
                                key=f"{rwhere}.from", hint=_HINT)
        for j, item in enumerate(items):
            fwhere = f"{rwhere}.from[{j}]"
            if not isinstance(item, dict) or set(item) != _FROM_KEYS:
                raise IRFormatError(f"{fwhere} must be a dict with exactly 'key', 'type' and 'source'",
                                    implementation=key, key=fwhere, hint=_HINT)
            _path(item["key"], f"{fwhere}.key", key)
            _text(item["type"], f"{fwhere}.type", key)
            _path(item["source"], f"{fwhere}.source", key)


def records(impl: Any) -> list[dict[str, Any]]:
    """The provenance records of an implementation (``[]`` when it has none)."""
    found = impl.meta.get(PROVENANCE_KEY)
    return list(found) if isinstance(found, list) else []


def original_path(impl: Any) -> str:
    """The module path of the original model ``impl`` stands for: the source of the last module its
    latest provenance record replaces, else ``meta["source"]``, else its key."""
    for rec in reversed(records(impl)):
        if rec["from"]:
            return rec["from"][-1]["source"]
    source = impl.meta.get("source")
    return source if isinstance(source, str) else impl.name


def compared_paths(ir: Any) -> dict[str, str]:
    """``{module path in the model rebuilt from ir: original module path}`` for every rewritten
    implementation that replaces modules (inserted ones, which replace none, are left out)."""
    out: dict[str, str] = {}
    for key, impl in ir.items():
        if not any(rec["from"] for rec in records(impl)):
            continue
        target = "" if original_path(impl) == "root" else original_path(impl)
        for path in (key, *impl.aliases):
            out["" if path == "root" else path] = target
    return out


def consumed_sources(ir: Any) -> set[str]:
    """Original module paths that rewrites replaced and that no implementation of ``ir`` still uses
    (as its key, alias or ``meta["source"]``)."""
    used: set[str] = set()
    consumed: set[str] = set()
    for key, impl in ir.items():
        source = impl.meta.get("source")
        used.update((key, *impl.aliases, *([source] if isinstance(source, str) else [])))
        for rec in records(impl):
            consumed.update(item["source"] for item in rec["from"])
    return {path for path in consumed - used if path != "root"}


__all__ = ["MAX_FROM", "MAX_RECORDS", "PROVENANCE_KEY", "check_provenance", "compared_paths", "consumed_sources",
           "original_path", "records"]
