"""The default builder of IR type ``"module"``: a marker, the converter rebuilds such an implementation from its
graph (a ``torch.fx.GraphModule``, :mod:`ir2torch.rebuild.graphs`).

It is registered like every other type's builder so that ``register_override("module", builder, where=...)``
replaces it (a builder of your own for the modules at some paths, rebuilt from ``impl.data``, ``impl.state`` and,
if it wants, ``impl.nodes``); the converter never calls it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from common.errors import BuildError
from common.ir import Implementation

if TYPE_CHECKING:
    from ir2torch.converter import Ir2Torch

#: The IR type of a module rebuilt from its graph.
MODULE_TYPE = "module"


def from_graph(impl: Implementation) -> nn.Module:
    """Marks ``"module"`` as rebuilt from its graph by the converter; calling it is an error."""
    raise BuildError("a 'module' implementation is rebuilt from its graph by the converter, not by a builder",
                     implementation=impl.name, hint="rebuild it with Ir2Torch.convert")


def register(converter: Ir2Torch) -> None:
    """Register the ``"module"`` marker on ``converter``."""
    converter.register(MODULE_TYPE, from_graph)
