"""Default builders of ir2torch, one module per op family.

``register_defaults(converter)`` registers them explicitly; importing this package has
no side effect on any converter.
"""

from __future__ import annotations

from typing import Any

from ir2torch.handlers import (
    activation,
    attention,
    containers,
    conv,
    distance,
    dropout,
    embedding,
    graph,
    int8,
    linear,
    loss,
    norm,
    opaque,
    owned,
    pooling,
    quant,
    recurrent,
    shape,
)


def register_defaults(converter: Any) -> None:
    """Register every default builder on ``converter`` (an ``Ir2Torch``)."""
    linear.register(converter)
    opaque.register(converter)
    owned.register(converter)
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
    containers.register(converter)
    graph.register(converter)
