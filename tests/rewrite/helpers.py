"""Shared helpers of the rewrite tests: corpus models with non-trivial batch-norm statistics."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import torch2ir
from common.ir import IR
from tests.real.corpus import CORPUS

ARCHS = {arch.name: arch for arch in CORPUS}


def randomize_batchnorms(model: nn.Module, seed: int = 1) -> int:
    """Give every batch norm random running statistics and affine parameters (defaults fold to nearly nothing)."""
    gen = torch.Generator().manual_seed(seed)
    count = 0
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            count += 1
            n = module.num_features
            with torch.no_grad():
                module.running_mean.copy_(torch.randn(n, generator=gen) * 0.5)
                module.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                if module.affine:
                    module.weight.copy_(torch.randn(n, generator=gen))
                    module.bias.copy_(torch.randn(n, generator=gen))
    return count


def corpus_model(name: str) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any], IR]:
    """A corpus architecture (eval mode, seeded), its inputs and its IR."""
    arch = ARCHS[name]
    model = arch.build()
    randomize_batchnorms(model)
    args, kwargs = arch.inputs()
    return model, args, kwargs, torch2ir.convert(model, args, kwargs)
