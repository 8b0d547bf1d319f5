"""What a zoo entry is: :class:`Case`, and the seeded builders and inputs every entry uses.

The tags are listed in :mod:`tests.models.zoo`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

Inputs = tuple[tuple[Any, ...], dict[str, Any]]

D = 8  # default feature width of the hand-written models


@dataclass(frozen=True)
class Case:
    """One zoo entry: how to build the model, its example inputs, and what it exercises."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], Inputs]
    tags: frozenset[str] = field(default_factory=frozenset)


def seeded(factory: Callable[[], nn.Module]) -> Callable[[], nn.Module]:
    """Wrap ``factory`` so the model is created under ``torch.manual_seed(0)`` and returned in eval mode."""

    def build() -> nn.Module:
        torch.manual_seed(0)
        return factory().eval()

    return build


def gen() -> torch.Generator:
    """A fresh CPU generator seeded with 0, for deterministic example inputs."""
    return torch.Generator().manual_seed(0)


def randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    """Standard normal tensor of ``shape`` drawn from ``g``."""
    return torch.randn(*shape, generator=g)
