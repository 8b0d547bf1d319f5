"""Arguments an operator's C++ code trusts to be what its schema says: dtypes, layouts and memory formats, and
counts it turns into that many objects (:data:`COUNT_LIMITS`).

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


#: Integer arguments whose value a kernel turns into that many objects without a size check, and their largest
#: literal value: ``tensor_split(x, sections)`` returns ``sections`` views, empty past the tensor's length
#: (``sections=10**9`` built views for minutes in the long op-level fuzz, each a Python object no byte budget sees;
#: the op is CompositeImplicit, so the forward's dispatch-level checks only see the slices it makes); ``chunk`` of
#: an empty dim returns ``chunks`` empty views (``chunks=10**6`` ran for minutes in the long op-level fuzz of the
#: default surface, issue 50). A value computed in the graph (a ``SymInt`` from a tensor's size) is bounded by that
#: size.
COUNT_LIMITS: dict[str, tuple[str, int]] = {"aten::tensor_split.sections": ("sections", 10**5),
                                            "aten::chunk": ("chunks", 10**5), "aten::unsafe_chunk": ("chunks", 10**5)}
COUNT_HINT = "a model splits a tensor into at most as many parts as it has elements; fix the count in the file"


def count_problem(op: Any, args: Sequence[Any] | Mapping[str, Any], kwargs: Mapping[str, Any]) -> str | None:
    """What is wrong with a literal count argument of :data:`COUNT_LIMITS` (a sentence), or ``None``."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return None
    limit = COUNT_LIMITS.get(f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name)
    if limit is None:
        return None
    name, most = limit
    position = next(i for i, a in enumerate(schema.arguments) if a.name == name)
    if name in kwargs:
        value = kwargs[name]
    elif isinstance(args, Mapping):
        value = args.get(name)
    else:
        value = args[position] if position < len(args) else None
    if type(value) is int and value > most:
        return f"argument {name!r} is {value}, more than {most}: the op would return that many tensors"
    return None


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


__all__ = ["COUNT_HINT", "COUNT_LIMITS", "ENUM_TYPES", "count_problem", "enum_problem"]
