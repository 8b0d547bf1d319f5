"""Opaque leaves inside opaque leaves (``torch2ir.opaque.driver``): the children of an opaque layer inside an
opaque root are traced on their own like the root's, and a class ``opaque="auto"`` made opaque only for the
model's trace (its failure there, or a value its caller computed from data) is traced on its own again once every
instance of it sits inside another opaque leaf, its calls recorded. LFM3-VL's vision tower was 100 % opaque that
way; Longformer's and Mimi's encoders kept every layer opaque."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import InputMismatchError
from common.opaque import traced_alone


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(4, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Layer(nn.Module):
    """Branches on ``n``: in the model's trace an int read from data (export fails here), alone a constant."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = Mlp()

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x + self.mlp(x) if n > 2 else x - self.mlp(x)


class Root(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = (x > 0).sum().item()  # read from data: passed to the layers
        for layer in self.layers:
            x = layer(x, n)
        return x


ROOT, LAYER = f"{__name__}.Root", f"{__name__}.Layer"
X = torch.randn(2, 4).abs() + 0.1  # n = 8
FEW = torch.tensor([[1.0, -1, -1, -1], [-1, -1, -1, -1]])  # n = 1: the layers' other branch


def _model() -> Root:
    torch.manual_seed(0)
    return Root().eval()


def test_a_layer_made_opaque_for_its_callers_data_is_traced_on_its_own_once_the_caller_is_opaque() -> None:
    model = _model()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert [(p, cls) for p, cls, _ in ir.capture.opaque] == [("", ROOT)]
    assert traced_alone(ir) == ["layers.0", "layers.1"]
    assert ir["layers.0"].type == "module" and ir["layers.0.mlp"].type == "module"
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[ROOT])
    with torch.no_grad():
        assert torch.equal(rebuilt(X), model(X))
        # the layer was traced for n = 8: another n is refused, naming the layer and how to keep it opaque
        with pytest.raises(InputMismatchError, match=r"implementation 'layers.0', at n: input is 1(?s:.*)"
                                                     rf'opaque=\["auto", "{LAYER}"\]'):
            rebuilt(FEW)
    assert torch2ir.convert(rebuilt, (X,), opaque="auto") == ir


def test_naming_the_class_keeps_it_opaque_and_its_own_children_are_traced_on_their_own() -> None:
    model = _model()
    ir = torch2ir.convert(model, (X,), opaque=["auto", LAYER])
    assert [(p, cls) for p, cls, _ in ir.capture.opaque] == [("", ROOT), ("layers.0", LAYER), ("layers.1", LAYER)]
    # a layer of the opaque root: its own child is a graph, not an opaque leaf "inside an opaque leaf"
    assert traced_alone(ir) == ["layers.0.mlp", "layers.1.mlp"] and ir["layers.0.mlp"].type == "module"
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[ROOT, LAYER])
    with torch.no_grad():
        for x in (X, FEW):  # both branches of the layers' own code
            assert torch.equal(rebuilt(x), model(x))


class CumLayer(Layer):
    """Traced on its own, it calls ``aten.cummax``, outside the default operator surface."""

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return torch.cummax(x, dim=-1).values + self.mlp(x) if n > 2 else x - self.mlp(x)


def test_a_class_whose_own_trace_leaves_the_surface_stays_opaque_as_before() -> None:
    """Traced on its own again, the layer's conversion is refused (an operator outside the default surface): the
    conversion that kept it opaque stands, rather than refusing the model."""
    torch.manual_seed(0)
    model = Root().eval()
    model.layers = nn.ModuleList([CumLayer(), CumLayer()])
    ir = torch2ir.convert(model, (X,), opaque="auto")
    cum = f"{__name__}.CumLayer"
    assert [(p, cls) for p, cls, _ in ir.capture.opaque][:3] == [("", ROOT), ("layers.0", cum), ("layers.1", cum)]
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[ROOT, cum])
    with torch.no_grad():
        for x in (X, FEW):
            assert torch.equal(rebuilt(x), model(x))
