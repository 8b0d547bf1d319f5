"""Every quantizable model of torchvision (``torchvision.models.list_models(module=torchvision.models.quantization)``:
GoogLeNet, Inception-v3, MobileNet-v2 and -v3-large, ResNet-18 and -50, ResNeXt-101 32x8d and 64x4d, ShuffleNet-v2
x0.5 to x2.0), built with ``quantize=False`` (the float model with its ``QuantStub``/``DeQuantStub``, its
``FloatFunctional`` additions and concatenations, fusable blocks), round-trips exactly: random weights, 10
classes, 1x3x32x32 inputs (Inception-v3: its smallest, 1x3x75x75), eval outputs exact, also after a JSON save and
load, and every parameter's gradient exact after one backward pass.

GoogLeNet and Inception-v3 are built without their auxiliary classifiers (``aux_logits=False``, as the sweep).
They and the two ResNeXt-101s (87 M and 81 M parameters) compare outputs only, to keep the time down. ResNet-18 is
also exact in train mode (seeded, batch-norm statistics updated alike), reaches a fixpoint, has every graph module
swappable for the original's, and lowers exactly: its capture (the stubs are traced as stand-ins) refuses
``ir.lower()`` by name, and ``torch2ir.lower`` runs exactly instead.

The int8 models torch.ao makes of them (post-training static quantization, and ``convert`` of a rebuilt QAT
model) convert and rebuild bit-exactly too, through JSON and ``.safetensors``.
"""

from __future__ import annotations

import pytest
import torch

from tests.ecosystems.roundtrip import assert_every_check, assert_fixpoint, randomize_batch_norm, round_trip

pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")

NAMES = ["googlenet", "inception_v3", "mobilenet_v2", "mobilenet_v3_large", "resnet18", "resnet50",
         "resnext101_32x8d", "resnext101_64x4d", "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5",
         "shufflenet_v2_x2_0"]
SLOW = ("googlenet", "inception_v3", "resnext101_32x8d", "resnext101_64x4d")  # outputs only


def test_every_quantizable_model_is_covered(tv):
    assert sorted(tv.models.list_models(module=tv.models.quantization)) == ["quantized_" + n for n in NAMES]


@pytest.mark.parametrize("name", NAMES)
def test_round_trip_is_exact(tv, name):
    torch.manual_seed(0)
    extra = {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}
    model = tv.models.get_model("quantized_" + name, weights=None, quantize=False, num_classes=10, **extra)
    randomize_batch_norm(model)
    side = 75 if name == "inception_v3" else 32
    x = torch.randn(1, 3, side, side)
    ir, rebuilt = round_trip(model, (x,), gradients=name not in SLOW)
    if name == "shufflenet_v2_x0_5":
        assert_fixpoint(ir, rebuilt, (x,))
    if name == "resnet18":
        assert_fixpoint(ir, rebuilt, (x,))
        # train mode on a batch of 2: batch norm on 1x1 maps needs 2 values
        assert_every_check(model, ir, rebuilt, (x,), train_args=(torch.randn(2, 3, side, side),))


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("name", ["mobilenet_v2", "resnet18", "shufflenet_v2_x0_5"])
def test_int8_conversion_of_the_rebuilt_qat_model_equals_the_originals(tv, name):
    """The hardware team's eager loop: fuse, QAT-prepare, train a step, convert to the IR and rebuild, then
    ``torch.ao.quantization.convert`` both: the rebuilt int8 model (its ``FloatFunctional``s swapped for
    ``QFunctional``s, its stubs for real (de)quantizers) gives the original int8 model's outputs bit for bit."""
    import copy

    from torch.ao import quantization as tq

    import ir2torch
    import torch2ir

    torch.manual_seed(0)
    model = tv.models.get_model("quantized_" + name, weights=None, quantize=False, num_classes=10).train()
    model.fuse_model(is_qat=True)
    model.qconfig = tq.get_default_qat_qconfig("x86")
    tq.prepare_qat(model, inplace=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    optimizer.step()
    model.eval()
    x = torch.randn(1, 3, 64, 64)  # 64: ShuffleNet's int8 mean needs more than a 1x1 map
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    assert torch.equal(rebuilt(x), model(x))
    int8, rebuilt_int8 = tq.convert(copy.deepcopy(model)), tq.convert(rebuilt)
    functional = [p for p, m in int8.named_modules() if type(m).__name__ == "QFunctional"]
    assert functional and all(type(rebuilt_int8.get_submodule(p)).__name__ == "QFunctional" for p in functional)
    out = rebuilt_int8(x)
    assert out.abs().sum() > 0 and torch.equal(out, int8(x))
    # the int8 model itself: converted and rebuilt from its own state dict, exact
    again = ir2torch.convert(torch2ir.convert(rebuilt_int8, (x,)), rebuilt_int8.state_dict())
    assert torch.equal(again(x), out)


INT8_NAMES = [n for n in NAMES if not n.startswith("resnext")]  # ResNeXt-101: 1 GB of float weights to calibrate


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("name", INT8_NAMES)
def test_an_int8_model_converts_and_rebuilds_exactly(tv, name, tmp_path):
    """Post-training static quantization as torchvision documents it (fuse, prepare, calibrate, convert), then the
    int8 model through the IR: JSON and ``.safetensors`` files (int8 weights stored as integers), rebuilt with the
    real int8 classes, bit-exact."""
    from torch.ao import quantization as tq

    import ir2torch
    import torch2ir
    from common.ir import IR
    from common.state_dict import save_safetensors
    from torch2ir.quant.int8 import INT8

    torch.manual_seed(0)
    extra = {"aux_logits": False, "init_weights": False} if name in ("googlenet", "inception_v3") else {}
    model = tv.models.get_model("quantized_" + name, weights=None, quantize=False, num_classes=10, **extra).eval()
    randomize_batch_norm(model)
    model.fuse_model(is_qat=False)
    model.qconfig = tq.get_default_qconfig("x86")
    tq.prepare(model, inplace=True)
    side = 75 if name == "inception_v3" else 64
    model(torch.randn(4, 3, side, side))
    int8 = tq.convert(model)
    x = torch.randn(2, 3, side, side)
    torch2ir.convert(int8, (x,)).save(tmp_path / "m.ir.json")
    save_safetensors(int8.state_dict(), tmp_path / "m.safetensors")
    rebuilt = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), tmp_path / "m.safetensors")
    want = int8(x)
    assert want.abs().sum() > 0 and torch.equal(rebuilt(x), want)
    classes = [(p, type(m)) for p, m in int8.named_modules() if type(m) in INT8]
    assert len(classes) > 10 and all(type(rebuilt.get_submodule(p)) is c for p, c in classes)
