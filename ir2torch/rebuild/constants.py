"""A rebuilt module's lifted constants (plain tensor attributes, not in its state dict) through ``copy.deepcopy``.

``GraphModule.__deepcopy__`` builds the copy from the module's graph: it copies the attributes the graph's
``get_attr`` nodes read and registers each tensor among them as a *buffer*. A rebuilt module's lifted constants
would then change kind in the copy (its ``state_dict()`` gains them, so the original's state dict no longer loads
into it strictly, and converting the copy records buffers), and a constant only a per-call graph reads (a module
called twice, each call traced with its own constant) would be missing, the copy failing when that graph runs.
:func:`keep_constants` registers a deep-copy hook that makes each constant of the copy a plain attribute again,
deep-copied from the module being copied when the graph did not bring it along.
"""

from __future__ import annotations

import copy
import functools

import torch
from torch import fx, nn

from ir2torch.rebuild.paths import owner_of


def keep_constants(gm: fx.GraphModule, names: tuple[str, ...]) -> fx.GraphModule:
    """Make deep copies of ``gm`` keep its lifted constants ``names`` (attribute paths) as plain attributes."""
    if names:
        # the partial holds gm itself: deep-copying the hooks list maps it to the copy (copy.deepcopy's memo), so a
        # copy's own hook reads from that copy
        gm._register_deepcopy_hook(functools.partial(_restore, source=gm, names=names))  # type: ignore[operator]
    return gm


def _restore(duplicate: nn.Module, source: nn.Module, names: tuple[str, ...]) -> None:
    for name in names:
        owner, last = owner_of(duplicate, name)
        value = owner._buffers.pop(last, None)  # fx registered it as a buffer
        if value is None:
            value = vars(owner).get(last)
        if not isinstance(value, torch.Tensor):  # not read by the copy's graph: taken from the module copied
            held, attr = owner_of(source, name)
            original = vars(held).get(attr, held._buffers.get(attr))
            if not isinstance(original, torch.Tensor):
                continue
            value = copy.deepcopy(original)
        vars(owner)[last] = value


__all__ = ["keep_constants"]
