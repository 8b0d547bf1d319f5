"""Opaque leaves (opt-in): modules ``torch.export`` cannot trace, kept out of the trace as leaves of type
``"opaque"`` run by their own forward.

- :class:`OpaqueConverter` makes the module table see every instance of an opaque class as a handled leaf of IR
  type :data:`common.opaque.OPAQUE_TYPE` whose data is :func:`opaque_data` (its qualified class and its own plain
  attributes); its parameters and buffers are recorded as state and its children as implementations, as for any
  handled leaf;
- :func:`stand_ins` keeps them out of the export: one eager call of a *copy* of the model records each opaque
  module's outputs (shapes, strides, dtypes), and during the export each opaque module's forward is replaced by a
  stand-in returning fresh tensors of that metadata (:func:`torch2ir.trace_once.stand_in`). Its call signature is
  preserved (a class outside ``torch.nn``: :func:`torch2ir.frontend.needs_signature`), so its inputs and outputs
  are wired in its parent's graph like any handled leaf's.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.errors import ConversionError
from common.opaque import OPAQUE_TYPE, check_value, is_attribute_name, is_class_name

from ..trace_once import output_record, stand_in
from .attribution import qualified_name

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
    attributes = {}
    for name, value in own_attributes(module).items():
        if not is_attribute_name(name):
            raise ConversionError(
                f"the opaque leaf {path or '(root)'} ({qualified_name(module)}) holds attribute {name!r}, a name a "
                "rebuild does not set", implementation=path or "root", key=name,
                hint="rename the attribute (not forward, training, a dunder or nn.Module's own)")
        why = check_value(value)
        if why is not None:
            raise ConversionError(
                f"the opaque leaf {path or '(root)'} ({qualified_name(module)}) holds attribute {name!r} of type "
                f"{type(value).__name__}, which an IR cannot record ({why})", implementation=path or "root",
                key=name, hint="an opaque leaf keeps only plain attributes (numbers, strings, None, lists, tuples, "
                "dicts of those): make the module keep it as such, or register a handler for its class")
        attributes[name] = value
    return {"class": qualified_name(module), "attributes": attributes}


class OpaqueConverter:
    """A view of a ``Torch2Ir`` converter for which every instance of ``classes`` is a handled leaf of type
    ``"opaque"`` (before any handler of its own class), and so is each module of ``inner`` (instances inside an
    opaque leaf that neither have a handler nor are containers: never called in a graph, they are rebuilt as their
    own class too, so the leaf's real forward can call them)."""

    def __init__(self, base: Any, classes: Iterable[type], inner: Iterable[nn.Module] = ()) -> None:
        self._base = base
        self.classes = frozenset(classes)
        self.inner = {id(m) for m in inner}
        self._inner_classes = frozenset(type(m) for m in inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._base, name)

    def _opaque(self, module: nn.Module) -> bool:
        return type(module) in self.classes or id(module) in self.inner

    def has_handler(self, module: nn.Module) -> bool:
        return self._opaque(module) or self._base.has_handler(module)

    def type_of(self, cls: type) -> str:
        # asked for leaves only: an instance of an inner class outside opaque leaves is not one
        if cls in self.classes or cls in self._inner_classes:
            return OPAQUE_TYPE
        return self._base.type_of(cls)

    def attributes(self, module: nn.Module) -> dict[str, Any]:
        return opaque_data(module) if self._opaque(module) else self._base.attributes(module)


def inner_modules(modules: list[tuple[str, nn.Module]], converter: Any,
                  containers: Iterable[type]) -> list[tuple[str, nn.Module]]:
    """``(path, module)`` of the modules inside the opaque ``modules`` that have no handler of ``converter`` and
    are no containers: they are kept as opaque leaves too (:class:`OpaqueConverter`)."""
    containers = tuple(containers)
    out = []
    for path, module in modules:
        for sub, child in module.named_modules(prefix=path):
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
                path.startswith(p + ".") for p, _ in found):
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


class StandIns:
    """The recorded outputs of each opaque module, per call, and the stand-in forwards that replay them."""

    def __init__(self, modules: list[tuple[str, nn.Module]], records: dict[str, list[Any]]) -> None:
        self.modules = modules
        self.records = records
        self.calls: dict[str, int] = {}

    def reset(self) -> None:
        self.calls.clear()

    def forward_of(self, path: str) -> Any:
        def forward(*args: Any, **kwargs: Any) -> Any:
            index = self.calls.get(path, 0)
            self.calls[path] = index + 1
            records = self.records[path]
            if index >= len(records):
                raise ConversionError(
                    f"the opaque leaf {path} is called more often while traced than in the eager call",
                    implementation=path, hint="an opaque leaf must be called alike in eager mode and while traced")
            return stand_in(records[index], writable=False)
        return forward

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        patched = []
        try:
            for path, module in self.modules:
                if "forward" not in vars(module):
                    module.forward = self.forward_of(path)
                    patched.append(module)
            yield
        finally:
            for module in patched:
                vars(module).pop("forward", None)


def record(model: nn.Module, args: tuple, kwargs: Mapping[str, Any] | None,
           modules: list[tuple[str, nn.Module]]) -> StandIns:
    """Run a copy of ``model`` once (eval mode, no grad) and record what each opaque module returns.

    Raises:
        ConversionError: the model cannot be copied, fails in eager mode, or an opaque module returns a value
            other than tensors and plain scalars in tuples, lists and dicts.
    """
    try:
        twin = copy.deepcopy(model)
    except Exception as exc:
        raise ConversionError(f"opaque leaves need a copy of the model, which fails: {type(exc).__name__}: {exc}",
                              implementation="root", hint="make the model deep-copyable") from exc
    wanted = {path for path, _ in modules}
    records: dict[str, list[Any]] = {path: [] for path in wanted}
    hooks = []

    def keep(path: str) -> Any:
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            leaves, spec = pytree.tree_flatten(output)
            bad = [type(x).__name__ for x in leaves if not isinstance(x, (torch.Tensor, int, float, bool, type(None)))]
            if bad:
                raise ConversionError(f"the opaque leaf {path} returns {bad[0]}, which a stand-in cannot repeat",
                                      implementation=path, hint="an opaque leaf returns tensors and scalars")
            records[path].append((spec, [output_record(x) for x in leaves]))
        return hook

    for path, module in twin.named_modules():
        if path in wanted:
            hooks.append(module.register_forward_hook(keep(path)))
    try:
        flags = [(m, m.training) for m in twin.modules()]
        for m, _ in flags:
            m.training = False
        with torch.no_grad():
            twin(*args, **dict(kwargs or {}))
    except ConversionError:
        raise
    except Exception as exc:
        raise ConversionError(f"the model fails in eager mode on these inputs: {type(exc).__name__}: {exc}",
                              implementation="root", hint="check the example inputs") from exc
    finally:
        for hook in hooks:
            hook.remove()
    return StandIns(modules, records)


__all__ = ["OpaqueConverter", "StandIns", "inner_modules", "opaque_classes_of", "opaque_data", "opaque_modules",
           "own_attributes", "record"]
