"""Builder of opaque leaves (type ``"opaque"``, :mod:`common.opaque`): a module ``torch2ir`` kept out of the trace,
rebuilt as an instance of its own class that runs its own forward.

Nothing an IR names is imported unless the caller allowed it: :func:`check_allowed` refuses a file naming an opaque
class that is neither in the allow-list (``ir2torch.convert(..., allow=["package.module.Class"])``) nor given a
builder of its own (``Ir2Torch.register_opaque``), before anything is built. For an allowed class,
:func:`build_opaque`:

1. imports the longest importable module prefix of the name and reads the rest as attributes (nested classes);
2. requires an ``nn.Module`` subclass;
3. makes the instance from its recorded constructor arguments when the IR records them (``init``: a module that
   holds a configuration object or another value an IR cannot record; its configuration classes must be allowed
   or of the opaque class's package), running the allowed class's ``__init__``; otherwise **without running its**
   ``__init__`` (``cls.__new__(cls)``, then ``nn.Module.__init__``);
4. sets each recorded plain attribute in the instance's ``__dict__``, each plain helper object (``objects``:
   an instance of its class made by ``object.__new__``, its plain attributes set, its class allowed or of the
   opaque class's package) (refusing dunder names, ``nn.Module``'s own
   bookkeeping, and names that would shadow a method, property or other descriptor of the class), and each
   configuration object the IR records as an attribute (``configs``: a module whose constructor cannot be called
   again from its attributes, e.g. it takes a ``layer_idx`` it does not keep), built from its allowed class;
5. creates each recorded parameter and buffer the constructor did not make, empty, of its recorded shape and
   dtype, for the state dict to fill.

Its children are built from their own implementations and attached when the tree is assembled, as for any module.
What ``__init__`` would have set beyond plain attributes, parameters, buffers and children (a config object,
a cache, a lock) is missing: such a module was refused when converted, unless it had none.
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from common.errors import BuildError, UnsafeTargetError
from common.injectors import INJECTOR_TAG, injector_classes, tag_of
from common.ir import IR, Implementation
from common.opaque import (
    CONFIG_TAG,
    OPAQUE_TYPE,
    check_data,
    config_classes,
    is_attribute_name,
    opaque_classes,
    same_package,
)
from common.safety import Allowlist
from ir2torch.handlers._imports import import_named
from ir2torch.handlers.owned import FREE_CLASS_PREFIX, injector

Builder = Callable[[Implementation], nn.Module]


def check_allowed(ir: IR, allowlist: Allowlist, builders: Mapping[str, Builder]) -> None:
    """Raise one :class:`UnsafeTargetError` naming every opaque class of ``ir`` that is neither allowed nor has a
    registered builder, and every configuration class its constructor arguments name that is neither allowed nor
    of the package of its allowed opaque class; nothing is imported."""
    refused = {name: keys for name, keys in opaque_classes(ir.values()).items()
               if name not in builders and not allowlist.allows_class(name)}
    for impl in ir.values():
        if impl.type != OPAQUE_TYPE or not isinstance(impl.data, Mapping) or impl.data.get("class") in builders:
            continue
        free = {name for value in impl.data.get("init", {}).values() if tag_of(value) == INJECTOR_TAG
                for kind, name in injector_classes(value) if kind == "class" and name.startswith(FREE_CLASS_PREFIX)}
        for config in config_classes(impl.data):
            if not (config in free or allowlist.allows_class(config) or
                    same_package(config, str(impl.data.get("class")))):
                refused.setdefault(config, []).append(impl.name)
    if not refused:
        return
    names = sorted(refused)
    shown = ", ".join(f"{n} ({', '.join(refused[n][:3])}{', ...' if len(refused[n]) > 3 else ''})" for n in names[:8])
    raise UnsafeTargetError(
        f"the IR holds opaque leaves of module classes that are not allowed: {shown}; rebuilding them would import "
        "their modules and run their code", implementation=refused[names[0]][0],
        hint=f"if you trust them, opt in: ir2torch.convert(ir, state, allow={names[:8]!r}), or register a "
        "builder: Ir2Torch.register_opaque(name, impl -> nn.Module)")


def resolve_class(name: str, impl: str) -> type[nn.Module]:
    """The ``nn.Module`` subclass ``name`` (already allowed) names, importing its module.

    Raises:
        BuildError: nothing importable has that name, or it is not an ``nn.Module`` subclass.
    """
    try:
        obj = import_named(name)
    except LookupError:
        raise BuildError(f"opaque class {name!r} cannot be imported", implementation=impl,
                         hint="install the library that defines it, or register a builder (Ir2Torch.register_opaque)"
                         ) from None
    if not (isinstance(obj, type) and issubclass(obj, nn.Module)):
        raise BuildError(f"opaque class {name!r} is a {type(obj).__name__}, not an nn.Module subclass",
                         implementation=impl, hint="an opaque leaf names the module class it was converted from")
    return obj


def check_attribute(cls: type, name: str, impl: str) -> None:
    if not is_attribute_name(name):
        raise UnsafeTargetError(f"opaque attribute name {name!r} is not allowed", implementation=impl, key=name,
                                hint="the file is corrupt or hostile")
    try:
        static = inspect.getattr_static(cls, name)
    except AttributeError:
        return
    if callable(static) or hasattr(type(static), "__get__") or hasattr(type(static), "__set__"):
        raise UnsafeTargetError(f"opaque attribute {name!r} would shadow {cls.__qualname__}.{name} "
                                f"(a {type(static).__name__})", implementation=impl, key=name,
                                hint="the file is corrupt or hostile: attributes are plain values")


def build_opaque(impl: Implementation) -> nn.Module:
    """The module of an allowed opaque leaf (see the module docstring); the caller checked the allow-list
    (:func:`check_allowed`)."""
    check_data(impl.data, impl.name)
    cls = resolve_class(impl.data["class"], impl.name)
    for name in impl.data["attributes"]:
        check_attribute(cls, name, impl.name)
    if "init" in impl.data:  # constructed from its recorded arguments (the class is allowed: its code is trusted)
        module = cls(**_arguments(impl))
    else:
        module = cls.__new__(cls)
        nn.Module.__init__(module)
    for name, value in impl.data["attributes"].items():
        vars(module)[name] = copy.deepcopy(value)
    for name, value in impl.data.get("configs", {}).items():  # configuration objects set as attributes
        check_attribute(cls, name, impl.name)
        vars(module)[name] = _config(value[CONFIG_TAG], impl.name)
    for name, value in impl.data.get("objects", {}).items():  # plain helper objects (torchvision's BoxCoder)
        check_attribute(cls, name, impl.name)
        vars(module)[name] = _object(value, impl.name)
    for name, record in impl.state.items():
        kind = record.get("kind")
        if kind not in ("parameter", "buffer") or name in module._parameters or name in module._buffers:
            continue  # made by the constructor (of the recorded shape: checked when converted)
        if not is_attribute_name(name):
            raise UnsafeTargetError(f"opaque state name {name!r} is not allowed", implementation=impl.name, key=name)
        tensor = torch.empty(tuple(record["shape"]), dtype=record["dtype"])
        if kind == "parameter":
            module.register_parameter(name, nn.Parameter(tensor, requires_grad=record.get("requires_grad", True)))
        else:
            module.register_buffer(name, tensor, persistent=record.get("persistent", True))
    return module


def _arguments(impl: Implementation) -> dict[str, Any]:
    """The constructor arguments ``impl.data["init"]`` records (configuration objects built from their classes,
    checked by :func:`check_allowed` to be allowed)."""
    out: dict[str, Any] = {}
    for name, value in impl.data["init"].items():
        if isinstance(value, Mapping) and CONFIG_TAG in value:
            out[name] = _config(value[CONFIG_TAG], impl.name)
        elif tag_of(value) == INJECTOR_TAG:  # a brevitas quantizer's injector
            out[name] = injector(value, impl.name)
        else:
            out[name] = copy.deepcopy(value)
    return out


def _config(config: Mapping[str, Any], impl: str) -> Any:
    """The configuration object ``{"class", "values", "private"}`` records (its class checked by
    :func:`check_allowed` to be allowed)."""
    cls = _config_class(config["class"], impl)
    out = cls.from_dict(copy.deepcopy(dict(config["values"])))
    for attr, item in config["private"].items():
        setattr(out, attr, copy.deepcopy(item))
    return out


def _object(record: Mapping[str, Any], impl: str) -> Any:
    """A plain helper object ``{"class", "attributes"}`` records: an instance of its class (allowed, or of the
    opaque class's package: checked by :func:`check_allowed`) made by ``object.__new__``, without running its
    ``__init__``, its recorded attributes set in its ``__dict__``.

    Raises:
        BuildError: the class cannot be imported, is a module class, has a ``__new__`` or ``__slots__`` of its own.
        UnsafeTargetError: an attribute would shadow a method, property or other descriptor of the class.
    """
    if "function" in record:
        return _function(record["function"], impl)
    name = record["class"]
    try:
        obj: Any = import_named(name)
    except LookupError:
        obj = None
    if not isinstance(obj, type) or issubclass(obj, nn.Module) or obj.__new__ is not object.__new__ or \
            "__slots__" in vars(obj) or obj.__module__ in ("builtins", "os", "sys", "subprocess"):
        raise BuildError(f"object class {name!r} cannot be imported or is not a plain class (a module class, its own "
                         "__new__ or __slots__)", implementation=impl,
                         hint="an opaque leaf's helper objects are instances of plain classes of its package")
    for attribute in record["attributes"]:
        check_attribute(obj, attribute, impl)
    instance = object.__new__(obj)
    vars(instance).update(copy.deepcopy(dict(record["attributes"])))
    return instance


def _function(name: str, impl: str) -> Any:
    """The plain Python function ``name`` names (allowed, or of the opaque class's package).

    Raises:
        BuildError: nothing importable has that name, or it is no plain Python function (a builtin, a class).
    """
    with contextlib.suppress(LookupError):
        obj = import_named(name)
        if isinstance(obj, types.FunctionType):
            return obj
    raise BuildError(f"function {name!r} cannot be imported or is no plain Python function", implementation=impl,
                     hint="an opaque leaf's function attributes are module-level functions of its package")


def _config_class(name: str, impl: str) -> type:
    """The configuration class ``name`` (allowed), imported as :func:`resolve_class` imports an opaque class: a
    class with ``from_dict``.

    Raises:
        BuildError: it cannot be imported or is no configuration class.
    """
    with contextlib.suppress(LookupError):
        obj = import_named(name)
        if isinstance(obj, type) and callable(getattr(obj, "from_dict", None)):
            return obj
    raise BuildError(f"configuration class {name!r} cannot be imported or has no from_dict", implementation=impl,
                     hint="install the library that defines it, or register a builder (Ir2Torch.register_opaque)")


def register(converter: Any) -> None:
    converter.register(OPAQUE_TYPE, build_opaque)


__all__ = ["build_opaque", "check_allowed", "register", "resolve_class"]
