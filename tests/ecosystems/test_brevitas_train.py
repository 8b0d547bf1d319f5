"""brevitas networks train through a rebuild: their quant layers kept as opaque leaves (``opaque="auto"`` finds
them: their quantizers call brevitas' straight-through estimators, custom autograd.Functions whose backward
``torch.export`` does not record), rebuilt as their real classes by their own constructors (allowed by qualified
name). Train-mode outputs, every parameter's gradient, and the whole state dict after three SGD steps are the
original's (``torch.equal``); converting the rebuild gives the same IR. Cases: a network of QuantIdentity,
QuantConv2d, QuantReLU and QuantLinear layers (tests/ecosystems/test_brevitas_bnn.py's), and bnn_pynq's TFC and
LFC, whose ``TensorNorm`` normalises with the batch's statistics in train mode (a ``TrainModeWarning``): named in
``opaque=["auto", TensorNorm]`` it runs as itself too."""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.ir import IR
from common.notes import CUSTOM_BACKWARD_KEY
from common.opaque import OPAQUE_TYPE, named_classes
from tests.ecosystems.roundtrip import random_running_stats
from tests.ecosystems.test_brevitas_bnn import QuantNet
from torch2ir.frontend.custom_backward import CustomBackwardWarning
from torch2ir.train.dropout import TrainModeWarning

pytest.importorskip("brevitas_examples")

TENSOR_NORM = "brevitas_examples.bnn_pynq.models.tensor_norm.TensorNorm"


def _tfc() -> nn.Module:
    from brevitas_examples.bnn_pynq.models.FC import FC

    return FC(num_classes=10, weight_bit_width=2, act_bit_width=2, in_bit_width=2, in_channels=1,
              out_features=(16, 16), in_features=(8, 8))


def _lfc() -> nn.Module:
    from brevitas_examples.bnn_pynq.models import model_with_cfg

    return model_with_cfg("lfc_1w2a", pretrained=False)[0]


CASES: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...], object]] = {
    "quant_net": (QuantNet, (2, 3, 8, 8), "auto"),
    "quant_net_named": (QuantNet, (2, 3, 8, 8), ["brevitas.nn.quant_activation.QuantIdentity",
                                                 "brevitas.nn.quant_conv.QuantConv2d",
                                                 "brevitas.nn.quant_activation.QuantReLU",
                                                 "brevitas.nn.quant_linear.QuantLinear"]),
    "tfc": (_tfc, (2, 1, 8, 8), ["auto", TENSOR_NORM]),
    "lfc_1w2a": (_lfc, (2, 1, 28, 28), ["auto", TENSOR_NORM]),
}


def _model(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The case's model, made alike at each call (a deep copy of a brevitas model shares its injectors), its batch
    norms given running statistics, and one eval call made (brevitas collects its scales' first statistics)."""
    build, shape, _ = CASES[name]
    torch.manual_seed(0)
    model = build()
    random_running_stats(model)
    x = torch.rand(shape) * 2 - 1
    with torch.no_grad():
        model.eval()(x)
    return model, x


def _convert(model: nn.Module, x: torch.Tensor, opaque: object) -> IR:
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)  # every estimator runs inside an opaque leaf
        warnings.simplefilter("error", TrainModeWarning)  # and TensorNorm too
        return torch2ir.convert(model, (x,), opaque=opaque)


def _trains_alike(original: nn.Module, rebuilt: nn.Module, x: torch.Tensor, steps: int = 3) -> None:
    original.train()
    rebuilt.train()
    assert [n for n, _ in original.named_parameters()] == [n for n, _ in rebuilt.named_parameters()]
    for step in range(steps):
        batch = x * (1 - 0.2 * step)
        torch.manual_seed(step)  # the same dropout masks
        out = original(batch)
        torch.manual_seed(step)
        got = rebuilt(batch)
        assert torch.equal(out, got), f"step {step}: outputs differ"
        out.square().sum().backward()
        got.square().sum().backward()
        for (name, p), q in zip(original.named_parameters(), rebuilt.parameters(), strict=True):
            assert p.grad is not None and torch.equal(p.grad, q.grad), f"step {step}: gradient of {name}"
        assert sum(bool(p.grad.abs().sum() > 0) for p in original.parameters()) >= 3
        with torch.no_grad():
            for module in (original, rebuilt):
                for p in module.parameters():
                    p -= 0.01 * p.grad
                    p.grad = None
        expected, state = original.state_dict(), rebuilt.state_dict()
        assert list(expected) == list(state)
        assert all(torch.equal(expected[k], state[k]) for k in expected), f"step {step}: state differs"


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_rebuild_trains_as_the_original(name: str) -> None:
    model, x = _model(name)
    ir = _convert(model, x, CASES[name][2])
    layers = [impl for impl in ir.values() if impl.type == OPAQUE_TYPE]
    assert layers and all(impl.data["class"].startswith(("brevitas.nn.", TENSOR_NORM)) for impl in layers)
    assert CUSTOM_BACKWARD_KEY not in ir.root.meta
    allow = named_classes(ir.values())
    with tempfile.TemporaryDirectory() as folder:  # through a file
        path = os.path.join(folder, "model.ir.json")
        ir.save(path)
        with warnings.catch_warnings():
            warnings.simplefilter("error", CustomBackwardWarning)
            rebuilt = ir2torch.convert(IR.load(path), model.state_dict(), allow=allow)
    with torch.no_grad():
        assert torch.equal(rebuilt.eval()(x), model(x))
    _trains_alike(_model(name)[0], rebuilt, x)


@pytest.mark.parametrize("name", ["quant_net", "tfc"])
def test_converting_the_rebuild_gives_the_same_ir(name: str) -> None:
    model, x = _model(name)
    ir = _convert(model, x, CASES[name][2])
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=named_classes(ir.values()))
    assert _convert(rebuilt, x, CASES[name][2]) == ir


def test_without_opaque_the_estimators_are_operators_with_their_backward() -> None:
    """brevitas' straight-through estimators are recorded as the ``torch2ir_ste`` operators (common.ste_ops): no
    CustomBackwardWarning, and the traced rebuild's gradients are the original's (eval mode: no statistics)."""
    model, x = _model("tfc")
    with warnings.catch_warnings():
        warnings.simplefilter("error", CustomBackwardWarning)
        ir = torch2ir.convert(model, (x,))
        rebuilt = ir2torch.convert(ir, model.state_dict())
    assert CUSTOM_BACKWARD_KEY not in ir.root.meta
    targets = {str(n.get("implementation")) for impl in ir.values() if impl.graph is not None
               for _, n in impl.graph.nodes(data=True)}
    assert "torch2ir_ste.round.default" in targets
    original = _model("tfc")[0]
    for module in (original, rebuilt):
        module.eval()(x).square().sum().backward()
    grads = [(p.grad, q.grad) for p, q in zip(original.parameters(), rebuilt.parameters(), strict=True)]
    assert sum(p is not None and bool(p.abs().sum() > 0) for p, _ in grads) >= 3
    assert all((p is None) == (q is None) and (p is None or torch.equal(p, q)) for p, q in grads)


def test_auto_alone_names_the_tensor_norm_to_pass() -> None:
    """``"auto"`` does not make a module with its own train-mode computation opaque; the warning names its class."""
    model, x = _model("tfc")
    with pytest.warns(TrainModeWarning, match=r"opaque=\['brevitas_examples\.bnn_pynq\.models\.tensor_norm\."
                                              r"TensorNorm'\] \(with \"auto\" in the list"):
        ir = torch2ir.convert(model, (x,), opaque="auto")
    assert TENSOR_NORM not in named_classes(ir.values())
