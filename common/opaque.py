"""The ``"opaque"`` implementation type: a module torch.export could not trace, kept as a leaf run by its own
forward (``torch2ir.convert(..., opaque=...)``; rebuilt by ``ir2torch`` only for classes passed in ``allow=``).

Its ``data`` is ``{"class": "package.module.Class", "attributes": {name: plain value}}``, and for a module holding
attributes an IR cannot record as values (a transformers ``config``), ``"init"``: the arguments to construct it
with, ``{parameter: plain value | {"$config": {"class": ..., "values": {...}, "private": {...}}}}`` (a
configuration object: its class, its ``to_dict()`` and its plain private attributes such as
``_attn_implementation``); or, for a module that cannot be constructed from its attributes but whose only other
attributes are configuration objects, ``"configs"``: ``{attribute: {"$config": ...}}``, set on an instance made
without running its ``__init__``. A constructor argument may also be an injector record (a brevitas quantizer,
:mod:`common.injectors`). A leaf constructed again whose constructor makes its whole subtree (a brevitas layer and
its quantizer proxies) has ``"owns": true``: every module below it is an ``"owned"`` implementation, kept as that
constructor makes it. This module checks those shapes on load (:func:`check_data`, :func:`check_owned`) without
importing anything the file names.
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn

from .errors import IRFormatError, UnsafeTargetError
from .injectors import INJECTOR_TAG, check_injector, injector_classes, tag_of

OPAQUE_TYPE = "opaque"
#: A module made by the constructor of the opaque leaf above it (``"owns": true``): kept as that constructor made
#: it, its plain attributes set (its data: ``{"class": qualified name, "attributes": {name: plain value}}``).
OWNED_TYPE = "owned"

#: Plain values nest at most this deep (a list in a dict in a list ... counts one per level).
MAX_DEPTH = 16

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_value(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not a plain attribute value, or ``None`` when it is (``None``, bools, ints, finite or not
    floats, strings, torch dtypes, and lists, tuples, string-keyed dicts of those, at most :data:`MAX_DEPTH`
    deep)."""
    if depth > MAX_DEPTH:
        return f"nested more than {MAX_DEPTH} levels deep"
    if value is None or type(value) in (bool, int, float, str, torch.dtype):  # a dtype is written {"$dtype": ...}
        return None
    if type(value) in (list, tuple):
        for item in value:
            why = check_value(item, depth + 1)
            if why is not None:
                return why
        return None
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                return f"a dict key of type {type(key).__name__}"
            why = check_value(item, depth + 1)
            if why is not None:
                return why
        return None
    return f"a {type(value).__name__}"


def is_class_name(name: object) -> bool:
    """Whether ``name`` is a dotted Python name ``package.module.Class`` (identifiers only, at least two parts,
    no dunder part but a leading ``__main__``); never imports anything."""
    if not isinstance(name, str) or len(name) > 500:
        return False
    parts = name.split(".")
    return len(parts) >= 2 and all(
        _IDENTIFIER.match(p) and not keyword.iskeyword(p) and not (p.startswith("__") and p.endswith("__"))
        for p in parts[1:]) and (parts[0] == "__main__" or (_IDENTIFIER.match(parts[0]) is not None
                                 and not keyword.iskeyword(parts[0]) and not parts[0].startswith("__")))


def is_attribute_name(name: object) -> bool:
    """Whether ``name`` may be set on a rebuilt opaque module: an identifier, not a dunder name, not ``forward``
    and not a name of ``nn.Module``'s own bookkeeping (checked against the class when it is built, too)."""
    return (isinstance(name, str) and bool(_IDENTIFIER.match(name)) and not name.startswith("__")
            and name not in _RESERVED)


#: Names an opaque leaf's attributes may not take: ``nn.Module``'s own instance state (this torch's) and the call.
_RESERVED = frozenset({*vars(nn.Module()), "forward", "training", "_compiled_call_impl"})


#: The tag of a configuration object among an opaque leaf's constructor arguments.
CONFIG_TAG = "$config"


def config_classes(data: Any) -> list[str]:
    """The classes besides its own an opaque leaf's data names (checked data): configuration classes of its
    constructor arguments or configuration attributes, and the classes of its plain helper objects."""
    if not isinstance(data, Mapping):
        return []
    values = [*data.get("init", {}).values(), *data.get("configs", {}).values()]
    return [*(v[CONFIG_TAG]["class"] for v in values if isinstance(v, Mapping) and CONFIG_TAG in v),
            *(v.get("class") or v.get("function") for v in data.get("objects", {}).values()),
            *(name for v in data.get("init", {}).values() if tag_of(v) == INJECTOR_TAG
              for _, name in injector_classes(v))]


def named_classes(impls: Iterable[Any]) -> list[str]:
    """Every class the opaque implementations of ``impls`` name (their own, their configuration, helper-object and
    injector classes), sorted: what ``allow=`` takes to rebuild them all (classes of an allowed opaque class's
    package and ``torch.nn`` classes let in an injector need no entry, but may have one)."""
    names: set[str] = set()
    for impl in impls:
        if impl.type == OPAQUE_TYPE and isinstance(impl.data, Mapping):
            names.add(str(impl.data.get("class")))
            names.update(str(n) for n in config_classes(impl.data))
    return sorted(names)


def same_package(name: str, other: str) -> bool:
    """Whether two dotted names share their top-level package (a configuration class may be imported for an
    allowed opaque class of the same package: ``transformers.models.x.configuration_x.XConfig`` for
    ``transformers.models.x.modeling_x.XAttention``)."""
    return name.split(".", 1)[0] == other.split(".", 1)[0]


def _check_config(value: Any, name: str, impl: str) -> None:
    """Check one recorded configuration object ``{"$config": {"class", "values", "private"}}``."""
    config = value[CONFIG_TAG]
    if len(value) != 1 or not isinstance(config, Mapping) or set(config) != {"class", "values", "private"}:
        raise IRFormatError(f"opaque value {name!r}: {CONFIG_TAG} takes class, values and private",
                            implementation=impl, key=name)
    if not is_class_name(config["class"]):
        raise UnsafeTargetError(f"configuration class {str(config['class'])[:100]!r} is not a dotted Python "
                                "class name", implementation=impl, key=name)
    for part in ("values", "private"):
        if not isinstance(config[part], Mapping):
            raise IRFormatError(f"{CONFIG_TAG}.{part} must be a mapping", implementation=impl, key=name)
        why = check_value(dict(config[part]))
        if why is not None:
            raise IRFormatError(f"{CONFIG_TAG}.{part} of {name!r} is not plain ({why})", implementation=impl,
                                key=name)
    if not all(isinstance(k, str) and k.startswith("_") and not k.startswith("__") and _IDENTIFIER.match(k)
               for k in config["private"]):
        raise UnsafeTargetError(f"{CONFIG_TAG}.private of {name!r} names an attribute that is not a private "
                                "identifier", implementation=impl, key=name)


def _check_init(init: Any, impl: str, field: str = "init") -> None:
    """Check ``init`` (constructor arguments: plain values or configuration objects) or, with ``field="configs"``,
    the configuration objects set as attributes (configuration objects only)."""
    if not isinstance(init, Mapping):
        raise IRFormatError(f"an opaque implementation's {field} must be a mapping", implementation=impl, key=field)
    for name, value in init.items():
        if not is_attribute_name(name):
            raise UnsafeTargetError(f"opaque {'constructor argument' if field == 'init' else 'attribute'} "
                                    f"{str(name)[:100]!r} is not allowed", implementation=impl, key=field,
                                    hint="names are identifiers, neither dunder names nor nn.Module's own")
        if isinstance(value, Mapping) and CONFIG_TAG in value:
            _check_config(value, name, impl)
            continue
        if field == "init" and tag_of(value) == INJECTOR_TAG:
            check_injector(value, impl, name)
            continue
        if field == "configs":
            raise IRFormatError(f"opaque configs entry {name!r} is not {{{CONFIG_TAG!r}: ...}}", implementation=impl,
                                key=name)
        why = check_value(value)
        if why is not None:
            raise IRFormatError(f"opaque constructor argument {name!r} is not a plain value ({why})",
                                implementation=impl, key=name)


def _check_objects(objects: Any, impl: str) -> None:
    """Check ``objects``: ``{attribute: {"class": dotted name, "attributes": {name: plain value}} | {"function":
    dotted name}}``."""
    if not isinstance(objects, Mapping):
        raise IRFormatError("an opaque implementation's objects must be a mapping", implementation=impl, key="objects")
    for name, value in objects.items():
        if not is_attribute_name(name):
            raise UnsafeTargetError(f"opaque attribute {str(name)[:100]!r} is not allowed", implementation=impl,
                                    key="objects", hint="names are identifiers, neither dunder names nor "
                                    "nn.Module's own")
        if isinstance(value, Mapping) and set(value) == {"function"}:
            if not is_class_name(value["function"]):
                raise UnsafeTargetError(f"function {str(value['function'])[:100]!r} is not a dotted Python name",
                                        implementation=impl, key=name, hint="the file is corrupt or hostile")
            continue
        if not isinstance(value, Mapping) or set(value) != {"class", "attributes"} or \
                not isinstance(value["attributes"], Mapping):
            raise IRFormatError(f"opaque object {name!r} must be {{'class': ..., 'attributes': {{...}}}} or "
                                "{'function': ...}", implementation=impl, key=name)
        if not is_class_name(value["class"]):
            raise UnsafeTargetError(f"object class {str(value['class'])[:100]!r} is not a dotted Python class name",
                                    implementation=impl, key=name, hint="the file is corrupt or hostile")
        for attribute, item in value["attributes"].items():
            if not is_attribute_name(attribute):
                raise UnsafeTargetError(f"attribute {str(attribute)[:100]!r} of opaque object {name!r} is not "
                                        "allowed", implementation=impl, key=name, hint="the file is corrupt or hostile")
            why = check_value(item)
            if why is not None:
                raise IRFormatError(f"attribute {attribute!r} of opaque object {name!r} is not a plain value ({why})",
                                    implementation=impl, key=name)


def check_data(data: Any, impl: str) -> None:
    """Check the data of an ``"opaque"`` implementation.

    Raises:
        IRFormatError: the data is not ``{"class": str, "attributes": {name: plain value}}``, or an attribute's
            name or value is not allowed.
        UnsafeTargetError: the class is not a dotted Python name.
    """
    if not isinstance(data, Mapping) or set(data) - {"init", "configs", "objects", "owns"} != {"class", "attributes"} \
            or ("init" in data and ({"configs", "objects"} & set(data))) or \
            ("owns" in data and (data["owns"] is not True or "init" not in data)):
        raise IRFormatError("an opaque implementation's data must be {'class': ..., 'attributes': {...}} and "
                            "optionally 'init' (and 'owns': true), or 'configs' and 'objects'", implementation=impl,
                            hint="re-save the IR with torch2ir")
    if "init" in data:
        _check_init(data["init"], impl)
    if "configs" in data:
        _check_init(data["configs"], impl, "configs")
    if "objects" in data:
        _check_objects(data["objects"], impl)
    named = [*data.get("configs", {}), *data.get("objects", {})]
    if named:
        clash = set(named) & set(data["attributes"]) if isinstance(data["attributes"], Mapping) else set()
        if len(set(named)) != len(named):
            clash |= {n for n in named if named.count(n) > 1}
        if clash:
            raise IRFormatError(f"opaque attribute {sorted(clash)[0]!r} is recorded twice (attributes, configs, "
                                "objects)",
                                implementation=impl, key=sorted(clash)[0], hint="the file is corrupt or hostile")
    if not is_class_name(data["class"]):
        raise UnsafeTargetError(f"opaque class {str(data['class'])[:100]!r} is not a dotted Python class name",
                                implementation=impl, key="class", hint="the file is corrupt or hostile")
    attributes = data["attributes"]
    if not isinstance(attributes, Mapping):
        raise IRFormatError("an opaque implementation's attributes must be a mapping", implementation=impl,
                            key="attributes", hint="re-save the IR with torch2ir")
    for name, value in attributes.items():
        if not is_attribute_name(name):
            raise UnsafeTargetError(f"opaque attribute name {str(name)[:100]!r} is not allowed", implementation=impl,
                                    key="attributes", hint="attribute names are identifiers, neither dunder names "
                                    "nor nn.Module's own (forward, training, _parameters, ...)")
        why = check_value(value)
        if why is not None:
            raise IRFormatError(f"opaque attribute {name!r} is not a plain value ({why})", implementation=impl,
                                key=name, hint="attributes are numbers, strings, None, lists and dicts of those")


def check_owned(data: Any, impl: str) -> None:
    """Check the data of an ``"owned"`` implementation: ``{"class": dotted name, "attributes": {name: plain}}``.

    Raises:
        IRFormatError: another form, or an attribute value that is not plain.
        UnsafeTargetError: the class is not a dotted Python name, or an attribute name is not allowed.
    """
    if not isinstance(data, Mapping) or set(data) != {"class", "attributes"} or \
            not isinstance(data["attributes"], Mapping):
        raise IRFormatError("an owned implementation's data must be {'class': ..., 'attributes': {...}}",
                            implementation=impl, hint="re-save the IR with torch2ir")
    if not is_class_name(data["class"]):
        raise UnsafeTargetError(f"owned class {str(data['class'])[:100]!r} is not a dotted Python class name",
                                implementation=impl, key="class", hint="the file is corrupt or hostile")
    for name, value in data["attributes"].items():
        if not is_attribute_name(name):
            raise UnsafeTargetError(f"owned attribute name {str(name)[:100]!r} is not allowed", implementation=impl,
                                    key="attributes", hint="the file is corrupt or hostile")
        why = check_value(value)
        if why is not None:
            raise IRFormatError(f"owned attribute {name!r} is not a plain value ({why})", implementation=impl,
                                key=name, hint="attributes are numbers, strings, None, lists and dicts of those")


def owner_of(key: str, ir: Mapping[str, Any]) -> str | None:
    """The key of the opaque leaf that owns the ``"owned"`` implementation ``key``: its nearest ancestor that is
    not owned, when that one is an opaque leaf with ``"owns": true``; else ``None``."""
    from .ir import parent_key

    parent = parent_key(key, ir)
    while parent != "root" and ir[parent].type == OWNED_TYPE:
        parent = parent_key(parent, ir)
    impl = ir[parent]
    if impl.type == OPAQUE_TYPE and isinstance(impl.data, Mapping) and impl.data.get("owns") is True:
        return parent
    return None


#: IR types of containers: a module below one hangs, for what calls it, under the container's own parent.
CONTAINER_IR_TYPES = frozenset({"modulelist", "moduledict", "sequential"})


def traced_alone(ir: Mapping[str, Any]) -> list[str]:
    """Keys of the implementations traced on their own: with a graph, directly below an opaque leaf (through
    graph-less containers). No graph calls them, the opaque leaf's own forward does, so a rebuild guards their
    inputs as it guards the root's. Read from the IR's keys and types only."""
    from .ir import parent_key

    out = []
    for key, impl in ir.items():
        if key == "root" or not impl.node_count:
            continue
        parent = parent_key(key, ir)
        while parent != "root" and ir[parent].type in CONTAINER_IR_TYPES and not ir[parent].node_count:
            parent = parent_key(parent, ir)
        if ir[parent].type == OPAQUE_TYPE:
            out.append(key)
    return out


def opaque_classes(impls: Iterable[Any]) -> dict[str, list[str]]:
    """``{class name: [implementation keys]}`` of the opaque implementations of ``impls``."""
    out: dict[str, list[str]] = {}
    for impl in impls:
        if impl.type == OPAQUE_TYPE and isinstance(impl.data, Mapping):
            out.setdefault(str(impl.data.get("class")), []).append(impl.name)
    return out


__all__ = ["CONFIG_TAG", "CONTAINER_IR_TYPES", "MAX_DEPTH", "OPAQUE_TYPE", "OWNED_TYPE", "check_data", "check_owned",
           "check_value", "config_classes", "is_attribute_name", "is_class_name", "named_classes", "opaque_classes",
           "owner_of", "same_package", "traced_alone"]
