"""Eager int8 models (after ``torch.ao.quantization.convert``) convert and rebuild exactly: every int8 class an IR
carries round-trips inside a model made by torch's own ``prepare`` / ``convert`` (bit-exact outputs, the rebuilt
module of the real class, the loop a fixpoint), through JSON and through ``.safetensors`` (weights stored as
integers with checked quantization records), from the model's own ``state_dict()`` (a ``Linear``'s packed
entry included). Classes an IR does not carry are refused before tracing, naming the module."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.ao.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq
import torch.ao.quantization as tq
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError, IRError, StateDictError
from common.ir import IR
from common.state_dict import load_safetensors, save_safetensors, unpack_int8
from torch2ir.quant.int8 import INT8, int8_modules

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant, self.dequant = tq.QuantStub(), tq.DeQuantStub()
        self.conv = nn.Conv2d(3, 4, 3)
        self.add = nn.quantized.FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(self.quant(x))
        return self.dequant(self.add.add(y, y))


class Wrap(nn.Module):
    """``QuantStub -> inner -> DeQuantStub``; ``method`` calls a FloatFunctional's method instead."""

    def __init__(self, inner: nn.Module, method: str | None = None) -> None:
        super().__init__()
        self.quant, self.inner, self.dequant, self.method = tq.QuantStub(), inner, tq.DeQuantStub(), method

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.quant(x)
        if self.method in ("add", "mul", "add_relu", "matmul"):
            y = getattr(self.inner, self.method)(x, x)
        elif self.method in ("add_scalar", "mul_scalar"):
            y = getattr(self.inner, self.method)(x, 0.5)
        elif self.method == "cat":
            y = self.inner.cat([x, x], 1)
        else:
            y = self.inner(x)
        return self.dequant(y)


def _int8(model: nn.Module, x: torch.Tensor, qconfig: str = "x86", fuse: list | None = None) -> nn.Module:
    """``model`` prepared, calibrated on ``x`` and converted by torch.ao (random weights, seeded)."""
    model = model.eval()
    if fuse:
        model = tq.fuse_modules(model, fuse)
    model.qconfig = tq.get_default_qconfig(qconfig)
    prepared = tq.prepare(model)
    prepared(x)
    return tq.convert(prepared)


def _x(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _direct(inner: nn.Module) -> nn.Module:
    """An int8 module without a float mapping in torch.ao, between a real Quantize and DeQuantize."""
    model = Wrap(inner)
    model.quant, model.dequant = nnq.Quantize(0.05, 64, torch.quint8), nnq.DeQuantize()
    return model


#: ``{id: (model maker, input)}``: every class of torch2ir.quant.int8.INT8, made as torch.ao makes it.
CASES = {
    "conv1d": (lambda: _int8(Wrap(nn.Conv1d(3, 4, 3, stride=2, padding=1)), _x(4, 3, 9)), _x(2, 3, 9, seed=1)),
    "conv2d": (lambda: _int8(Wrap(nn.Conv2d(3, 4, 3, groups=1, dilation=2)), _x(4, 3, 9, 9)), _x(2, 3, 9, 9, seed=1)),
    "conv2d_reflect_no_bias": (lambda: _int8(Wrap(nn.Conv2d(3, 6, 3, padding=1, padding_mode="reflect", groups=3,
                                                        bias=False)), _x(4, 3, 7, 7)), _x(2, 3, 7, 7, seed=1)),
    "conv3d": (lambda: _int8(Wrap(nn.Conv3d(3, 4, 2)), _x(4, 3, 5, 5, 5)), _x(2, 3, 5, 5, 5, seed=1)),
    **{f"convrelu{d}d": (lambda d=d: _int8(Wrap(nn.Sequential(getattr(nn, f"Conv{d}d")(3, 4, 3), nn.ReLU())),
                                           _x(4, 3, *[6] * d), fuse=[["inner.0", "inner.1"]]), _x(2, 3, *[6] * d))
       for d in (1, 2, 3)},
    "linear": (lambda: _int8(Wrap(nn.Linear(5, 7)), _x(4, 5)), _x(3, 5, seed=1)),
    "linear_no_bias_per_tensor": (lambda: _int8(Wrap(nn.Linear(5, 7, bias=False)), _x(4, 5), qconfig="qnnpack"),
                                  _x(3, 5, seed=1)),
    "linearrelu": (lambda: _int8(Wrap(nn.Sequential(nn.Linear(5, 7), nn.ReLU())), _x(4, 5),
                                 fuse=[["inner.0", "inner.1"]]), _x(3, 5, seed=1)),
    "hardswish": (lambda: _int8(Wrap(nn.Hardswish()), _x(4, 6)), _x(3, 6, seed=1)),
    "relu6": (lambda: _int8(Wrap(nn.ReLU6()), _x(4, 6)), _x(3, 6, seed=1)),
    "leakyrelu": (lambda: _int8(Wrap(nn.LeakyReLU(0.2)), _x(4, 6)), _x(3, 6, seed=1)),
    "elu": (lambda: _int8(Wrap(nn.ELU(0.7)), _x(4, 6)), _x(3, 6, seed=1)),
    "sigmoid": (lambda: _direct(nnq.Sigmoid(1 / 256, 0)), _x(3, 6, seed=1)),
    "softmax": (lambda: _direct(nnq.Softmax(1, 1 / 256, 0)), _x(3, 6, seed=1)),
    "dropout": (lambda: _int8(Wrap(nn.Dropout(0.3)), _x(4, 6)), _x(3, 6, seed=1)),
    "batchnorm2d": (lambda: _int8(Wrap(nn.BatchNorm2d(3)), _x(4, 3, 5, 5)), _x(2, 3, 5, 5, seed=1)),
    "batchnorm3d": (lambda: _int8(Wrap(nn.BatchNorm3d(3)), _x(4, 3, 4, 4, 4)), _x(2, 3, 4, 4, 4, seed=1)),
    "bnrelu2d": (lambda: _int8(Wrap(nn.Sequential(nn.BatchNorm2d(3), nn.ReLU())), _x(4, 3, 5, 5),
                               fuse=[["inner.0", "inner.1"]]), _x(2, 3, 5, 5, seed=1)),
    "bnrelu3d": (lambda: _int8(Wrap(nn.Sequential(nn.BatchNorm3d(3), nn.ReLU())), _x(4, 3, 4, 4, 4),
                               fuse=[["inner.0", "inner.1"]]), _x(2, 3, 4, 4, 4, seed=1)),
    **{f"qfunctional_{m}": (lambda m=m: _int8(Wrap(nn.quantized.FloatFunctional(), m), _x(4, 6, 6)), _x(2, 6, 6))
       for m in ("add", "add_relu", "mul", "add_scalar", "mul_scalar", "cat", "matmul")},
}


def test_every_int8_class_has_a_case():
    made = set()
    for make, _ in CASES.values():
        torch.manual_seed(0)
        made |= {type(m) for m in make().modules()}
    assert set(INT8) <= made


@pytest.mark.parametrize("case", CASES)
def test_int8_class_round_trips(case: str, tmp_path):
    torch.manual_seed(0)
    make, x = CASES[case]
    model = make()
    want = model(x)
    assert want.abs().sum() > 0 or case == "dropout"
    ir = torch2ir.convert(model, (x,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(x), want)
    for path, module in model.named_modules():  # the real int8 classes, not lookalikes
        if type(module) in INT8:
            assert type(rebuilt.get_submodule(path)) is type(module), path
    assert torch2ir.convert(rebuilt, (x,)) == ir  # fixpoint
    ir.save(tmp_path / "m.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "m.safetensors")
    again = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), tmp_path / "m.safetensors")
    assert torch.equal(again(x), want)


def test_torch_ao_convert_of_a_rebuilt_qat_model_converts_again_exactly():
    """The loop on the int8 model itself: QAT-prepared original -> IR -> rebuild -> tq.convert -> IR -> rebuild."""
    torch.manual_seed(0)
    model = nn.Sequential(tq.QuantStub(), nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 5),
                          tq.DeQuantStub()).train()
    model.qconfig = tq.get_default_qat_qconfig("x86")
    tq.prepare_qat(model, inplace=True)
    model(_x(4, 3, 8, 8)).sum().backward()
    model.eval()
    x = _x(2, 3, 8, 8, seed=2)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    int8, rebuilt_int8 = tq.convert(copy.deepcopy(model)), tq.convert(rebuilt)
    ir = torch2ir.convert(rebuilt_int8, (x,))
    again = ir2torch.convert(ir, rebuilt_int8.state_dict())
    assert torch.equal(again(x), int8(x))
    assert isinstance(again, nn.Sequential) and isinstance(again[4], nnq.Linear)


def test_the_model_before_convert_round_trips_exactly():
    torch.manual_seed(0)
    model = Small().eval()
    model.qconfig = tq.get_default_qconfig("x86")
    prepared = tq.prepare(model)
    prepared(_x(2, 3, 8, 8))
    x = _x(2, 3, 8, 8, seed=1)
    assert int8_modules(prepared) == []  # FloatFunctional computes in float until convert
    rebuilt = ir2torch.convert(torch2ir.convert(prepared, (x,)), prepared.state_dict())
    assert torch.equal(rebuilt(x), prepared(x))


def test_packed_state_is_recorded_unpacked():
    torch.manual_seed(0)
    model, x = CASES["linear"][0](), CASES["linear"][1]
    ir = torch2ir.convert(model, (x,))
    state = ir["inner"].state
    assert {n: (r["dtype"], r["shape"]) for n, r in state.items()} == {
        "weight": (torch.qint8, [7, 5]), "bias": (torch.float32, [7]), "scale": (torch.float32, []),
        "zero_point": (torch.int64, [])}
    raw = model.state_dict()
    assert "inner._packed_params._packed_params" in raw
    unpacked = unpack_int8(raw)
    assert torch.equal(unpacked["inner.weight"].int_repr(), model.inner.weight().int_repr())
    assert "inner._packed_params.dtype" not in unpacked and "inner._packed_params._packed_params" not in unpacked


def test_safetensors_keeps_per_channel_and_per_tensor_parameters(tmp_path):
    g = torch.Generator().manual_seed(0)
    per_channel = torch.quantize_per_channel(torch.randn(4, 3, generator=g), torch.rand(4, dtype=torch.float64) + .1,
                                             torch.tensor([0, 1, -2, 3]), 0, torch.qint8)
    per_tensor = torch.quantize_per_tensor(torch.randn(5, generator=g), 0.07, 130, torch.quint8)
    save_safetensors({"a": per_channel, "b": per_tensor, "c": torch.ones(2)}, tmp_path / "q.safetensors")
    loaded = load_safetensors(tmp_path / "q.safetensors")
    for key, want in (("a", per_channel), ("b", per_tensor)):
        got = loaded[key]
        assert got.dtype == want.dtype and got.qscheme() == want.qscheme()
        assert torch.equal(got.int_repr(), want.int_repr()) and torch.equal(got.dequantize(), want.dequantize())
    assert torch.equal(loaded["a"].q_per_channel_scales(), per_channel.q_per_channel_scales())


_GOOD = {"dtype": "qint8", "qscheme": "per_channel_affine", "axis": 0, "scales": [0.1, 0.2],
         "zero_points": [0, 1]}


@pytest.mark.parametrize(("record", "match"), [
    ({**_GOOD, "dtype": "float32"}, "dtype 'float32'"),
    ({**_GOOD, "dtype": "quint8"}, "where the stored tensor is torch.int8"),
    ({**_GOOD, "axis": 2}, "axis 2"),
    ({**_GOOD, "axis": True}, "axis True"),
    ({**_GOOD, "scales": [0.1]}, "2 finite positive scales"),
    ({**_GOOD, "scales": [0.1, float("nan")]}, "malformed torch2ir.quantized"),  # NaN is no strict JSON
    ({**_GOOD, "scales": [0.1, -1.0]}, "2 finite positive scales"),
    ({**_GOOD, "zero_points": [0, 300]}, r"zero points in \[-128, 127\]"),
    ({**_GOOD, "extra": 1}, "has fields"),
    ({"dtype": "qint8", "qscheme": "per_tensor_affine", "scale": "0.1", "zero_point": 0}, "scale '0.1'"),
    ({"dtype": "qint8", "qscheme": "per_tensor_affine", "scale": 0.1, "zero_point": 1e9}, "zero point"),
    ({"dtype": "qint8", "qscheme": "per_tensor_symmetric", "scale": 0.1, "zero_point": 0}, "has fields"),
])
def test_a_hostile_quantization_record_is_refused(tmp_path, record, match):
    from common.tensor_files import write_tensors_atomic

    path = tmp_path / "q.safetensors"
    import json
    write_tensors_atomic(path, {"w": torch.zeros(2, 3, dtype=torch.int8)},
                         {"torch2ir.aliases": "{}", "torch2ir.quantized": json.dumps({"w": record})})
    with pytest.raises(StateDictError, match=match):
        load_safetensors(path)


@pytest.mark.parametrize("metadata", ["[1]", "{\"w\": 3}", "not json", "{\"missing\": {}}",
                                      "{\"w\": " + "[" * 5000 + "]" * 5000 + "}"])
def test_a_malformed_quantization_table_is_refused(tmp_path, metadata):
    from common.tensor_files import write_tensors_atomic

    path = tmp_path / "q.safetensors"
    write_tensors_atomic(path, {"w": torch.zeros(2, dtype=torch.int8)},
                         {"torch2ir.aliases": "{}", "torch2ir.quantized": metadata})
    with pytest.raises(StateDictError):
        load_safetensors(path)


@pytest.mark.parametrize(("case", "key", "data", "match"), [
    ("linear", "quant", {"dtype": torch.float32}, "dtype must be one of"),
    ("conv2d", "inner", {"in_channels": 3}, "takes the arguments"),
    ("linear", "inner", {"in_features": 5, "out_features": 7, "bias": True, "device": "cuda"}, "takes the arguments"),
    ("sigmoid", "inner", {"output_scale": "x", "output_zero_point": 0}, "inner"),
])
def test_hostile_int8_arguments_are_refused(case, key, data, match):
    torch.manual_seed(0)
    model, x = CASES[case][0](), CASES[case][1]
    ir = torch2ir.convert(model, (x,))
    ir[key].data = data
    with pytest.raises(IRError, match=match):
        ir2torch.convert(ir, model.state_dict())(x)


def test_an_int8_class_an_ir_does_not_carry_is_refused_naming_it():
    model = nn.Sequential(nnq.Quantize(0.1, 0, torch.quint8), nnq.ConvTranspose2d(3, 4, 3), nnq.DeQuantize())
    with pytest.raises(ConversionError, match=r"1 eager int8 module of a class an IR does not carry: "
                       r"1 \(ConvTranspose2d\)") as info:
        torch2ir.convert(model, (_x(1, 3, 5, 5),))
    assert "before tq.convert" in info.value.hint


def test_a_dynamically_quantized_model_is_refused_naming_its_modules():
    model = tq.quantize_dynamic(nn.Sequential(nn.Linear(4, 4)), {nn.Linear}, dtype=torch.float16)
    with pytest.raises(ConversionError, match=r"0 \(Linear\)"):
        torch2ir.convert(model, (_x(2, 4),))


def test_lowering_an_int8_capture_is_refused_by_name():
    torch.manual_seed(0)
    model, x = CASES["conv2d"][0](), CASES["conv2d"][1]
    ir = torch2ir.convert(model, (x,))
    with pytest.raises(IRError, match="eager int8 modules are traced as stand-ins"):
        ir.lower()


def test_int8_fused_and_unfused_modules_keep_their_classes():
    assert nniq.ConvReLU2d in INT8 and nnq.QFunctional in INT8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.manual_seed(0)
        model = CASES["convrelu2d"][0]()
    assert type(model.inner[0]) is nniq.ConvReLU2d


@pytest.mark.parametrize("value", ["__import__('os').system('touch PWNED')", "__class__", "forward", 3, None])
def test_a_hostile_method_of_an_int8_qfunctional_call_is_refused_at_load(tmp_path, monkeypatch, value):
    import json

    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    make, x = CASES["qfunctional_add"]
    path = tmp_path / "m.ir.json"
    torch2ir.convert(make(), (x,)).save(path)
    doc = json.loads(path.read_text())
    found = 0
    for impl in doc["implementations"].values():
        nodes = impl.get("nodes", {})
        for node in nodes.values() if isinstance(nodes, dict) else nodes:
            if node.get("type") == "int8_qfunctional":
                found += 1
                if value is None:
                    del node["method"]
                else:
                    node["method"] = value
    assert found == 1
    path.write_text(json.dumps(doc))
    with pytest.raises(IRError, match="method"):
        IR.load(path)
    assert not (tmp_path / "PWNED").exists()


class _Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) + x)


def _fx_int8(model: nn.Module, x: torch.Tensor) -> nn.Module:
    from torch.ao.quantization import get_default_qconfig_mapping
    from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

    prepared = prepare_fx(model.eval(), get_default_qconfig_mapping("x86"), (x,))
    prepared(x)
    return convert_fx(prepared)


def test_an_fx_int8_model_calling_int8_kernels_is_refused_naming_the_node():
    torch.manual_seed(0)
    x = _x(2, 3, 6, 6)
    model = _fx_int8(_Residual(), x)
    with pytest.raises(ConversionError, match=r"node '\w+' of root calls quantized::add_relu") as info:
        torch2ir.convert(model, (x,))
    assert "convert_pt2e" in info.value.hint


def test_an_fx_int8_model_of_int8_modules_only_round_trips():
    torch.manual_seed(0)
    x = _x(2, 3, 6, 6)
    model = _fx_int8(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1)), x)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    assert torch.equal(rebuilt(x), model(x))
