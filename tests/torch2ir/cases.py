"""Shared fixtures of the torch2ir conversion tests: each zoo case converted once."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

import torch2ir
from common.ir import IR, NODE_KINDS, Implementation
from common.values import Subgraph, iter_values
from tests.models.real import REAL
from tests.models.zoo import ZOO, Case, by_name

CASES: list[Case] = [*ZOO, *REAL]
CASE_NAMES: list[str] = [case.name for case in CASES]

#: Pairs of parameter paths that are one tensor owned by two different modules.
TIED_PAIRS: dict[str, tuple[str, str]] = {
    "gpt2": ("lm_head.weight", "transformer.wte.weight"),
    "t5_encoder": ("encoder.embed_tokens.weight", "shared.weight"),
    "tied_embedding": ("head.weight", "embed.weight"),
}


@dataclass
class Converted:
    """A zoo case built once, with its inputs and its IR."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    ir: IR


_CACHE: dict[str, Converted] = {}


def converted(name: str) -> Converted:
    """The model, inputs and IR of case ``name`` (built and converted once per test session)."""
    if name not in _CACHE:
        case = by_name(name)
        model = case.build()
        args, kwargs = case.inputs()
        _CACHE[name] = Converted(model, args, kwargs, torch2ir.convert(model, args, kwargs))
    return _CACHE[name]


def key_of(path: str) -> str:
    """The implementation key of module path ``path``."""
    return path or "root"


def path_of(key: str) -> str:
    """The module path of implementation key ``key``."""
    return "" if key == "root" else key


def all_graphs(ir: IR) -> Iterator[Implementation]:
    """Every implementation of ``ir`` and every graph nested in a node argument (:class:`Subgraph`)."""
    stack: list[Implementation] = list(ir.values())
    while stack:
        impl = stack.pop()
        yield impl
        for _, attrs in impl.graph.nodes(data=True):
            for _, value in iter_values([attrs.get("args", []), attrs.get("kwargs", {})]):
                if isinstance(value, Subgraph):
                    stack.append(value.impl)


def call_nodes(impl: Implementation, callee: str) -> list[str]:
    """Nodes of ``impl`` that call implementation ``callee``."""
    return [
        n for n, a in impl.graph.nodes(data=True) if a["type"] not in NODE_KINDS and a.get("implementation") == callee
    ]


def count_calls(model: nn.Module, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """How many times ``module`` runs during ``model(*args, **kwargs)`` (a forward hook counts)."""
    calls = 0

    def hook(*_: Any) -> None:
        nonlocal calls
        calls += 1

    handle = module.register_forward_hook(hook)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        handle.remove()
    return calls
