"""Opaque leaves (opt-in): modules ``torch.export`` cannot trace, kept out of the trace as leaves of type
``"opaque"`` run by their own forward.

- :class:`OpaqueConverter` makes the module table see every instance of an opaque class as a handled leaf of IR
  type :data:`common.opaque.OPAQUE_TYPE` whose data is :func:`opaque_data` (its qualified class and its own plain
  attributes); its parameters and buffers are recorded as state and its children as implementations, as for any
  handled leaf;
- :func:`stand_ins` keeps them out of the export: one eager call of a *copy* of the model records each opaque
  module's outputs (shapes, strides, dtypes), and during the export each opaque module's forward is replaced by a
  stand-in returning fresh tensors of that metadata (:func:`torch2ir.trace_once.trace.stand_in`). Its call signature is
  preserved (a class outside ``torch.nn``: :func:`torch2ir.frontend.export.needs_signature`), so its inputs and outputs
  are wired in its parent's graph like any handled leaf's.
"""

from __future__ import annotations

import copy
import functools
import inspect
import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.errors import ConversionError
from common.opaque import CONFIG_TAG, OPAQUE_TYPE, OWNED_TYPE, check_value, is_attribute_name, is_class_name
from torch2ir.hierarchy.tensormeta import state_record
from torch2ir.opaque.attribution import qualified_name
from torch2ir.opaque.constructed import holds_injectors, owned_data, owning_data
from torch2ir.opaque.injectors import is_injector

#: Instance attributes every ``nn.Module`` has: not the module's own.
_MODULE_ATTRIBUTES = frozenset(vars(nn.Module()))


def own_attributes(module: nn.Module) -> dict[str, Any]:
    """The module's own instance attributes (not ``nn.Module``'s bookkeeping, not a stand-in ``forward``)."""
    return {k: v for k, v in vars(module).items() if k not in _MODULE_ATTRIBUTES and k != "forward"}


def opaque_data(module: nn.Module, path: str = "") -> dict[str, Any]:
    """``{"class": qualified name, "attributes": {name: plain value}}`` of an opaque module.

    Raises:
        ConversionError: an attribute is not plain (ints, floats, bools, strings, None, and lists, tuples and
            string-keyed dicts of those), naming the attribute and the module.
    """
    if not is_class_name(qualified_name(module)):
        raise ConversionError(
            f"the opaque leaf {path or '(root)'} has class {qualified_name(module)}, which cannot be imported by that "
            "name when the IR is rebuilt", implementation=path or "root",
            hint="define the class at the top level of a module (not inside a function)")
    if holds_injectors(module):  # a brevitas layer: made again by its constructor, with everything below it
        try:
            return owning_data(module, path)
        except ConversionError:
            if any(is_injector(value) for value in vars(module).values()):
                raise  # else a block of brevitas layers, which may own theirs: an opaque leaf as any other
    attributes, others = {}, {}
    for name, value in own_attributes(module).items():
        if type(value) is torch.Tensor:  # kept as a constant of its state (keep_tensor_attributes)
            continue
        if not is_attribute_name(name):
            raise ConversionError(
                f"the opaque leaf {path or '(root)'} ({qualified_name(module)}) holds attribute {name!r}, a name a "
                "rebuild does not set", implementation=path or "root", key=name,
                hint="rename the attribute (not forward, training, a dunder or nn.Module's own)")
        if check_value(value) is None:
            attributes[name] = value
        else:
            others[name] = value
    data: dict[str, Any] = {"class": qualified_name(module), "attributes": attributes}
    if others:  # a config object, a function...: the module is constructed again from its recorded arguments
        try:
            data["init"] = constructor_arguments(module, others, path)
        except ConversionError:
            # or, when its other attributes are all configuration objects or plain helper objects (torchvision's
            # BoxCoder), they are set as attributes too, on an instance made without running __init__
            configs = {name: _encode_argument(value) for name, value in others.items()}
            objects = {name: _encode_object(value) for name, value in others.items()
                       if not (isinstance(configs[name], dict) and CONFIG_TAG in configs[name])}
            if any(o is None for o in objects.values()) or not all(
                    _loads_back(others[name], c) for name, c in configs.items() if name not in objects):
                raise
            if len(objects) < len(configs):
                data["configs"] = {name: c for name, c in configs.items() if name not in objects}
            if objects:
                data["objects"] = objects
    return data


def _loads_back(value: Any, encoded: Any) -> bool:
    """Whether the configuration object ``encoded`` records is made again with the same values."""
    try:
        return _config_values(decode_config(encoded[CONFIG_TAG], type(value))) == _config_values(value)
    except Exception:  # noqa: BLE001 - its class refuses what its to_dict gave
        return False


def _encode_object(value: Any) -> dict[str, Any] | None:
    """A plain helper object (not a module or class: an instance of an importable class made by ``object.__new__``,
    every instance attribute a plain value) as ``{"class", "attributes"}``, or a module-level function as
    ``{"function": its qualified name}``, else ``None``."""
    cls = type(value)
    if inspect.isfunction(value):  # a module-level function of a package (torchvision's box_iou)
        name = f"{value.__module__}.{value.__qualname__}"
        home = sys.modules.get(value.__module__)
        if is_class_name(name) and "." not in value.__qualname__ and getattr(home, value.__name__, None) is value:
            return {"function": name}
        return None
    if isinstance(value, (nn.Module, type, functools.partial)) or inspect.isroutine(value) or \
            not is_class_name(qualified_name(value)):
        return None
    if getattr(cls, "__slots__", None) or cls.__new__ is not object.__new__ or not hasattr(value, "__dict__"):
        return None
    attributes = dict(vars(value))
    if not all(is_attribute_name(k) for k in attributes) or check_value(attributes) is not None:
        return None
    return {"class": qualified_name(value), "attributes": attributes}


def keep_tensor_attributes(ir: Any, modules: Iterable[tuple[str, nn.Module]]) -> None:
    """Record each plain tensor attribute of the opaque ``modules`` (Qwen2-VL's ``rope_deltas``, state its forward
    keeps between calls) as a constant of its implementation, its value in ``ir.tensors``: a rebuild sets it."""
    for path, module in modules:
        key = path or "root"
        if key not in ir:
            continue
        for name, value in own_attributes(module).items():
            if type(value) is torch.Tensor and name not in ir[key].state:
                ir[key].state[name] = state_record(value, "constant")
                ir.tensors[f"{path}.{name}" if path else name] = value.detach().clone()


def _refuse(module: nn.Module, path: str, name: str, why: str) -> ConversionError:
    return ConversionError(
        f"the opaque leaf {path or '(root)'} ({qualified_name(module)}) holds attribute {name!r} of type "
        f"{type(getattr(module, name, None)).__name__}, which an IR cannot record: {why}",
        implementation=path or "root",
        key=name, hint="an opaque leaf keeps plain attributes (numbers, strings, None, lists, tuples, dicts of those) "
        "and is constructed again from arguments it keeps as attributes of the same name (a transformers config "
        "included); make the module keep such, or register a handler for its class")


def _encode_argument(value: Any) -> Any:
    """A constructor argument as the IR records it (plain, or a configuration object), else ``None``."""
    if check_value(value) is None:
        return value
    to_dict, from_dict = getattr(value, "to_dict", None), getattr(type(value), "from_dict", None)
    if callable(to_dict) and callable(from_dict) and is_class_name(qualified_name(value)):
        try:  # as JSON (transformers' id2label has int keys, which from_dict turns back into ints)
            values = json.loads(json.dumps(to_dict(), allow_nan=False, sort_keys=True))
        except (TypeError, ValueError):
            return None
        private = {k: v for k, v in vars(value).items() if k.startswith("_") and not k.startswith("__")
                   and check_value(v) is None}
        if isinstance(values, dict) and check_value(values) is None:
            return {CONFIG_TAG: {"class": qualified_name(value), "values": values, "private": private}}
    return None


def decode_config(config: Mapping[str, Any], cls: type) -> Any:
    """The configuration object ``{"class", "values", "private"}`` records, of class ``cls``."""
    obj = cls.from_dict(dict(config["values"]))
    for name, value in config["private"].items():
        setattr(obj, name, copy.deepcopy(value))
    return obj


def constructor_arguments(module: nn.Module, others: Mapping[str, Any], path: str) -> dict[str, Any]:
    """The arguments that construct ``module`` again, read from its attributes of the same names as the parameters
    of its class's ``__init__`` (parameters with defaults may be absent), checked by constructing one on ``meta``
    from the recorded form: every attribute the IR does not record as a value must come out of that construction
    of the same type (a configuration object with the same values), its children and its parameters and buffers at
    the same paths, of the same shapes. Anything else is refused: the rebuild would differ silently.

    Raises:
        ConversionError: naming the first attribute the construction does not reproduce, or the parameter that no
            attribute holds.
    """
    cls = type(module)
    first = next(iter(others))
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        raise _refuse(module, path, first, "its class's __init__ has no signature to construct it again") from None
    init: dict[str, Any] = {}
    live: dict[str, Any] = {}
    # diffusers' register_to_config keeps the constructor's arguments in a mapping of their own
    registered = vars(module).get("_internal_dict")
    registered = dict(registered) if isinstance(registered, Mapping) else {}
    defaulted = registered.get("_use_default_values")  # the arguments it was not given: not given again
    defaulted = set(defaulted) if isinstance(defaulted, list) else set()
    kept = {**{k: v for k, v in vars(module).items() if k not in defaulted},
            **{k: v for k, v in registered.items() if k not in defaulted and not k.startswith("_")}}
    for name, param in list(signature.parameters.items())[1:]:
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if name not in kept:
            if param.default is inspect.Parameter.empty:
                raise _refuse(module, path, first, f"{cls.__qualname__}.__init__ takes {name!r}, which the module does "
                                                   "not keep as an attribute")
            continue
        encoded = _encode_argument(kept[name])
        if encoded is None and kept[name] is not None:
            raise _refuse(module, path, name, "it is a constructor argument that is neither plain nor a configuration "
                                              "object (to_dict / from_dict)")
        init[name] = encoded
        try:
            live[name] = decode_config(encoded[CONFIG_TAG], type(kept[name])) \
                if isinstance(encoded, dict) and CONFIG_TAG in encoded else copy.deepcopy(encoded)
        except Exception as exc:  # its class does not take back what to_dict gave (a validator of its own)
            raise _refuse(module, path, name, f"its configuration does not load back from its to_dict() "
                                              f"({type(exc).__name__}: {str(exc)[:120]})") from exc
    # on meta, unless an attribute holds tensors: their values are compared
    device = "cpu" if any(isinstance(t, torch.Tensor) for t in pytree.tree_leaves(dict(others))) else "meta"
    try:
        with torch.device(device):
            fresh = cls(**live)
    except Exception as exc:  # the class cannot be constructed from what was recorded
        raise _refuse(module, path, first, f"constructing {cls.__qualname__} from its recorded arguments failed "
                                           f"({type(exc).__name__}: {str(exc)[:120]})") from exc
    for name, value in others.items():
        if not _same(vars(fresh).get(name), value):
            raise _refuse(module, path, name, f"constructing {cls.__qualname__} again from its recorded arguments "
                                              "does not reproduce it")
    # its own state and where its children hang (their classes may differ: a rebuilt model's children are
    # generated modules, and a rebuild replaces the constructor's children by the IR's own)
    own = {**dict(module.named_parameters(recurse=False)), **dict(module.named_buffers(recurse=False))}
    made = {**dict(fresh.named_parameters(recurse=False)), **dict(fresh.named_buffers(recurse=False))}
    if {k for k, _ in fresh.named_modules()} != {k for k, _ in module.named_modules()} or \
            {k: tuple(t.shape) for k, t in made.items()} != {k: tuple(t.shape) for k, t in own.items()}:
        raise _refuse(module, path, first, f"constructing {cls.__qualname__} again from its recorded arguments gives "
                                           "other children, parameters or buffers")
    return init


def _same_arguments(again: tuple, value: tuple) -> bool:
    """A partial's arguments: plain values equal (and of the same type), others as :func:`_same`."""
    pairs = zip(again, value, strict=False)
    return len(again) == len(value) and all(
        type(a) is type(b) and a == b if check_value(b) is None else _same(a, b) for a, b in pairs)


def _same(again: Any, value: Any) -> bool:
    """Whether a freshly constructed module's attribute stands for the original's: same type; tensors of the same
    shape, dtype and values; configuration objects with the same values; containers item by item; functions and
    methods the same function; ``functools.partial`` objects the same function with equal arguments (transformers'
    ``GELUTanh`` holds ``partial(gelu, approximate="tanh")``). Other objects: the same type (their state is the
    constructor's)."""
    if type(again) is not type(value):
        return False
    if isinstance(value, functools.partial):
        keys = tuple(value.keywords)  # compared by name: the two may hold them in another order
        return again.func is value.func and _same_arguments(again.args, value.args) and \
            again.keywords.keys() == value.keywords.keys() and \
            _same_arguments(tuple(again.keywords[k] for k in keys), tuple(value.keywords[k] for k in keys))
    if isinstance(value, torch.Tensor):
        return again.shape == value.shape and again.dtype == value.dtype and torch.equal(again.cpu(), value.cpu())
    if isinstance(value, dict):
        return again.keys() == value.keys() and all(_same(again[k], value[k]) for k in value)
    if isinstance(value, (list, tuple)):
        return len(again) == len(value) and all(_same(a, b) for a, b in zip(again, value, strict=True))
    if callable(getattr(value, "to_dict", None)):
        return _config_values(again) == _config_values(value)
    if callable(value) and not isinstance(value, type):
        return getattr(again, "__func__", again) is getattr(value, "__func__", value)
    return True


def _config_values(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if not callable(to_dict):
        return None
    private = {k: v for k, v in vars(value).items() if k.startswith("_") and check_value(v) is None}
    return to_dict(), private


class OpaqueConverter:
    """A view of a ``Torch2Ir`` converter for which every instance of ``classes`` is a handled leaf of type
    ``"opaque"`` (before any handler of its own class), and so is each module of ``inner`` (instances inside an
    opaque leaf that neither have a handler nor are containers: never called in a graph, they are rebuilt as their
    own class too, so the leaf's real forward can call them). Each module of ``owned`` (below an opaque leaf that
    owns its subtree, :mod:`torch2ir.opaque.constructed`) is a handled leaf of type ``"owned"``."""

    def __init__(self, base: Any, classes: Iterable[type], inner: Iterable[nn.Module] = (),
                 owned: Iterable[nn.Module] = ()) -> None:
        self._base = base
        self.classes = frozenset(classes)
        self.inner = {id(m) for m in inner}
        self._inner_classes = frozenset(type(m) for m in inner)
        self.owned = {id(m) for m in owned}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def _opaque(self, module: nn.Module) -> bool:
        return type(module) in self.classes or id(module) in self.inner

    def has_handler(self, module: nn.Module) -> bool:
        return id(module) in self.owned or self._opaque(module) or self._base.has_handler(module)

    def type_of_module(self, module: nn.Module) -> str:
        """The IR type of the handled leaf ``module`` (an owned module's is ``"owned"``, whatever its class)."""
        return OWNED_TYPE if id(module) in self.owned else self.type_of(type(module))

    def type_of(self, cls: type) -> str:
        # asked for leaves only: an instance of an inner class outside opaque leaves is not one
        if cls in self.classes or cls in self._inner_classes:
            return OPAQUE_TYPE
        return self._base.type_of(cls)

    def attributes(self, module: nn.Module) -> dict[str, Any]:
        if id(module) in self.owned:
            return owned_data(module)
        return opaque_data(module) if self._opaque(module) else self._base.attributes(module)


def inner_modules(modules: list[tuple[str, nn.Module]], converter: Any, containers: Iterable[type],
                  traced: Iterable[str] = ()) -> list[tuple[str, nn.Module]]:
    """``(path, module)`` of the modules inside the opaque ``modules`` that have no handler of ``converter``, are
    no containers and are neither one of the ``traced`` paths (children converted on their own,
    :mod:`torch2ir.opaque.children`) nor inside one: they are kept as opaque leaves too (:class:`OpaqueConverter`)."""
    containers = tuple(containers)
    traced = tuple(traced)
    out = []
    for path, module in modules:
        for sub, child in module.named_modules(prefix=path):
            if any(sub == t or sub.startswith(t + ".") for t in traced):
                continue
            if sub != path and type(child) not in containers and not converter.has_handler(child):
                out.append((sub, child))
    return out


def opaque_modules(model: nn.Module, classes: Iterable[type]) -> list[tuple[str, nn.Module]]:
    """``(path, module)`` of each distinct instance of ``classes`` in ``model`` not inside another one."""
    classes = tuple(classes)
    found: list[tuple[str, nn.Module]] = []
    seen: set[int] = set()
    for path, module in model.named_modules():
        if type(module) in classes and id(module) not in seen and not any(
                not p or path.startswith(p + ".") for p, _ in found):
            found.append((path, module))
            seen.add(id(module))
    return found


def opaque_classes_of(model: nn.Module, opaque: Iterable[type | str]) -> list[type]:
    """The classes ``opaque`` names (classes, or qualified names matched against the classes of ``model``'s
    modules); a class that no module of ``model`` has is kept (it makes nothing opaque).

    Raises:
        TypeError: an entry is neither an ``nn.Module`` subclass nor a string.
    """
    if isinstance(opaque, str):
        raise TypeError(f'opaque must be "auto" or a list of module classes, not {opaque!r}')
    present = {qualified_name(type(m)): type(m) for m in model.modules()}
    classes = []
    for entry in opaque:
        if isinstance(entry, type) and issubclass(entry, nn.Module):
            classes.append(entry)
        elif isinstance(entry, str):
            if entry in present:
                classes.append(present[entry])
        else:
            raise TypeError(f"opaque=[...] takes nn.Module subclasses or their qualified names, not {entry!r}")
    return classes


__all__ = ["OpaqueConverter", "inner_modules", "keep_tensor_attributes", "opaque_classes_of", "opaque_data",
           "opaque_modules", "own_attributes"]
