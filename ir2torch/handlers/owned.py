"""Opaque leaves that own their subtree (``"owns": true``, a brevitas layer) and the ``"owned"`` modules below them.

An owning leaf is constructed by its allowed class from its recorded arguments (:mod:`ir2torch.handlers.opaque`),
some of which are injector records (:mod:`common.injectors`) made here into injector classes by
:func:`injector`: the recorded class (allowed, or of the opaque class's package) with the recorded values let
(classes of ``torch.nn`` or allowed ones, members of allowed enum classes, plain values, nested injectors).

Every module below it is an ``"owned"`` implementation: the constructor made it, so :func:`take_owned` takes it
from the constructed leaf at its path (after checking its class is the recorded one) and sets its recorded plain
attributes, instead of building it. The builder of the type itself returns a placeholder that is never attached.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any

from torch import nn

from common.errors import BuildError, IRFormatError
from common.injectors import CLASS_TAG, ENUM_TAG, INJECTOR_TAG, is_injector, tag_of
from common.ir import IR, Implementation
from common.opaque import OPAQUE_TYPE, OWNED_TYPE, check_owned, owner_of
from ir2torch.handlers._imports import import_named
from ir2torch.rebuild.paths import relative_path

#: ``$class`` values of these packages are allowed without ``allow=`` (module classes, checked on import).
FREE_CLASS_PREFIX = "torch.nn.modules."


def _import(name: str, impl: str) -> Any:
    """The object the dotted ``name`` names, importing the longest importable module prefix (the caller checked
    that ``name`` is allowed).

    Raises:
        BuildError: nothing importable has that name.
    """
    try:
        return import_named(name)
    except LookupError:
        raise BuildError(f"{name!r} cannot be imported", implementation=impl,
                         hint="install the library that defines it, or register a builder (Ir2Torch.register_opaque)"
                         ) from None


def injector(value: Mapping[str, Any], impl: str) -> type:
    """The injector class an injector record (checked, its classes allowed) stands for.

    Raises:
        BuildError: a class is not what the record says it is (an injector, a class, an enum with that member).
    """
    record = value[INJECTOR_TAG]
    base = _import(str(record["class"]), impl)
    if not is_injector(base):
        raise BuildError(f"injector class {record['class']!r} is not an injector", implementation=impl,
                         hint="the file is corrupt or names another library's class")
    lets = {name: _let_value(item, impl) for name, item in record["let"].items()}
    return base.let(**lets) if lets else base


def _let_value(item: Any, impl: str) -> Any:
    tag = tag_of(item)
    if tag == INJECTOR_TAG:
        return injector(item, impl)
    if tag == CLASS_TAG:
        cls = _import(str(item[CLASS_TAG]), impl)
        if not isinstance(cls, type) or (str(item[CLASS_TAG]).startswith(FREE_CLASS_PREFIX)
                                         and not issubclass(cls, nn.Module)):
            raise BuildError(f"{item[CLASS_TAG]!r} is not a class (a torch.nn one: a module class)",
                             implementation=impl, hint="the file is corrupt or hostile")
        return cls
    if tag == ENUM_TAG:
        cls = _import(str(item[ENUM_TAG]["class"]), impl)
        member = str(item[ENUM_TAG]["member"])
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)) or member not in cls.__members__:
            raise BuildError(f"{item[ENUM_TAG]['class']!r} is no enum class with a member {member!r}",
                             implementation=impl, hint="the file is corrupt or names another release's enum")
        return cls.__members__[member]
    return copy.deepcopy(item)


def build_owned(impl: Implementation) -> nn.Module:
    """A placeholder for an owned module (:func:`take_owned` replaces it by the one its owner's constructor made)."""
    check_owned(impl.data, impl.name)
    return nn.Module()


def take_owned(ir: IR, modules: MutableMapping[str, nn.Module]) -> None:
    """Replace each owned implementation's placeholder in ``modules`` by the module its owner's constructor made at
    its path, and set its recorded plain attributes.

    Raises:
        IRFormatError: an owned implementation without an owning opaque leaf above it.
        BuildError: the constructor made no module there, or one of another class.
    """
    from ir2torch.handlers.opaque import check_attribute

    for key, impl in ir.items():
        if impl.type != OWNED_TYPE:
            continue
        owner = owner_of(key, ir) if key != "root" else None
        if owner is None:
            raise IRFormatError(f"the owned implementation {key!r} has no opaque leaf above it that owns it",
                                implementation=key, hint="the file is corrupt or hostile")
        try:
            module = modules[owner].get_submodule(relative_path(owner, key))
        except AttributeError:
            raise BuildError(f"constructing the opaque leaf {owner!r} made no module at {key!r}", implementation=key,
                             hint="the installed library makes this layer otherwise than the one it was converted "
                             "with") from None
        cls = type(module)
        if f"{cls.__module__}.{cls.__qualname__}" != impl.data["class"]:
            raise BuildError(f"constructing the opaque leaf {owner!r} made a {cls.__module__}.{cls.__qualname__} at "
                             f"{key!r}, where the IR records a {impl.data['class']}", implementation=key,
                             hint="the installed library makes this layer otherwise than the one it was converted "
                             "with")
        for name, value in impl.data["attributes"].items():
            check_attribute(cls, name, key)
            vars(module)[name] = copy.deepcopy(value)
        modules[key] = module


def restore_attributes(ir: IR, modules: Mapping[str, nn.Module]) -> None:
    """Set the recorded plain attributes of every opaque and owned module again, after the state dict is loaded:
    a module's loading may change them (brevitas' runtime-statistics scale marks its statistics as collected when
    its scale is loaded), and the rebuild must continue from where the original was."""
    root = modules["root"]
    for key, impl in ir.items():
        if impl.type in (OWNED_TYPE, OPAQUE_TYPE) and isinstance(impl.data, Mapping):
            module = root.get_submodule(key) if impl.type == OWNED_TYPE and key != "root" else modules[key]
            for name, value in impl.data.get("attributes", {}).items():
                vars(module)[name] = copy.deepcopy(value)  # names checked when the module was built


@contextlib.contextmanager
def kept_quantizers(ir: IR) -> Iterator[None]:
    """While a state dict is loaded into a rebuild with brevitas layers that own their subtree: brevitas makes a
    layer's quantizer modules anew when its state is loaded (``brevitas.config.REINIT_ON_STATE_DICT_LOAD``), which
    would drop what the IR restored into the ones its constructor made (the runtime statistics a scale collected,
    kept in a buffer outside the state dict). The rebuild keeps them, so the layer continues exactly where the
    original was, in eval and train mode alike; the setting is put back afterwards."""
    config = sys.modules.get("brevitas.config")
    owning = any(impl.type == OPAQUE_TYPE and isinstance(impl.data, Mapping) and impl.data.get("owns") is True
                 and str(impl.data.get("class")).startswith("brevitas.") for impl in ir.values())
    if config is None or not owning or not hasattr(config, "REINIT_ON_STATE_DICT_LOAD"):
        yield
        return
    saved = config.REINIT_ON_STATE_DICT_LOAD
    config.REINIT_ON_STATE_DICT_LOAD = False
    try:
        yield
    finally:
        config.REINIT_ON_STATE_DICT_LOAD = saved


def register(converter: Any) -> None:
    converter.register(OWNED_TYPE, build_owned)


__all__ = ["FREE_CLASS_PREFIX", "build_owned", "injector", "register", "kept_quantizers", "restore_attributes",
           "take_owned"]
