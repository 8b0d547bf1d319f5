"""Shared fixtures of the FlatIR tests: each case built once, lowered once per decomposition from a meta copy."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

import torch2ir
from common import FlatIR
from tests.models.zoo import by_name

#: The real models of tests/models/real.py and the stock torch.nn cases of the zoo.
REAL_NAMES = ["bert", "gpt2", "llama", "vit", "resnet", "mobilenet_v2", "convnext", "t5_encoder", "whisper_encoder"]
NN_NAMES = ["transformer", "multihead_attention", "lstm"]
MODEL_NAMES = [*REAL_NAMES, *NN_NAMES]


@dataclass(frozen=True)
class Built:
    """A case's model (real weights), its inputs and what the model returns on them."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    expected: Any


def to_meta(tree: Any) -> Any:
    """``tree`` with every tensor replaced by a meta tensor of the same shape and dtype."""
    return pytree.tree_map(lambda x: x.to("meta") if isinstance(x, torch.Tensor) else x, tree)


@cache
def built(name: str) -> Built:
    """The model of case ``name``, its inputs and its eager output (computed once per session)."""
    case = by_name(name)
    model = case.build()
    args, kwargs = case.inputs()
    with torch.no_grad():
        expected = model(*args, **kwargs)
    return Built(model, args, kwargs, expected)


@cache
def meta_model(name: str) -> nn.Module:
    """A copy of the model of case ``name`` on the meta device (no weight allocated)."""
    return copy.deepcopy(built(name).model).to("meta")


@cache
def lowered(name: str, decompose: bool = False) -> FlatIR:
    """The FlatIR of case ``name`` lowered from its meta copy with meta inputs (once per session)."""
    b = built(name)
    model = meta_model(name)
    assert all(p.is_meta for p in model.parameters())
    return torch2ir.lower(model, to_meta(b.args), to_meta(b.kwargs), decompose=decompose)


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state dict plus non-persistent buffers (which a model lowered on meta has no values for)."""
    return {**model.state_dict(), **dict(model.named_buffers())}
