"""The ``torch.nn`` class a module traced as a graph subclasses, as data (issue 51, point 5).

A subclass of a ``torch.nn`` class with a forward of its own (timm's ``Linear``, an ``nn.Sequential`` called with
several shapes) is traced to a graph and rebuilt from it; without more, the rebuild is a plain module, so a pass
that looks for ``nn.Linear`` skips it. torch2ir records its nearest ``torch.nn`` base class with a handler as
``meta["base"]``::

    {"type": "linear", "data": {"in_features": 4, "out_features": 5, "bias": true}}

(the base's IR type and its constructor arguments, as that type's leaf records them; ``{"type": "sequential",
"data": {}}`` for ``nn.Sequential``). ir2torch rebuilds the module from its graph as an instance of that base
class too (:mod:`ir2torch.rebuild.base_class`): its forward is the graph's, its attributes (``in_features``...) the
base's, and the base's parameters and buffers must be among those the module holds, of their shapes and dtypes,
or the file is refused. The type is checked against a fixed list of ``torch.nn`` types (:data:`BASE_TYPES`); the
data is built by that type's builder, as a leaf's would be; nothing is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import IRFormatError

#: ``meta`` key of the record.
BASE_KEY = "base"
_HINT = ('it names the torch.nn class the module subclasses: {"type": "linear", "data": {...constructor '
         'arguments}}; remove it if the file was edited (the module is then rebuilt as a plain module)')


def base_record(meta: Mapping[str, Any], key: str, allowed: frozenset[str]) -> dict[str, Any] | None:
    """The checked ``meta["base"]`` of implementation ``key`` (``None`` when absent); ``allowed``: the IR types a
    base may have.

    Raises:
        IRFormatError: not ``{"type": <one of allowed>, "data": {...}}``.
    """
    record = meta.get(BASE_KEY)
    if record is None:
        return None
    if not isinstance(record, dict) or set(record) != {"type", "data"} or not isinstance(record["data"], dict):
        raise IRFormatError(f"meta.{BASE_KEY} must be a dict of 'type' and 'data'", implementation=key, hint=_HINT)
    if not isinstance(record["type"], str) or record["type"] not in allowed:
        raise IRFormatError(f"meta.{BASE_KEY}.type {str(record['type'])[:80]!r} is not a torch.nn type a module may "
                            "subclass", implementation=key, hint=_HINT)
    return record


__all__ = ["BASE_KEY", "base_record"]
