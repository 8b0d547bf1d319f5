"""Arguments an operator's C++ code trusts to be what its schema says: dtypes, layouts and memory formats.

ATen converts a Python ``int`` given for a ``ScalarType``, ``Layout`` or ``MemoryFormat`` argument into the enum
without a range check: ``aten.addmm.dtype(..., out_dtype=64)`` crashes the process (found by the op-level fuzz),
``aten.zeros([2], dtype=-1)`` is undefined behaviour. A file's node may hold only a real ``torch.dtype``,
``torch.layout`` or ``torch.memory_format`` there (``None`` where the argument is optional), written as a literal:
no other node's output, which could be any int.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import torch

#: Schema type names whose values ATen casts from an int without checking, and the Python type they must be.
ENUM_TYPES: dict[str, type] = {"ScalarType": torch.dtype, "Layout": torch.layout, "MemoryFormat": torch.memory_format}
_ENUM = re.compile(r"^(Optional\[)?(ScalarType|Layout|MemoryFormat)(\])?$")


def _enum_slots(schema: Any) -> tuple[tuple[int | None, str, type, bool], ...]:
    """``(position or None, name, required type, optional)`` of each enum argument of ``schema`` (schemas do not
    hash: cached by name and overload)."""
    key = (schema.name, schema.overload_name)
    found = _SLOTS.get(key)
    if found is None:
        found = _SLOTS[key] = _slots_of(schema)
    return found


_SLOTS: dict[tuple[str, str], tuple[tuple[int | None, str, type, bool], ...]] = {}


def _slots_of(schema: Any) -> tuple[tuple[int | None, str, type, bool], ...]:
    slots = []
    position = 0
    for arg in schema.arguments:
        match = _ENUM.match(str(getattr(arg, "real_type", arg.type)).replace(" ", ""))
        if match is not None:
            slots.append((None if arg.kwarg_only else position, arg.name, ENUM_TYPES[match.group(2)],
                          match.group(1) is not None))
        if not arg.kwarg_only:
            position += 1
    return tuple(slots)


def enum_problem(op: Any, args: Sequence[Any] | Mapping[str, Any], kwargs: Mapping[str, Any]) -> str | None:
    """What is wrong with ``op``'s enum arguments (a sentence naming the argument), or ``None``.

    Args:
        op: a resolved ``OpOverload`` (anything without a schema is not checked).
        args: positional arguments (module-level IR) or arguments by schema name (FlatIR).
        kwargs: keyword arguments.
    """
    schema = getattr(op, "_schema", None)
    if schema is None:
        return None
    for position, name, kind, optional in _enum_slots(schema):
        if name in kwargs:
            value = kwargs[name]
        elif isinstance(args, Mapping):
            if name not in args:
                continue
            value = args[name]
        elif position is not None and position < len(args):
            value = args[position]
        else:
            continue
        if isinstance(value, kind) or (value is None and optional):
            continue
        return (f"argument {name!r} must be a {kind.__module__}.{kind.__name__} written in the file "
                f"({'or null, ' if optional else ''}not {type(value).__name__} {str(value)[:40]!r}): ATen would cast "
                "any int to it unchecked")
    return None


__all__ = ["ENUM_TYPES", "enum_problem"]
