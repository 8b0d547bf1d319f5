"""Classes of the ATen overloads and Python functions an IR may name: the generated table, read as data.

The table is a JSON file per torch minor version, ``common/op_tables/torch-<major>.<minor>.json``, written by
``python scripts/classify_ops.py`` (``--check`` says whether it is stale; ``tests/security/test_op_table.py`` fails
until it is regenerated after a torch upgrade). A class is ``pure``, ``allocating`` or ``refused:<reason>``.

The names below are read from the running torch's file the first time one is asked (never at import):

- :data:`ATEN`: ``aten.<op>.<overload>`` -> class;
- :data:`ATEN_NOTES`: why an allowed ATen overload has its class, where a rule or an exception says more;
- :data:`PYTHON`: Python-level functions (``common.safety.PYTHON_FUNCTIONS``) -> class;
- :data:`PYTHON_NOTES`: why a Python-level function has its class;
- :data:`TORCH_VERSION`: the torch version the table was generated with.

A torch without a table of its own minor version reads the newest older table (a newer torch's overloads it lacks
are then refused by name, saying to run the classifier); one older than every table reads the oldest.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

#: The folder of the generated tables.
TABLES = Path(__file__).resolve().parent / "op_tables"

_NAMES = {"ATEN": "aten", "ATEN_NOTES": "aten_notes", "PYTHON": "python", "PYTHON_NOTES": "python_notes",
          "TORCH_VERSION": "torch_version"}

__all__ = ["TABLES", "table_file", *_NAMES]


def _minor(version: str) -> tuple[int, int]:
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


def table_file(version: str | None = None) -> Path:
    """The table file read for torch ``version`` (default: the running torch)."""
    if version is None:
        import torch

        version = torch.__version__
    want = _minor(version)
    tables = sorted((_minor(p.stem.removeprefix("torch-")), p) for p in TABLES.glob("torch-*.json"))
    if not tables:
        raise FileNotFoundError(f"no operator table in {TABLES}: run scripts/classify_ops.py")
    older = [p for v, p in tables if v <= want]
    return older[-1] if older else tables[0][1]


@functools.cache
def _document() -> dict[str, Any]:
    with table_file().open(encoding="utf-8") as f:
        return json.load(f)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return _document()[_NAMES[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
