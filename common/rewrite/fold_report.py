"""What ``fold_batchnorm`` never folds, by name: the other normalizations of a model.

A batch norm in eval mode is a fixed per-channel affine map, which is why it folds into a layer. Other norms are
not folded, and a team running the pass on a model of them (timm's EvoNorm RegNets, group-normed ResNets) should
see that instead of a pass that silently did nothing: each called module that normalizes and is neither a batch
norm the pass reads (``nn.BatchNorm1d/2d/3d``, a module computing one in its own graph) is named with its class and
why. Norms that normalize with statistics of each input (layer, group, instance without running statistics, RMS,
EvoNorm S) are no fixed map; those keeping running statistics of their own computation (EvoNorm B, frozen batch
norms written as ops) are not a form the pass reads.
"""

from __future__ import annotations

from common.ir import IR

from .core import call_sites

#: IR types of normalizations other than batch norm (torch2ir's handlers of ``torch.nn``).
OTHER_NORM_TYPES = ("instancenorm1d", "instancenorm2d", "instancenorm3d", "layernorm", "groupnorm", "rmsnorm",
                    "localresponsenorm", "crossmaplrn2d")
#: running statistics a norm may keep
RUNNING = ("running_var", "running_mean")


def other_norms(ir: IR, handled: set[str]) -> list[str]:
    """One line per called normalization module of ``ir`` not in ``handled`` (the batch norms the pass reads or
    reported already) and not a plain batch norm: its key, class and why it is not folded."""
    out = []
    sites = call_sites(ir)
    for key, impl in ir.items():
        if key in handled or key not in sites or impl.type.startswith("batchnorm"):
            continue
        cls = impl.meta.get("class")
        name = cls.rpartition(".")[2] if isinstance(cls, str) else ""
        if impl.type not in OTHER_NORM_TYPES and not (impl.type == "module" and "Norm" in name):
            continue
        running = [r for r in RUNNING if r in impl.state]
        if running and impl.type not in OTHER_NORM_TYPES:
            why = (f"keeps running statistics ({', '.join(running)}) but computes its own normalization, not an "
                   "eval-form batch norm of its input the pass reads")
        elif running:
            why = "an instance norm with running statistics: not a form the pass reads"
        else:
            why = "normalizes with statistics of each input: no fixed per-channel map to fold"
        label = f" ({cls})" if isinstance(cls, str) else f" ({impl.type})"
        out.append(f"{key}{label}: not folded: {why}")
    return out


__all__ = ["OTHER_NORM_TYPES", "other_norms"]
