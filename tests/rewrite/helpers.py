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


def _has_meta(meta: Any) -> bool:
    """A recorded shape and dtype: one ``{"shape", "dtype"}`` or a list of them (a multi-result op)."""
    if isinstance(meta, dict):
        return isinstance(meta.get("shape"), list) and isinstance(meta.get("dtype"), torch.dtype)
    return isinstance(meta, list) and bool(meta) and all(m is None or _has_meta(m) for m in meta)


def nodes_without_meta(before: IR, after: IR) -> list[str]:
    """``key: node`` of each node a rewrite added or changed in ``after`` (not in ``before`` with the same
    attributes) that computes a tensor without recording its shape and dtype: an op, a state read, a call of a
    leaf module (a call of a module rebuilt from its graph records nothing itself, as in a conversion). An op
    returning a number (``operator.mul`` of sizes) records none in a conversion either; those are not listed."""
    from common.values import Ref, iter_refs, values_equal

    missing = []
    for key in after:
        impl = after[key]
        for graph in impl.graphs():
            old = before[key].graphs() if key in before else []
            old_nodes = {n: g.node(n) for g in old for n in g.nodes}
            for name in graph.nodes:
                attrs = graph.node(name)
                if name in old_nodes and values_equal(dict(old_nodes[name]), dict(attrs)):
                    continue
                kind = attrs.get("type")
                if kind in ("input", "output") or _has_meta(attrs.get("meta")):
                    continue
                target = attrs.get("implementation")
                if kind not in ("function", "get_attr") and (target not in after or after[target].graphs()):
                    continue  # a call of a module rebuilt from its graph
                reads = [r for _, r in iter_refs([attrs.get("args", []), attrs.get("kwargs", {})])
                         if isinstance(r, Ref)]
                if kind == "function" and str(target).startswith(("operator.", "builtins.", "math.")) and \
                        not any(_has_meta(graph.node(r.node).get("meta")) for r in reads):
                    continue  # arithmetic on numbers
                missing.append(f"{key}: {name}")
    return missing
