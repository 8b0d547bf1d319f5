"""Alike blocks that differ in an index only (``layer_idx``), for :mod:`torch2ir.trace_once.trace`.

Transformers' decoder layers carry their position (``self_attn.layer_idx``) for the key/value cache; eighty
layers are otherwise alike. :func:`varying_indices` finds such attributes: plain ``int`` attributes whose value is
different in every member of a group (an index), of modules rebuilt from their graphs (a handled leaf's attributes
are its IR data). The group is then traced once like any other, and the attributes are **watched** while its
member runs for real (:func:`watching`): for the duration of that call each such attribute is read through a data
descriptor set on its module's class, which records the read and returns the instance's own value. A call that
reads one (``if self.layer_idx == 0``, ``cache.update(..., self.layer_idx)``, ``getattr(m, "layer_idx")``, by any
module) is not stood in for: the group is disabled and the model exported again without it, as for any other
call a stand-in cannot repeat. A call that reads none computes what it computes from the other attributes, which
are equal in every member, so every member would trace the same graph.

What is not watched: reading the attribute through the instance's ``__dict__`` or ``vars()`` directly. A class
that defines the name itself (a property, a slot, a class attribute) is not grouped this way.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator
from typing import Any

from torch import nn

__all__ = ["int_attributes", "varying_indices", "watching"]


def int_attributes(module: nn.Module, skipped: Collection[str]) -> dict[tuple[str, str], int]:
    """``{(module path in ``module``, attribute name): value}`` of the plain ``int`` attributes of ``module``'s
    subtree (not ``bool``), names in ``skipped`` left out."""
    out = {}
    for path, m in module.named_modules():
        for name, value in m.__dict__.items():
            if type(value) is int and name not in skipped:
                out[(path, name)] = value
    return out


def varying_indices(members: list[nn.Module], skipped: Collection[str],
                    is_leaf: Callable[[nn.Module], bool]) -> list[tuple[str, str]] | None:
    """The ``(path, name)`` int attributes whose value differs in every member (the members are alike otherwise),
    or None when one differs between some members only, belongs to a handled leaf, or cannot be watched."""
    maps = [int_attributes(m, skipped) for m in members]
    varying = []
    for key in maps[0]:
        values = [mapping.get(key) for mapping in maps]
        if len(set(values)) == 1:
            continue
        if None in values or len(set(values)) != len(values):
            return None
        path, name = key
        owner = members[0].get_submodule(path)
        if is_leaf(owner) or any(name in vars(cls) for cls in type(owner).__mro__):
            return None
        varying.append(key)
    return varying


class _Watch:
    """A data descriptor standing in for an instance attribute: reads are recorded (in every list watching it:
    a block traced inside another block's traced call watches the same attribute), values stay the instance's."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sinks: list[tuple[str, list[str]]] = []  # (label, reads) of each watch in force

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        for label, reads in self.sinks:
            reads.append(label)
        try:
            return obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.name] = value

    def __delete__(self, obj: Any) -> None:
        try:
            del obj.__dict__[self.name]
        except KeyError:
            raise AttributeError(self.name) from None


@contextlib.contextmanager
def watching(module: nn.Module, varying: list[tuple[str, str]]) -> Iterator[list[str]]:
    """Record, in the list yielded, every read of the ``varying`` attributes (of ``module``'s subtree, by path)
    made inside the block, on any instance of their classes; nothing else changes."""
    reads: list[str] = []
    sinks: list[tuple[type, _Watch, tuple[str, list[str]]]] = []
    try:
        for path, name in varying:
            cls = type(module.get_submodule(path))
            watch = vars(cls).get(name)
            if watch is not None and not isinstance(watch, _Watch):
                continue  # the class defines the name itself (varying_indices groups no such module)
            if watch is None:
                watch = _Watch(name)
                setattr(cls, name, watch)
            if not any(r is reads for _, r in watch.sinks):  # two watched attributes of one class: one read
                sink = (f"{path}.{name}" if path else name, reads)
                watch.sinks.append(sink)
                sinks.append((cls, watch, sink))
        yield reads
    finally:
        for cls, watch, sink in reversed(sinks):
            watch.sinks[:] = [s for s in watch.sinks if s is not sink]
            if not watch.sinks and vars(cls).get(watch.name) is watch:
                delattr(cls, watch.name)
