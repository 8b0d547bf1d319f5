"""``register_override`` works for every IR type the docs name (docs/ir-spec.md's ``type`` row): ``"module"``
(rebuilt from its graph by default), the handler types, the containers, ``"opaque"`` and ``"owned"``. Overriding
``"module"`` raised ``HandlerNotFoundError`` before it had a default entry (``ir2torch.handlers.graph``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import BuildError, HandlerNotFoundError
from common.opaque import OPAQUE_TYPE, OWNED_TYPE
from torch2ir.hierarchy.modules import CONTAINER_TYPES


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * 2


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Block()
        self.b = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x)) - x


class MarkedBlock(Block):
    """The real block, built by an override (its child ``lin`` is attached by the rebuild)."""


X = torch.randn(3, 4)


@pytest.fixture(scope="module")
def converted() -> tuple[Net, torch2ir.IR]:
    torch.manual_seed(0)
    model = Net().eval()
    return model, torch2ir.convert(model, (X,), trace_once=False)


def test_every_documented_type_can_be_overridden() -> None:
    converter = ir2torch.get_default_converter()
    types = {"module", OPAQUE_TYPE, OWNED_TYPE, *CONTAINER_TYPES.values(),
             *torch2ir.get_default_converter().types().values()}
    assert len(types) > 100
    for ir_type in sorted(types):
        converter.register_override(ir_type, lambda impl: nn.Identity(), where="nowhere")  # raises if unknown
    with pytest.raises(HandlerNotFoundError, match="modul"):
        converter.register_override("modul", lambda impl: nn.Identity())


def test_module_override_at_a_path_builds_that_module(converted) -> None:
    model, ir = converted
    assert ir["a"].type == "module" and ir["b"].type == "module"
    mine = ir2torch.get_default_converter()
    seen = []

    def build(impl):
        seen.append(impl.name)  # also once on meta, measuring what it allocates
        block = MarkedBlock()
        del block.lin  # the rebuild attaches the IR's own child
        return block

    mine.register_override("module", build, where="b")
    rebuilt = mine.convert(ir, model.state_dict())
    assert set(seen) == {"b"} and type(rebuilt.b) is MarkedBlock and type(rebuilt.a) is not MarkedBlock
    assert isinstance(rebuilt.a, torch.fx.GraphModule)
    with torch.no_grad():
        assert torch.equal(rebuilt(X), model(X))
    # the defaults are left alone
    assert isinstance(ir2torch.convert(ir, model.state_dict()).b, torch.fx.GraphModule)


def test_module_override_that_computes_otherwise_is_what_runs(converted) -> None:
    """The override really runs (a block returning its input: the output changes accordingly)."""
    model, ir = converted
    mine = ir2torch.get_default_converter()
    mine.register_override("module", lambda impl: Passthrough(), where="a")
    rebuilt = mine.convert(ir, model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(X), model.b(X) - X) and not torch.equal(rebuilt(X), model(X))


class Passthrough(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_the_graph_marker_is_never_called_as_a_builder(converted) -> None:
    _, ir = converted
    entry = ir2torch.get_default_converter().builders.get("module")
    with pytest.raises(BuildError, match="from its graph"):
        entry.build(ir["a"])
