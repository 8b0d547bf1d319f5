"""What an opaque leaf's own code reads of a child traced on its own, carried to the rebuilt child (issue 49).

An opaque leaf's forward runs as the original's code in the rebuild, and it may use a child traced on its own for
more than calling it: Cosmos3-Edge's model reads ``self.projector.spatial_merge_size`` (an int) and calls
``self.get_input_embeddings()``, transformers' method that returns ``self.language_model.embed_tokens``. A child
rebuilt from its graph has only ``nn.Module``'s attributes, so such a child was kept opaque. torch2ir keeps it a
graph when every such use is one the rebuild can repeat identically, and records them in the child's
``meta["opaque_reads"]``::

    {"attributes": {"spatial_merge_size": 2}, "modules": {"get_input_embeddings": "embed_tokens"}}

- ``attributes``: instance attributes of the child holding an immutable plain value (``None``, a bool, an int, a
  finite float, a string) that the opaque code read and that nothing set during the eager call (the child's own
  code included); the rebuild sets each on the rebuilt child, so the read gives the same value;
- ``modules``: methods of the child taking no argument that return a module inside it, from a fixed set of
  reviewed sources whose result depends on the module tree only (transformers' ``get_input_embeddings``); the
  rebuild gives the child a method of that name returning its submodule at the recorded path (``""``: the child
  itself), the module the original's method returns.

Every other use (a property, another method, an attribute holding anything else, setting one, calling a graph
module inside it) keeps the child opaque, as before. The names are checked like an opaque leaf's attribute names
and must not shadow anything the rebuilt module has; nothing is imported or run from a file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from torch import nn

from .errors import IRFormatError
from .opaque import is_attribute_name

#: ``meta`` key of the record.
READS_KEY = "opaque_reads"
_FIELDS = frozenset({"attributes", "modules"})
_HINT = ('{"attributes": {name: None, bool, int, finite float or string}, "modules": {method name: a submodule '
         'path}}: what an opaque leaf reads of this child; remove it if the file was edited (the opaque code then '
         'fails where it reads them)')


def plain_scalar(value: Any) -> bool:
    """Whether ``value`` may be carried as an attribute: ``None``, a bool, an int, a finite float or a string
    (immutable, so the rebuild's value cannot be changed in place where the original's would not)."""
    if value is None or type(value) in (bool, int, str):
        return True
    return type(value) is float and math.isfinite(value)


class SubmoduleAccessor:
    """A method of a rebuilt module taking no argument and returning its submodule at ``path`` (``""``: itself),
    looked up at each call (a module replaced later is the one returned, as by the reviewed originals)."""

    def __init__(self, owner: nn.Module, path: str) -> None:
        self.owner = owner
        self.path = path

    def __call__(self) -> nn.Module:
        return self.owner.get_submodule(self.path)

    def __repr__(self) -> str:
        return f"SubmoduleAccessor({self.path!r})"


def reads_record(meta: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """The checked ``meta["opaque_reads"]`` of implementation ``key`` (``None`` when absent).

    Raises:
        IRFormatError: not a dict of ``attributes`` (names to plain scalars) and ``modules`` (names to dotted
            paths), or a name that is no identifier, a dunder name or one of ``nn.Module``'s own.
    """
    record = meta.get(READS_KEY)
    if record is None:
        return None
    if not isinstance(record, dict) or not set(record) <= _FIELDS or not all(
            isinstance(v, dict) for v in record.values()):
        raise IRFormatError(f"meta.{READS_KEY} must be a dict of 'attributes' and 'modules'", implementation=key,
                            hint=_HINT)
    names = [*record.get("attributes", {}), *record.get("modules", {})]
    bad = next((n for n in names if not is_attribute_name(n)), None)
    if bad is not None or len(set(names)) != len(names):
        raise IRFormatError(f"meta.{READS_KEY} names {str(bad)[:80]!r}, which may not be set on a module"
                            if bad is not None else f"meta.{READS_KEY} names an attribute twice",
                            implementation=key, hint=_HINT)
    for name, value in record.get("attributes", {}).items():
        if not plain_scalar(value):
            raise IRFormatError(f"meta.{READS_KEY}.attributes.{name} is a {type(value).__name__}, not a plain scalar",
                                implementation=key, hint=_HINT)
    for name, path in record.get("modules", {}).items():
        if not isinstance(path, str) or (path and not all(is_attribute_name(p) or p.isdigit()
                                                          for p in path.split("."))):
            raise IRFormatError(f"meta.{READS_KEY}.modules.{name} is not a submodule path", implementation=key,
                                hint=_HINT)
    return record


__all__ = ["READS_KEY", "SubmoduleAccessor", "plain_scalar", "reads_record"]
