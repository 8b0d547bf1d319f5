"""Injector records: the quantizer *injector classes* of brevitas layers, as an opaque leaf's constructor argument.

brevitas configures each quantizer with an injector class of the ``dependencies`` library: a class such as
``Int8WeightPerTensorFloat`` (importable by its name), usually derived at run time by ``.let(name=value, ...)``
(``weight_bit_width=4`` becomes ``bit_width=4``). Such a derived class has no importable name, so an IR records
it as the importable class it derives from and the values let on the way::

    {"$injector": {"class": "package.module.Injector", "let": {name: value}}}

where each let value is a plain value, a class ``{"$class": "package.module.Class"}``, an enum member
``{"$enum": {"class": "package.module.Enum", "member": "NAME"}}``, or a nested injector record. Values that the
layer's construction lets by itself (the module a proxy belongs to, its tracked parameters) are not recorded:
constructing the layer again lets them again (checked when converting, :mod:`torch2ir.opaque.constructed`).

This module checks that form (:func:`check_injector`) and lists the classes a record names
(:func:`injector_classes`), without importing anything the file names; ``ir2torch`` imports them only when each
is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .errors import IRFormatError, UnsafeTargetError

INJECTOR_TAG = "$injector"
CLASS_TAG = "$class"
ENUM_TAG = "$enum"
#: Tags of the values an injector record holds besides plain values.
TAGS = frozenset({INJECTOR_TAG, CLASS_TAG, ENUM_TAG})

#: Injector records nest at most this deep.
MAX_INJECTOR_DEPTH = 8
#: An injector record lets at most this many values.
MAX_LETS = 256


_HOSTILE = "the file is corrupt or hostile"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _is_let_name(name: object) -> bool:
    """An identifier of at most 200 characters, not a dunder name (``dependencies`` refuses those too)."""
    return isinstance(name, str) and len(name) <= 200 and bool(_IDENTIFIER.match(name)) and not name.startswith("__")


def is_injector(value: Any) -> bool:
    """Whether ``value`` is a ``dependencies`` injector class (recognised by its ``__dependencies__`` table, read
    without resolving any of its attributes: an injector computes a missing attribute when it is read)."""
    if not isinstance(value, type):
        return False
    try:
        table = type.__getattribute__(value, "__dict__").get("__dependencies__")
    except AttributeError:
        return False
    return isinstance(table, dict)


def tag_of(value: Any) -> str | None:
    """The tag of a tagged value (a one-key mapping whose key is a tag), else ``None``."""
    if isinstance(value, Mapping) and len(value) == 1:
        key = next(iter(value))
        if key in TAGS:
            return key
    return None


def check_injector(value: Any, impl: str, key: str, depth: int = 0) -> None:
    """Check an injector record ``{"$injector": {"class": name, "let": {name: value}}}`` (see the module docstring).

    Raises:
        IRFormatError: the record does not have that form, nests too deep or lets too many values.
        UnsafeTargetError: a class name is not a dotted Python name, or a let name is not an identifier.
    """
    from .opaque import check_value, is_class_name

    if depth > MAX_INJECTOR_DEPTH:
        raise IRFormatError(f"injector record {key!r} nests more than {MAX_INJECTOR_DEPTH} levels deep",
                            implementation=impl, key=key, hint="the file is corrupt or hostile")
    record = value[INJECTOR_TAG]
    if not isinstance(record, Mapping) or set(record) != {"class", "let"} or not isinstance(record["let"], Mapping):
        raise IRFormatError(f"injector record {key!r} must be {{'class': ..., 'let': {{...}}}}", implementation=impl,
                            key=key, hint="re-save the IR with torch2ir")
    if not is_class_name(record["class"]):
        raise UnsafeTargetError(f"injector class {str(record['class'])[:100]!r} is not a dotted Python class name",
                                implementation=impl, key=key, hint="the file is corrupt or hostile")
    if len(record["let"]) > MAX_LETS:
        raise IRFormatError(f"injector record {key!r} lets more than {MAX_LETS} values", implementation=impl, key=key,
                            hint="the file is corrupt or hostile")
    for name, item in record["let"].items():
        if not _is_let_name(name):
            raise UnsafeTargetError(f"injector record {key!r} lets {str(name)[:100]!r}, which is not an identifier",
                                    implementation=impl, key=key, hint="the file is corrupt or hostile")
        tag = tag_of(item)
        if tag == INJECTOR_TAG:
            check_injector(item, impl, f"{key}.{name}", depth + 1)
        elif tag == CLASS_TAG:
            if not is_class_name(item[CLASS_TAG]):
                raise UnsafeTargetError(f"class {str(item[CLASS_TAG])[:100]!r} let in {key!r} is not a dotted Python "
                                        "class name", implementation=impl, key=key, hint=_HOSTILE)
        elif tag == ENUM_TAG:
            enum = item[ENUM_TAG]
            if not isinstance(enum, Mapping) or set(enum) != {"class", "member"} or not is_class_name(enum["class"]) \
                    or not _is_let_name(enum["member"]):
                raise UnsafeTargetError(f"enum value let in {key!r} must be {{'class': dotted name, 'member': "
                                        "identifier}", implementation=impl, key=key, hint=_HOSTILE)
        else:
            if isinstance(item, Mapping) and any(isinstance(k, str) and k.startswith("$") for k in item):
                raise IRFormatError(f"value {name!r} let in {key!r} is a mapping with a '$' key that is no tag",
                                    implementation=impl, key=key, hint="the file is corrupt or hostile")
            why = check_value(item)
            if why is not None:
                raise IRFormatError(f"value {name!r} let in {key!r} is not a plain value ({why})", implementation=impl,
                                    key=key, hint="the file is corrupt or hostile")


def injector_classes(value: Any) -> list[tuple[str, str]]:
    """``(kind, class name)`` of every class a checked injector record names: ``"injector"`` for injector classes,
    ``"class"`` for let classes, ``"enum"`` for enum classes."""
    out: list[tuple[str, str]] = []
    stack = [value]
    while stack:
        record = stack.pop()[INJECTOR_TAG]
        out.append(("injector", str(record["class"])))
        for item in record["let"].values():
            tag = tag_of(item)
            if tag == INJECTOR_TAG:
                stack.append(item)
            elif tag == CLASS_TAG:
                out.append(("class", str(item[CLASS_TAG])))
            elif tag == ENUM_TAG:
                out.append(("enum", str(item[ENUM_TAG]["class"])))
    return out


__all__ = ["CLASS_TAG", "ENUM_TAG", "INJECTOR_TAG", "MAX_INJECTOR_DEPTH", "MAX_LETS", "TAGS", "check_injector",
           "injector_classes", "is_injector", "tag_of"]
