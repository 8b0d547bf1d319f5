"""Builders of loss modules: the class called with the IR attributes, plus its weight buffers.

A loss's class weights (``weight``; ``pos_weight`` of ``BCEWithLogitsLoss``) are buffers, so
torch2ir records them as state, not data. A builder here recreates each recorded one as an
uninitialised tensor of the recorded shape and dtype (on the build device); its value comes
from the state dict like any buffer's. A loss built without such a record has ``None`` there,
as the original had.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from common.errors import IRFormatError
from common.ir import Implementation
from ir2torch.handlers._base import fresh_copy, register_table

if TYPE_CHECKING:
    from ir2torch.converter import Builder, Ir2Torch

#: Losses with plain arguments only.
TABLE: dict[str, type[nn.Module]] = {
    "l1loss": nn.L1Loss,
    "mseloss": nn.MSELoss,
    "softmarginloss": nn.SoftMarginLoss,
    "multilabelmarginloss": nn.MultiLabelMarginLoss,
    "huberloss": nn.HuberLoss,
    "smoothl1loss": nn.SmoothL1Loss,
    "kldivloss": nn.KLDivLoss,
    "cosineembeddingloss": nn.CosineEmbeddingLoss,
    "hingeembeddingloss": nn.HingeEmbeddingLoss,
    "marginrankingloss": nn.MarginRankingLoss,
    "ctcloss": nn.CTCLoss,
    "gaussiannllloss": nn.GaussianNLLLoss,
    "poissonnllloss": nn.PoissonNLLLoss,
    "tripletmarginloss": nn.TripletMarginLoss,
}

#: Losses with weight buffers: ``{IR type: (class, names of its optional weight buffers)}``.
WEIGHTED: dict[str, tuple[type[nn.Module], tuple[str, ...]]] = {
    "bceloss": (nn.BCELoss, ("weight",)),
    "bcewithlogitsloss": (nn.BCEWithLogitsLoss, ("weight", "pos_weight")),
    "multilabelsoftmarginloss": (nn.MultiLabelSoftMarginLoss, ("weight",)),
    "multimarginloss": (nn.MultiMarginLoss, ("weight",)),
    "nllloss": (nn.NLLLoss, ("weight",)),
    "nllloss2d": (nn.NLLLoss2d, ("weight",)),
    "crossentropyloss": (nn.CrossEntropyLoss, ("weight",)),
}


def weighted(cls: type[nn.Module], buffers: tuple[str, ...]) -> Builder:
    """A builder calling ``cls(**impl.data, <buffer>=tensor)`` for each of ``buffers`` recorded in ``impl.state``.

    Raises:
        IRFormatError: ``impl.data`` names a device or one of ``buffers`` (tensors are state, never data),
            or a buffer's record is not a buffer with a shape and a dtype.
    """

    def build(impl: Implementation) -> nn.Module:
        for key in ("device", *buffers):
            if key in impl.data:
                raise IRFormatError(f"the arguments of {impl.type!r} name {key!r}", implementation=impl.name, key=key,
                                    hint="tensors are state records, never data; pass device= to ir2torch.convert")
        tensors = {}
        for name in buffers:
            rec = impl.state.get(name)
            if rec is None:
                continue
            shape, dtype = rec.get("shape"), rec.get("dtype")
            fits = isinstance(shape, (list, tuple)) and all(isinstance(d, int) for d in shape)
            if rec.get("kind") != "buffer" or not fits or not isinstance(dtype, torch.dtype):
                raise IRFormatError(f"the state record {name!r} of {impl.type!r} is not a buffer with shape and dtype",
                                    implementation=impl.name, key=name,
                                    hint="re-save the IR from the model")
            tensors[name] = torch.empty(tuple(shape), dtype=dtype)
        return cls(**fresh_copy(impl.data), **tensors)

    build.__qualname__ = f"build_{cls.__name__}"
    return build


def register(converter: Ir2Torch) -> None:
    """Register the loss builders on ``converter``."""
    register_table(converter, TABLE)
    for type_str, (cls, buffers) in WEIGHTED.items():
        converter.register(type_str, weighted(cls, buffers))
