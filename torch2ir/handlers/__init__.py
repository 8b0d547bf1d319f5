"""Default torch2ir handlers, one module per op family.

``register_defaults(converter)`` registers them explicitly; importing has no side effect.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from torch2ir.handlers import (
    activation,
    attention,
    conv,
    distance,
    dropout,
    embedding,
    int8,
    linear,
    loss,
    norm,
    pooling,
    quant,
    recurrent,
    shape,
)


def register_defaults(converter: Any) -> None:
    """Register every default handler on ``converter`` (a ``Torch2Ir``)."""
    linear.register(converter)
    conv.register(converter)
    norm.register(converter)
    embedding.register(converter)
    activation.register(converter)
    dropout.register(converter)
    pooling.register(converter)
    shape.register(converter)
    recurrent.register(converter)
    attention.register(converter)
    distance.register(converter)
    loss.register(converter)
    quant.register(converter)
    int8.register(converter)


_LAZY = "becomes its non-lazy class (handled) once initialised; converting needs an initialised model"
_CONTAINER = (
    "a container: recorded structurally and rebuilt as the real container (torch2ir.hierarchy.modules.CONTAINER_TYPES)"
)
_ABSTRACT = "an abstract base class, never a layer of its own"
_TRANSFORMER = "rebuilt from its graph on purpose: a structure of handled modules (attention, linear, norm)"

#: Public ``torch.nn`` module classes deliberately without a handler, each with the reason. A test walks
#: ``dir(torch.nn)`` and fails on any module class that has neither a handler pair nor an entry here.
#: Without a handler a module is converted with its own graph (type ``module``) and rebuilt from it, where
#: torch.export can trace it (only the Transformer classes are checked that way here, by the corpus).
EXCLUDED: dict[type[nn.Module], str] = {
    nn.Module: _ABSTRACT,
    nn.Container: _ABSTRACT + " (deprecated)",
    nn.RNNBase: _ABSTRACT + " (LSTM, GRU and RNN are handled)",
    nn.RNNCellBase: _ABSTRACT + " (LSTMCell, GRUCell and RNNCell are handled)",
    nn.Sequential: _CONTAINER,
    nn.ModuleList: _CONTAINER,
    nn.ModuleDict: _CONTAINER,
    nn.ParameterList: "holds parameters only, no constructor arguments; its parameters are recorded as state",
    nn.ParameterDict: "holds parameters only, no constructor arguments; its parameters are recorded as state",
    nn.Transformer: _TRANSFORMER,
    nn.TransformerEncoder: _TRANSFORMER,
    nn.TransformerDecoder: _TRANSFORMER,
    nn.TransformerEncoderLayer: _TRANSFORMER,
    nn.TransformerDecoderLayer: _TRANSFORMER,
    nn.LazyLinear: _LAZY,
    nn.LazyConv1d: _LAZY,
    nn.LazyConv2d: _LAZY,
    nn.LazyConv3d: _LAZY,
    nn.LazyConvTranspose1d: _LAZY,
    nn.LazyConvTranspose2d: _LAZY,
    nn.LazyConvTranspose3d: _LAZY,
    nn.LazyBatchNorm1d: _LAZY,
    nn.LazyBatchNorm2d: _LAZY,
    nn.LazyBatchNorm3d: _LAZY,
    nn.LazyInstanceNorm1d: _LAZY,
    nn.LazyInstanceNorm2d: _LAZY,
    nn.LazyInstanceNorm3d: _LAZY,
    nn.DataParallel: "a multi-device wrapper, not a layer: convert the module it wraps (.module)",
    nn.SyncBatchNorm: "distributed: its forward needs a process group in training; not handled (not done)",
    nn.FractionalMaxPool2d: "samples its pooling regions at random on every call (not a fixed layer to rebuild)",
    nn.FractionalMaxPool3d: "samples its pooling regions at random on every call (not a fixed layer to rebuild)",
    nn.AdaptiveLogSoftmaxWithLoss: "returns a named tuple and holds child modules (head, tail): a structure",
    nn.TripletMarginWithDistanceLoss: "its distance_function is a Python callable, which is never IR data",
    nn.LinearCrossEntropyLoss: "NOT DONE yet: a child Linear and an options object to read back (new in torch 2.13)",
}
