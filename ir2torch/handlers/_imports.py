"""Importing what a file names, once the caller has checked that the name is allowed.

The opaque-leaf and owned-module builders (:mod:`ir2torch.handlers.opaque`, :mod:`ir2torch.handlers.owned`) need
the class, function or configuration class a file names by its qualified name. :func:`import_named` is the one
place that turns such a name into an object: the longest prefix of the name that is an importable module, then
the rest as attributes read with ``inspect.getattr_static`` (no property, ``__getattr__`` or descriptor of the
module runs). Callers check the kind of object they got.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from typing import Any

__all__ = ["import_named"]


def import_named(name: str) -> Any:
    """The object the dotted ``name`` names (the caller checked that ``name`` is allowed).

    Raises:
        LookupError: no prefix of ``name`` is an importable module whose attributes hold the rest.
    """
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: Any = sys.modules.get(module_name) or importlib.import_module(module_name)
            for attr in parts[cut:]:
                obj = inspect.getattr_static(obj, attr)
        except (ImportError, AttributeError):
            continue
        return obj
    raise LookupError(name)
