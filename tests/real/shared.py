"""One eval-mode conversion per corpus architecture, shared by the tests that need the same one.

``test_corpus``'s eval round trip converts the model (inside ``assert_roundtrip``) and leaves a copy of the model
as built (taken before anything ran it) and its IR here with :func:`keep`; ``test_lower_corpus`` and
``test_swaps`` take them with :func:`converted` instead of building and converting the same model again, each
getting its own copy of the model as built. ``tests/real/conftest.py`` runs the tests of one architecture one
after the other (in one xdist worker: one ``xdist_group`` per architecture), so only the latest architecture's
conversion is kept. What the tests check does not change: whichever test comes first converts, with the same
converter (the architecture's opt-in operators) on a model built the same way (seeded, eval mode); the model a
test gets has not run yet (a forward pass can change a model: LeViT caches its attention biases), and the tests
only read the IR (rebuild, lower, compare).
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass

from torch import nn

import ir2torch
import torch2ir
from common.ir import IR
from tests.real.corpus import Arch
from torch2ir.train.dropout import TrainModeWarning


@dataclass(frozen=True)
class Converted:
    """The eval-mode model of one architecture as built (not run yet) and the IR its converter made of it."""

    name: str
    model: nn.Module  # as built by ``arch.build()``: seeded, eval mode
    ir: IR


_LATEST: list[Converted] = []


def converters(arch: Arch) -> dict:
    """A converter and a rebuilder that have opted in to the operators ``arch`` needs (defaults otherwise)."""
    converter, rebuilder = torch2ir.get_default_converter(), ir2torch.get_default_converter()
    for pattern in arch.allow:
        converter.allowlist.allow(pattern)
        rebuilder.allowlist.allow(pattern)
    return {"converter": converter, "rebuilder": rebuilder}


def keep(arch: Arch, built: nn.Module, ir: IR) -> None:
    """Keep ``arch``'s eval-mode model as ``built`` (not run yet: a copy taken before converting) and the ``ir``
    that ``converters(arch)`` made of the model, for the next tests."""
    _LATEST[:] = [Converted(arch.name, built, ir)]


def converted(arch: Arch) -> Converted:
    """A fresh copy of ``arch``'s eval-mode model as built, and its IR: the kept ones, else converted now (and kept).

    ``TrainModeWarning`` is ignored while converting: it is about train mode only.
    """
    if not _LATEST or _LATEST[0].name != arch.name:
        model = arch.build().eval()
        built = copy.deepcopy(model)
        args, kwargs = arch.inputs()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TrainModeWarning)
            ir = converters(arch)["converter"].convert(model, args, kwargs)
        keep(arch, built, ir)
    kept = _LATEST[0]
    return Converted(kept.name, copy.deepcopy(kept.model), kept.ir)
