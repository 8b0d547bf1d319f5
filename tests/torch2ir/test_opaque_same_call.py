"""An opaque leaf called otherwise while traced than in eager mode (torch2ir.opaque.same_call), and containers
holding ``None`` slots (common.none_slots): the two things transformers' Autoformer and Informer showed.

- transformers builds an attention mask only when exporting, so a layer gets ``mask=None`` in eager mode and a
  tensor while traced; its opaque attention's stand-in repeats the eager outputs, but a rebuild would run the
  real forward on the traced inputs. The traced call is compared with the eager one: explicit ``opaque=[cls]``
  is refused naming the argument, ``"auto"`` keeps the caller opaque, up the tree, until the calls agree.
- Informer's encoder zips its layers with ``conv_layers = ModuleList([conv, None])``: a rebuilt container
  without the ``None`` slot runs one layer less, silently.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import IRError
from torch2ir.frontend.export import OpaqueCallError


class Attention(nn.Module):
    """Branches on data (export cannot trace it); a mask changes what it computes."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        y = self.proj(x) if x.sum() > 0 else -x
        return y if mask is None else y + mask


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = Attention()
        self.out = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.out(self.attn(x, mask=mask))


class Encoder(nn.Module):
    """Builds its mask only while exported, as transformers' ``create_bidirectional_mask`` does without padding."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Layer(), Layer()])
        self.convs = nn.ModuleList([nn.Linear(4, 4), None])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.full((x.shape[0], 4), 100.0) if torch.compiler.is_exporting() else None
        for layer, conv in zip(self.layers, self.convs):
            x = layer(x, mask)
            if conv is not None:
                x = conv(x)
        return x


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.encoder = Encoder()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)))


X = torch.randn(3, 4).abs() + 1


def _model() -> Model:
    torch.manual_seed(0)
    model = Model().eval()
    with torch.no_grad():  # the input's sign picks the attention's branch
        model.embed.weight.copy_(torch.eye(4))
        model.embed.bias.zero_()
    return model


def _allow(ir: IR) -> list[str]:
    return sorted({cls for _, cls, _ in ir.capture.opaque})


def test_explicit_opaque_leaf_called_otherwise_is_refused_naming_the_argument() -> None:
    with pytest.raises(OpaqueCallError) as info:
        torch2ir.convert(_model(), (X,), opaque=[Attention])
    message = str(info.value)
    assert "encoder.layers.0.attn" in message and "'mask'" in message
    assert "while traced" in message and "None in eager mode" in message


def test_auto_keeps_the_caller_that_calls_alike_opaque_and_rebuilds_exactly() -> None:
    model = _model()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    kept = {path: why for path, _, why in ir.capture.opaque}
    assert "encoder" in kept and "otherwise while traced" in kept["encoder"]
    assert ir["embed"].type == "linear" and ir["head"].type == "linear"  # the rest is traced and typed
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=_allow(ir))
    assert list(rebuilt.encoder.convs._modules.items())[1] == ("1", None)
    for x in (X, -X):  # both branches of the attention
        with torch.no_grad():
            assert torch.equal(rebuilt(x), model(x))
    assert torch2ir.convert(rebuilt, (X,), opaque="auto") == ir


def test_a_none_slot_is_kept_and_zip_runs_every_layer() -> None:
    """Without the None slot the rebuilt encoder would run one layer: its output would differ."""
    model = _model()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert ir["encoder.convs"].meta["none_children"] == ["1"]
    assert ir["encoder.convs"].meta["children"] == ["0", "1"]
    rebuilt = ir2torch.convert(IR.from_dict(ir.to_dict()), model.state_dict(), allow=_allow(ir))
    calls = []
    rebuilt.encoder.layers[1].register_forward_hook(lambda *_: calls.append(1))
    with torch.no_grad():
        assert torch.equal(rebuilt(X), model(X))
    assert calls == [1]


@pytest.mark.parametrize("value", [
    "1", [], ["1", "1"], ["a.b"], [3], ["2"],  # not a list, empty, twice, a path, not a name, not a slot
])
def test_hostile_none_children_are_refused(value: object) -> None:
    model = _model()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    data = ir.to_dict()
    data["encoder.convs"]["meta"]["none_children"] = value
    with pytest.raises(IRError, match="none_children"):
        IR.from_dict(data).validate()


def test_a_none_slot_over_a_child_is_a_build_error() -> None:
    model = _model()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    ir["encoder.convs"].meta["none_children"] = ["0"]  # the Linear's slot
    with pytest.raises(IRError, match="None slot"):
        ir2torch.convert(ir, model.state_dict(), allow=_allow(ir))
