"""brevitas layers that torch.export cannot trace, kept as opaque leaves that own their subtree
(:mod:`torch2ir.opaque.constructed`): rebuilt as their real classes by their own constructors from recorded
arguments and injector records, exact in eval and train mode, gradients included, and converted again to the same
IR. The convolution below has an input quantizer whose scale collects runtime statistics in train mode, which a graph
of the eval-mode trace cannot replay: ``opaque="auto"`` keeps it opaque (its branch on the zero point's data is
decided as eager while converting, :mod:`torch2ir.frontend.brevitas_branches`, so export traces it)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import UnsafeTargetError
from common.injectors import INJECTOR_TAG
from common.opaque import OPAQUE_TYPE, OWNED_TYPE, named_classes

qnn = pytest.importorskip("brevitas.nn")
scaled_int = pytest.importorskip("brevitas.quant.scaled_int")


class SixBitWeights(scaled_int.Int8WeightPerTensorFloat):
    """A user's own injector (not of brevitas' package: a rebuild needs it allowed)."""

    bit_width = 6


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = qnn.QuantConv2d(3, 8, 3, padding=1, bias=True, input_quant=scaled_int.Uint8ActPerTensorFloat,
                                    weight_quant=SixBitWeights, weight_bit_width=4)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU()
        self.lin = nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.act(self.bn(self.conv(x))).mean((2, 3)))


X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def _model() -> Net:
    torch.manual_seed(0)
    model = Net()
    model.train()
    with torch.no_grad():
        model(X)  # collects the activation scales' first statistics
    return model.eval()


def _convert(model: nn.Module) -> torch2ir.IR:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch2ir.convert(model, (X,), opaque="auto")


@pytest.fixture(scope="module")
def converted() -> tuple[Net, torch2ir.IR]:
    model = _model()
    return model, _convert(model)


def test_export_traces_the_layer_with_its_branches_decided() -> None:
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir = torch2ir.convert(model, (X,))
    assert not getattr(ir.capture, "opaque", None)
    with torch.no_grad():
        assert torch.equal(ir2torch.convert(ir, model.state_dict())(X), model(X))


def test_the_layer_is_an_opaque_leaf_made_by_its_constructor(converted) -> None:
    model, ir = converted
    assert [p for p, _, _ in ir.capture.opaque] == ["conv"]
    conv = ir["conv"]
    assert conv.type == OPAQUE_TYPE and conv.data["owns"] is True
    weight = conv.data["init"]["weight_quant"][INJECTOR_TAG]
    # the user's injector, by its importable name, with the bit width the layer let on it
    assert weight["class"] == f"{__name__}.SixBitWeights" and weight["let"]["bit_width"] == 4
    assert conv.data["init"]["in_channels"] == 3 and conv.data["init"]["bias"] is True
    below = [k for k in ir if k.startswith("conv.")]
    assert below and all(ir[k].type == OWNED_TYPE for k in below)
    assert len(below) == len(list(model.conv.named_modules())) - 1
    assert ir["bn"].type == "batchnorm2d" and ir["lin"].type == "linear" and ir.root.node_count  # the rest: typed


def test_converting_leaves_the_model_as_it_was() -> None:
    model = _model()
    counters = {p: m.counter for p, m in model.named_modules() if hasattr(m, "counter")}
    state = model.state_dict()
    _convert(model)
    assert counters and {p: m.counter for p, m in model.named_modules() if hasattr(m, "counter")} == counters
    assert list(model.state_dict()) == list(state)


def test_rebuilding_needs_the_users_injector_allowed(converted) -> None:
    model, ir = converted
    needed = named_classes(ir.values())
    assert f"{__name__}.SixBitWeights" in needed and "brevitas.nn.quant_conv.QuantConv2d" in needed
    with pytest.raises(UnsafeTargetError, match="SixBitWeights"):
        ir2torch.convert(ir, model.state_dict(), allow=["brevitas.nn.quant_conv.QuantConv2d"])


def test_rebuilt_layer_is_its_real_class_and_exact_in_eval_and_train_mode() -> None:
    """Its straight-through estimators are its own (a brevitas layer traced into a graph loses them: the
    CustomBackwardWarning), so gradients and SGD steps are exact; its activation scale keeps collecting statistics
    where the original's does."""
    model = _model()
    ir = _convert(model)
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=named_classes(ir.values()))
    assert type(rebuilt.conv) is qnn.QuantConv2d and type(rebuilt.conv.weight_quant) is type(model.conv.weight_quant)
    assert rebuilt.conv.weight_quant.quant_injector.bit_width == 4
    with torch.no_grad():
        assert torch.equal(model(X), rebuilt(X))
    # the original, trained alongside the rebuild: made again alike (a deep copy of a brevitas model shares its
    # injectors, which refer to the copied model's modules; and a state dict loaded into a fresh brevitas model
    # stops collecting the activation scale's statistics: brevitas' own semantics)
    twin = _model()
    rebuilt.train()
    twin.train()
    for step in range(3):
        x = X + step
        out, got = twin(x), rebuilt(x)
        assert torch.equal(out, got)
        out.square().sum().backward()
        got.square().sum().backward()
        grads = {n: p.grad for n, p in twin.named_parameters() if p.grad is not None}
        assert grads and all(torch.equal(grads[n], p.grad) for n, p in rebuilt.named_parameters() if n in grads)
        with torch.no_grad():
            for module in (twin, rebuilt):
                for p in module.parameters():
                    if p.grad is not None:
                        p -= 0.01 * p.grad
                        p.grad = None


def test_converting_the_rebuild_gives_the_same_ir(converted) -> None:
    model, ir = converted
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=named_classes(ir.values()))
    assert _convert(rebuilt) == ir


def test_saved_and_loaded_ir_rebuilds_alike(converted, tmp_path) -> None:
    model, ir = converted
    ir.save(tmp_path / "b.json")
    rebuilt = ir2torch.convert(tmp_path / "b.json", model.state_dict(), allow=named_classes(ir.values()))
    with torch.no_grad():
        assert torch.equal(model(X), rebuilt(X))
