"""torch.ao eager QAT and post-training observers: the rebuild has the real classes and state, and
``disable_observer``, ``freeze_bn_stats`` and ``convert`` behave on it as on the original (#15 point 3)."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.ao.nn.intrinsic.qat as nniqat
import torch.ao.nn.qat as nnqat
from torch.ao import quantization as tq

import ir2torch
import torch2ir
from common import IR
from tests.quant.eager_models import QCONFIGS, assert_same_modules, converted_pair, ptq_model, qat_model, step

X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))


def _rebuild(model: torch.nn.Module, tmp_path) -> tuple[IR, torch.nn.Module]:
    ir = torch2ir.convert(model, (X,))
    ir.save(tmp_path / "q.ir.json")
    # cloned: HistogramObserver's load_state_dict assigns the given min_val / max_val tensors (torch's own way)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    return ir, ir2torch.convert(IR.load(tmp_path / "q.ir.json"), state)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("qconfig", sorted(QCONFIGS))
def test_qat_model_round_trips_with_its_classes_and_state(qconfig: str, mode: str, tmp_path) -> None:
    model = qat_model(QCONFIGS[qconfig]()).train(mode == "train")
    ir, rebuilt = _rebuild(model, tmp_path)
    assert type(rebuilt.conv) is nniqat.ConvBnReLU2d and type(rebuilt.conv2) is nniqat.ConvBn2d
    assert type(rebuilt.conv3) is nniqat.ConvReLU2d and type(rebuilt.conv4) is nnqat.Conv2d
    assert type(rebuilt.lin) is nniqat.LinearReLU and type(rebuilt.head) is nnqat.Linear
    assert type(rebuilt.quant) is tq.QuantStub and type(rebuilt.dequant) is tq.DeQuantStub
    assert ir["conv.weight_fake_quant"].type in ("fusedmovingavgobsfakequantize", "fakequantize")
    assert_same_modules(model, rebuilt)
    for _ in range(3):  # train mode: observers, fake-quant scales and BN statistics move alike
        assert step(model, rebuilt, X) == 0.0
        assert_same_modules(model, rebuilt)
    moved = qat_model(QCONFIGS[qconfig]()).train(mode == "train")
    assert step(moved, copy.deepcopy(moved), X) == 0.0  # the comparison is deterministic ...
    if mode == "train":  # ... and the state did move
        assert not torch.equal(moved.conv.weight_fake_quant.scale, model.conv.weight_fake_quant.scale) or \
            not torch.equal(moved.conv.bn.running_mean, model.conv.bn.running_mean)


@pytest.mark.parametrize("qconfig", sorted(QCONFIGS))
def test_disable_observer_and_freeze_bn_stats_act_on_the_rebuild(qconfig: str, tmp_path) -> None:
    model = qat_model(QCONFIGS[qconfig]())
    _, rebuilt = _rebuild(model, tmp_path)
    for m in (model, rebuilt):
        m.apply(tq.disable_observer)
        m.apply(nniqat.freeze_bn_stats)
    assert rebuilt.conv.freeze_bn and not bool(rebuilt.conv.weight_fake_quant.observer_enabled)
    before = copy.deepcopy(rebuilt.state_dict())
    for _ in range(2):
        assert step(model, rebuilt, X) == 0.0
    assert_same_modules(model, rebuilt)
    frozen = [k for k in before if "running_" in k or "min_val" in k or "max_val" in k or k.endswith("scale")]
    assert frozen and all(torch.equal(before[k], rebuilt.state_dict()[k]) for k in frozen)
    # the same steps without freezing move them: the calls above did something
    _, moving = _rebuild(qat_model(QCONFIGS[qconfig]()), tmp_path)
    step(moving, moving, X)
    assert any(not torch.equal(before[k], moving.state_dict()[k]) for k in frozen)


@pytest.mark.parametrize("qconfig", sorted(QCONFIGS))
def test_convert_to_int8_acts_on_the_rebuild(qconfig: str, tmp_path) -> None:
    model = qat_model(QCONFIGS[qconfig]())
    _, rebuilt = _rebuild(model, tmp_path)
    a, b = converted_pair(model, rebuilt)
    assert [type(m) for _, m in a.named_modules()][1:] == [type(m) for _, m in b.named_modules()][1:]
    assert type(b.conv).__module__.startswith("torch.ao.nn.intrinsic.quantized")
    assert type(b.head) is torch.ao.nn.quantized.Linear and type(b.dequant) is torch.ao.nn.quantized.DeQuantize
    assert b.conv.scale == a.conv.scale and b.conv.zero_point == a.conv.zero_point
    assert torch.equal(b.head.weight().int_repr(), a.head.weight().int_repr())
    out = b(X)
    assert out.dtype == torch.float32 and torch.equal(a(X), out)


def test_post_training_observers_round_trip_and_convert(tmp_path) -> None:
    qconfig = tq.QConfig(activation=tq.HistogramObserver.with_args(bins=64, reduce_range=True),
                         weight=tq.PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
                                                                      qscheme=torch.per_channel_symmetric))
    model = ptq_model(qconfig)
    ir, rebuilt = _rebuild(model, tmp_path)
    assert ir["quant.activation_post_process"].type == "histogramobserver"
    assert ir["conv"].type == "fused_convrelu2d" or ir["conv"].type == "fused_convbnrelu2d"
    assert_same_modules(model, rebuilt)
    assert step(model, rebuilt, X) == 0.0
    assert_same_modules(model, rebuilt)  # the histograms grew alike
    a, b = converted_pair(model, rebuilt)
    assert torch.equal(a(X), b(X))


def test_minmax_and_fixed_qparams_round_trip(tmp_path) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Sigmoid()).train()
    model.qconfig = tq.QConfig(activation=tq.FakeQuantize.with_args(observer=tq.MinMaxObserver),
                               weight=tq.default_weight_fake_quant)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tq.prepare_qat(model, inplace=True)
    x = torch.randn(5, 3)
    model(x)
    assert type(model[1].activation_post_process) is tq.FixedQParamsFakeQuantize
    ir = torch2ir.convert(model, (x,))
    assert ir["1"].meta["observer_hook"] == "forward" and ir["1.activation_post_process"].type == \
        "fixedqparamsfakequantize"
    rebuilt = ir2torch.convert(ir, {k: v.clone() for k, v in model.state_dict().items()})
    assert_same_modules(model, rebuilt)
    torch.manual_seed(0)
    expected = model(x)
    torch.manual_seed(0)
    assert torch.equal(expected, rebuilt(x))
    assert_same_modules(model, rebuilt)


def test_rebuild_converts_back_to_the_same_ir(tmp_path) -> None:
    model = qat_model(QCONFIGS["x86_fused"]())
    ir, rebuilt = _rebuild(model, tmp_path)
    again = torch2ir.convert(rebuilt, (X,))
    assert again.to_dict() == ir.to_dict()


class _Downsampled(torch.nn.Module):
    """torchvision's quantizable ResNet and ShuffleNet: ``fuse_modules_qat`` turns ``Sequential(conv, bn)`` into
    ``Sequential(ConvBn2d, Identity)``, whose Identity leaves no node in the graph (the plain ``+`` keeps the
    int8 model from running: torchvision uses ``FloatFunctional`` there)."""

    def __init__(self) -> None:
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.downsample = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.BatchNorm2d(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant(x)
        return self.dequant(self.conv(x) + self.downsample(x))


def test_a_fused_sequential_rebuilds_as_a_real_sequential_that_int8_conversion_swaps(tmp_path) -> None:
    torch.manual_seed(0)
    model = _Downsampled().train()
    tq.fuse_modules_qat(model, [["downsample.0", "downsample.1"]], inplace=True)
    model.qconfig = tq.get_default_qat_qconfig("fbgemm")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        tq.prepare_qat(model, inplace=True)
    model(X)  # one calibration step: the observers hold statistics
    model.eval()
    ir, rebuilt = _rebuild(model, tmp_path)
    assert ir["downsample"].type == "sequential"
    assert type(rebuilt.downsample) is torch.nn.Sequential and len(rebuilt.downsample) == 2
    assert type(rebuilt.downsample[0]) is nniqat.ConvBn2d and type(rebuilt.downsample[1]) is torch.nn.Identity
    assert torch.equal(rebuilt(X), model(X))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        a, b = tq.convert(copy.deepcopy(model)), tq.convert(rebuilt)
    assert type(b.downsample[0]) is type(a.downsample[0]) is torch.ao.nn.quantized.Conv2d  # swapped in both
    assert b.downsample[0].scale == a.downsample[0].scale
    assert torch.equal(b.downsample[0].weight().int_repr(), a.downsample[0].weight().int_repr())
