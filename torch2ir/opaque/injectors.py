"""Recording brevitas' quantizer injector classes (``dependencies`` injectors) as injector records
(:mod:`common.injectors`).

An injector derived at run time by ``.let(...)`` has no importable name: :func:`encode_injector` walks its bases
down to the first class importable by its qualified name and records the values let on the way (later lets over
earlier ones). A let value that refers to a live object the construction lets by itself (a module, a parameter,
a list of them: a proxy's ``module``, ``tracked_parameter_list``) is left out; constructing the layer again lets it
again, which :mod:`torch2ir.opaque.constructed` checks by constructing it. Nothing here imports brevitas: injectors
are recognised by their ``__dependencies__`` table.
"""

from __future__ import annotations

import enum
import inspect
import sys
from typing import Any

import torch
from torch import nn

from common.injectors import CLASS_TAG, ENUM_TAG, INJECTOR_TAG, MAX_INJECTOR_DEPTH, is_injector
from common.opaque import check_value, is_class_name


class InjectorError(Exception):
    """An injector (or a value it lets) that an injector record cannot hold; the message says which."""


def _dependencies(cls: type) -> Any:
    try:
        return type.__getattribute__(cls, "__dict__").get("__dependencies__")
    except AttributeError:
        return None


def importable_name(obj: Any) -> str | None:
    """``module.qualname`` when importing that name gives ``obj`` back (a class defined at a module's top level or
    nested in such a class), else ``None``."""
    try:
        module_name = type.__getattribute__(obj, "__module__") if isinstance(obj, type) else obj.__module__
        qualname = type.__getattribute__(obj, "__qualname__") if isinstance(obj, type) else obj.__qualname__
    except AttributeError:
        return None
    home = sys.modules.get(module_name)
    if home is None or "<" in qualname:
        return None
    found: Any = home
    for part in qualname.split("."):
        try:
            found = inspect.getattr_static(found, part)
        except AttributeError:
            return None
    name = f"{module_name}.{qualname}"
    return name if found is obj and is_class_name(name) else None


def _is_live(value: Any) -> bool:
    """A value that refers to live modules or tensors (let by the construction itself)."""
    if isinstance(value, (nn.Module, torch.Tensor)):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(v, (nn.Module, torch.Tensor)) for v in value)
    return False


def _spec_value(spec: Any) -> tuple[bool, Any]:
    """``(is a value, the value)`` a dependency spec ``(marker, attribute, args, have_defaults)`` lets: a raw value,
    a class (an init spec) or a nested injector; ``(False, None)`` for anything else (a function, ``this``, a
    package reference)."""
    target = spec[1] if isinstance(spec, tuple) and len(spec) == 4 else None
    if type(target).__name__ == "_RawSpec" and hasattr(target, "dependency"):
        return True, target.dependency
    if type(target).__name__ == "_NestedInjectorSpec" and is_injector(getattr(target, "injector", None)):
        return True, target.injector
    if isinstance(target, type):  # a class the injector instantiates (with injected arguments)
        return True, target
    return False, None


def encode_value(name: str, value: Any, depth: int) -> Any:
    """The record of one let value (see :mod:`common.injectors`).

    Raises:
        InjectorError: a value the record cannot hold, naming it.
    """
    if is_injector(value):
        return encode_injector(value, depth + 1)
    if isinstance(value, enum.Enum):
        cls_name = importable_name(type(value))
        if cls_name is None:
            raise InjectorError(f"{name!r} lets {value!r}, a member of an enum class that cannot be imported by name")
        return {ENUM_TAG: {"class": cls_name, "member": value.name}}
    if isinstance(value, type):
        cls_name = importable_name(value)
        if cls_name is None:
            raise InjectorError(f"{name!r} lets class {value.__qualname__}, which cannot be imported by name")
        return {CLASS_TAG: cls_name}
    if isinstance(value, dict) and any(isinstance(k, str) and k.startswith("$") for k in value):
        raise InjectorError(f"{name!r} lets a dict with a key starting with '$'")
    why = check_value(value)
    if why is not None:
        raise InjectorError(f"{name!r} lets {why}, which an IR cannot record")
    return value


def lets_of(injector: type) -> tuple[type, dict[str, Any]]:
    """The first importable class ``injector`` derives from and the live values let on the way (later lets over
    earlier ones; values referring to live modules or tensors left out).

    Raises:
        InjectorError: a level derives from several injectors, or lets something other than a value or a class.
    """
    levels: list[dict[str, Any]] = []
    current = injector
    for _ in range(64):
        if importable_name(current) is not None:
            break
        bases = type.__getattribute__(current, "__bases__")
        if len(bases) != 1 or not is_injector(bases[0]):
            raise InjectorError(f"injector {type.__getattribute__(current, '__qualname__')} derives from "
                                f"{len(bases)} classes and cannot be imported by name")
        base_deps = _dependencies(bases[0])
        level = {}
        for key, spec in _dependencies(current).items():
            if base_deps.get(key) is spec or key.startswith("__"):
                continue
            ok, value = _spec_value(spec)
            if not ok:
                raise InjectorError(f"injector {type.__getattribute__(current, '__qualname__')} lets {key!r} as a "
                                    "function or reference, which an IR cannot record")
            if not _is_live(value):
                level[key] = value
        levels.append(level)
        current = bases[0]
    else:
        raise InjectorError("injector derives through more than 64 classes")
    merged: dict[str, Any] = {}
    for level in reversed(levels):  # the base's lets first, the outermost last
        merged.update(level)
    return current, merged


def encode_injector(injector: type, depth: int = 0) -> dict[str, Any]:
    """The injector record of ``injector``.

    Raises:
        InjectorError: it cannot be recorded (naming why).
    """
    if depth > MAX_INJECTOR_DEPTH:
        raise InjectorError(f"injectors nest more than {MAX_INJECTOR_DEPTH} levels deep")
    base, lets = lets_of(injector)
    return {INJECTOR_TAG: {"class": importable_name(base),
                           "let": {k: encode_value(k, v, depth) for k, v in sorted(lets.items())}}}


def live_injector(injector: type) -> type:
    """The injector an injector record of ``injector`` stands for, made from live objects: its importable base with
    the recorded values let (what a rebuild makes from the record)."""
    base, lets = lets_of(injector)
    return base.let(**{k: live_injector(v) if is_injector(v) else v for k, v in lets.items()}) if lets else base


__all__ = ["InjectorError", "encode_injector", "importable_name", "is_injector", "lets_of", "live_injector"]
