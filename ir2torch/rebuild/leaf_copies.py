"""Leaves built on ``meta`` from one constructor call per class and arguments, then copied.

A rebuild on ``meta`` of 10**5 ``nn.Linear(4, 4)`` runs the constructor 10**5 times with the same arguments for the
same result: a module of uninitialised meta tensors (``ir2torch.rebuild.device`` already leaves out the random
fills, which draw nothing on meta). Most of the time of such a build is torch's constructor machinery
(``nn.Module.__init__``, the device context, the initialisers' own checks). :class:`LeafCopies` runs the default
builder once per ``(class, arguments)`` and makes later modules as copies of that module's structure, when the
copy is exactly what the constructor would make:

- only for the builders ``ir2torch.handlers._base.constructor`` makes for a class of ``torch.nn`` itself (a
  constructor that reads its arguments, the default dtype and the device context, and nothing else); a user's
  builder or override, and any other class, run every time;
- only for arguments that are immutable atoms (or tuples of them), compared with their types (``4`` and ``4.0``
  are different keys), within one conversion (one default dtype);
- only when the module the constructor made holds nothing but: immutable atoms, containers of them, its
  parameter / buffer / child tables, and empty hook tables; every parameter an ``nn.Parameter`` and every buffer a
  plain tensor, on ``meta``, with no attribute of their own; children that are such modules themselves. A module
  with anything else (``nn.LSTM`` keeps its parameters in a list too) is built by its constructor every time.

A copy is a new instance of the class with the same dictionary, in the same order: atoms as they are, containers
new (of the same type), tensors new meta tensors of the same shape, strides, dtype, ``requires_grad`` and version
counter (one tensor held under two names stays one tensor), children copied the same way. Nothing is shared
between two modules; the first module itself is built by the constructor, and copies are made from a copy of it
kept apart (what the caller does to the module it got changes no later copy).
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import torch
from torch import nn
from torch.autograd.graph import increment_version

#: Values a copy holds as they are.
_ATOMS = (bool, int, float, complex, str, bytes, type(None))
#: The tables ``nn.Module.__init__`` makes whose entries are tensors or modules.
_TABLES = ("_parameters", "_buffers", "_modules")

Builder = Callable[[Any], nn.Module]


def copyable_class(builder: Any) -> type[nn.Module] | None:
    """The ``torch.nn`` class ``builder`` calls with an implementation's data, or None (see the module docstring)."""
    cls = getattr(builder, "module_class", None)
    if isinstance(cls, type) and issubclass(cls, nn.Module) and cls.__module__.startswith("torch.nn."):
        return cls
    return None


def _key(cls: type, data: Mapping[str, Any]) -> tuple[type, tuple[Any, ...]] | None:
    items = []
    for name, value in data.items():
        if type(value) is tuple and all(type(v) in _ATOMS for v in value):
            items.append((name, tuple((type(v), v) for v in value)))
        elif type(value) in _ATOMS:
            items.append((name, type(value), value))
        else:
            return None
    return cls, tuple(items)


class LeafCopies:
    """The prototypes of one conversion on ``meta`` (see the module docstring)."""

    def __init__(self) -> None:
        #: (class, arguments) -> a copy of the first module built, or None when such modules are not copyable
        self._prototypes: dict[Hashable, nn.Module | None] = {}

    def copy(self, builder: Builder, impl: Any) -> nn.Module | None:
        """A copy of what ``builder`` made for the same class and arguments as ``impl``'s before (kept by
        :meth:`keep`), or None: then the caller builds it and calls :meth:`keep`."""
        key = self._key_of(builder, impl)
        prototype = None if key is None else self._prototypes.get(key)
        if prototype is None:
            return None
        return copy_module(prototype)

    def keep(self, builder: Builder, impl: Any, module: nn.Module) -> None:
        """Remember a copy of ``module``, which ``builder(impl)`` made, for later implementations alike (once)."""
        key = self._key_of(builder, impl)
        if key is not None and key not in self._prototypes:
            self._prototypes[key] = copy_module(module) if type(module) is key[0] and copyable(module) else None

    @staticmethod
    def _key_of(builder: Builder, impl: Any) -> Hashable | None:
        cls = copyable_class(builder)
        return None if cls is None else _key(cls, impl.data)


def copyable(module: nn.Module) -> bool:
    """Whether :func:`copy_module` of ``module`` is what its constructor made (see the module docstring)."""
    for name, value in module.__dict__.items():
        if name == "_parameters" or name == "_buffers":
            kind = nn.Parameter if name == "_parameters" else torch.Tensor
            if type(value) is not dict or not all(t is None or (type(t) is kind and t.is_meta and not t.__dict__)
                                                  for t in value.values()):
                return False
        elif name == "_modules":
            if type(value) is not dict or not all(m is not None and type(m).__module__.startswith("torch.nn.")
                                                   and copyable(m) for m in value.values()):
                return False
        elif name.endswith("_hooks") or name.endswith("_hooks_with_kwargs") or name.endswith("_hooks_always_called"):
            if value:
                return False
        elif not _plain(value):
            return False
    return True


def _plain(value: Any) -> bool:
    kind = type(value)
    if kind in _ATOMS:
        return True
    if kind in (tuple, list, set, frozenset):
        return all(_plain(v) for v in value)
    if kind is dict or kind is collections.OrderedDict:
        return all(type(k) in _ATOMS and _plain(v) for k, v in value.items())
    return False


def copy_module(module: nn.Module, memo: dict[int, torch.Tensor] | None = None) -> nn.Module:
    """A new module with ``module``'s structure (``module`` passed :func:`copyable`; see the module docstring)."""
    memo = {} if memo is None else memo
    cls = type(module)
    new = cls.__new__(cls)
    attrs = new.__dict__
    for name, value in module.__dict__.items():
        if name in _TABLES:
            attrs[name] = {k: None if v is None else
                           copy_module(v, memo) if name == "_modules" else _copy_tensor(v, memo)
                           for k, v in value.items()}
        else:
            attrs[name] = _copy_value(value)
    return new


def _copy_tensor(tensor: torch.Tensor, memo: dict[int, torch.Tensor]) -> torch.Tensor:
    done = memo.get(id(tensor))
    if done is not None:
        return done
    new = torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")
    if type(tensor) is nn.Parameter:
        new = nn.Parameter(new, requires_grad=tensor.requires_grad)
    elif tensor.requires_grad:
        new.requires_grad_(True)
    for _ in range(tensor._version):
        increment_version(new)
    memo[id(tensor)] = new
    return new


def _copy_value(value: Any) -> Any:
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is tuple or kind is frozenset:
        return kind(_copy_value(v) for v in value)
    if kind is list or kind is set:
        return kind(_copy_value(v) for v in value)
    return kind((k, _copy_value(v)) for k, v in value.items())


__all__ = ["LeafCopies", "copy_module", "copyable", "copyable_class"]
