"""Constants in generated code: a graph's literal values spelled as Python source where that is exact, and the
names under which generated code reads the rest (a tensor, a dtype, a value whose spelling a name would shadow)."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch import fx


def _spelling(value: Any) -> str | None:
    """The global fx's ``repr`` of constant ``value`` names (``device(type='cpu')``, ``inf``, ``nan``), if any."""
    if type(value) is torch.device:
        return "device"
    if type(value) is float and not math.isfinite(value):
        return "nan" if math.isnan(value) else "inf"
    return None


def _respelled_constants(nodes: Any, shadowed: frozenset[str] | set[str]) -> list[Any]:
    """The distinct constants of ``nodes``' arguments whose ``repr`` names one of ``shadowed``, in first-use order."""
    found: list[Any] = []

    def visit(value: Any) -> Any:
        if _spelling(value) in shadowed and not any(_same_constant(value, f) for f in found):
            found.append(value)
        return value

    for node in nodes:
        if node.op not in ("placeholder", "output"):
            fx.node.map_aggregate((node.args, node.kwargs), visit)
        elif node.op == "output":
            fx.node.map_aggregate(node.args, visit)
    return found


def _same_constant(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if type(a) is float:
        return repr(a) == repr(b)  # nan equals itself here
    return bool(a == b)


class _Spelled:
    """Stands, while fx writes the source, for a constant generated code reads from the global ``name``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


@contextlib.contextmanager
def _spelled(nodes: Any, constants: list[Any], names: list[str]) -> Iterator[None]:
    """While fx writes the source: each of ``constants`` in the nodes' arguments replaced by a stand-in whose
    ``repr`` is its global's name (``names``); the arguments are put back after."""
    if not constants:
        yield
        return

    swapped: list[bool] = []

    def swap(value: Any) -> Any:
        for constant, name in zip(constants, names):
            if _same_constant(value, constant):
                swapped.append(True)
                return _Spelled(name)
        return value

    saved = []
    try:
        for node in nodes:
            if node.op == "placeholder":
                continue
            swapped.clear()
            args, kwargs = fx.node.map_aggregate((node.args, node.kwargs), swap)
            if swapped:
                saved.append((node, node.args, node.kwargs))
                node.args, node.kwargs = args, kwargs
        yield
    finally:
        for node, args, kwargs in saved:
            node.args, node.kwargs = args, kwargs
