"""Models quantized with torchao's ``quantize_`` convert and rebuild exactly (issue 51 point 2): every configuration
the CPU build of torchao 0.18 runs (``Int8WeightOnlyConfig``, ``Int8DynamicActivationInt8WeightConfig`` per row,
per tensor and asymmetric, ``Float8WeightOnlyConfig`` (per row, per tensor, e5m2), ``IntxWeightOnlyConfig`` and
``Int8DynamicActivationIntxWeightConfig`` with int4 and int2 groups), in float32 and bfloat16: bit-exact outputs,
each rebuilt weight of the original's class, through the model's own ``state_dict()`` and through ``.safetensors``
(inner tensors and checked records, no pickle), the loop a fixpoint. What the IR cannot carry is refused by
name: a torchao weight outside an ``nn.Linear`` leaf, a class or attribute outside the records, a state of the
wrong class, lowering."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import ConversionError, ResourceBudgetError, StateDictError
from common.ir import IR
from common.state_dict import load_safetensors, save_safetensors
from common.torchao_tensors import SUBCLASS_KEY

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torchao.quantization as tq  # torchao warns about its CUDA extensions at import

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")

CONFIGS = {
    "int8_weight_only": lambda: tq.Int8WeightOnlyConfig(),
    "int8_weight_only_per_tensor": lambda: tq.Int8WeightOnlyConfig(granularity=tq.PerTensor()),
    "int8_dynamic": lambda: tq.Int8DynamicActivationInt8WeightConfig(),
    "int8_dynamic_per_tensor": lambda: tq.Int8DynamicActivationInt8WeightConfig(granularity=tq.PerTensor()),
    "int8_dynamic_asymmetric": lambda: tq.Int8DynamicActivationInt8WeightConfig(
        act_mapping_type=tq.MappingType.ASYMMETRIC),
    "float8_weight_only": lambda: tq.Float8WeightOnlyConfig(),
    "float8_weight_only_per_tensor": lambda: tq.Float8WeightOnlyConfig(granularity=tq.PerTensor()),
    "float8_e5m2_weight_only": lambda: tq.Float8WeightOnlyConfig(weight_dtype=torch.float8_e5m2),
    "int8_weight_only_groups": lambda: tq.Int8WeightOnlyConfig(granularity=tq.PerGroup(32)),
    "int4_weight_only_groups": lambda: tq.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=tq.PerGroup(32)),
    "int2_asymmetric_groups": lambda: tq.IntxWeightOnlyConfig(weight_dtype=torch.int2, granularity=tq.PerGroup(16),
                                                              mapping_type=tq.MappingType.ASYMMETRIC),
    "int8_dynamic_int4_weight": lambda: tq.Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=tq.PerGroup(32)),
}


class Block(nn.Module):
    """Two linear layers (one without bias) around a norm and an activation."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.norm, self.down = nn.Linear(64, 96), nn.LayerNorm(96), nn.Linear(96, 32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.norm(self.up(x)))) + x[..., :32]


def quantized(config: str, dtype: torch.dtype = torch.float32) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = Block().to(dtype).eval()
    tq.quantize_(model, CONFIGS[config]())
    return model, torch.randn(2, 5, 64, dtype=dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("config", CONFIGS)
def test_a_quantized_model_round_trips_bit_exact(config, dtype, tmp_path):
    model, x = quantized(config, dtype)
    want = model(x)
    ir = torch2ir.convert(model, (x,))
    assert ir["up"].type == "linear" and ir["up"].state["weight"]["subclass"] == \
        f"{type(model.up.weight).__module__}.{type(model.up.weight).__qualname__}"
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(x), want)
    for name in ("up", "down"):
        mine, theirs = getattr(rebuilt, name).weight, getattr(model, name).weight
        assert type(mine) is type(theirs) and not mine.requires_grad
        assert mine.qdata.data_ptr() != theirs.qdata.data_ptr()  # a copy, as a plain weight's load is
    assert torch2ir.convert(rebuilt, (x,)) == ir  # fixpoint
    ir.save(tmp_path / "m.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "m.safetensors")
    again = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), tmp_path / "m.safetensors")
    assert torch.equal(again(x), want)


def test_weights_are_stored_as_inner_tensors_with_records(tmp_path):
    model, _ = quantized("int8_dynamic")
    save_safetensors(model.state_dict(), tmp_path / "m.safetensors")
    from safetensors import safe_open

    with safe_open(str(tmp_path / "m.safetensors"), framework="pt") as fh:
        keys, metadata = set(fh.keys()), fh.metadata()
        assert fh.get_tensor("up.weight:qdata").dtype == torch.int8
    assert {"up.weight:qdata", "up.weight:scale", "up.weight:zero_point", "up.bias"} <= keys
    assert "up.weight" not in keys
    import json

    record = json.loads(metadata[SUBCLASS_KEY])["up.weight"]
    assert record["class"] == "torchao.quantization.Int8Tensor"
    assert record["attributes"]["act_quant_kwargs"] == {
        "granularity": {"kind": "PerRow", "dim": -1}, "mapping_type": "SYMMETRIC", "reduce_range": False}
    loaded = load_safetensors(tmp_path / "m.safetensors")
    for name in ("qdata", "scale", "zero_point"):
        assert torch.equal(getattr(loaded["up.weight"], name), getattr(model.up.weight, name))
    assert loaded["up.weight"].act_quant_kwargs == model.up.weight.act_quant_kwargs


def test_a_tied_torchao_weight_is_stored_once(tmp_path):
    model, _ = quantized("int8_weight_only")
    state = {"a.weight": model.up.weight, "b.weight": model.up.weight}
    save_safetensors(state, tmp_path / "m.safetensors")
    loaded = load_safetensors(tmp_path / "m.safetensors")
    assert loaded["a.weight"] is loaded["b.weight"] and torch.equal(loaded["a.weight"].qdata, model.up.weight.qdata)


class FunctionalUser(nn.Module):
    """A torchao weight used by a module's own forward (no ``nn.Linear`` leaf)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(x, self.weight)


def test_a_torchao_weight_outside_a_linear_leaf_is_refused_naming_it():
    model, x = quantized("int8_weight_only")
    with pytest.raises(ConversionError,
                       match=r"at 1\.weight: .*1\.weight \(.*Int8Tensor\) is not the weight of an nn\.Linear"):
        torch2ir.convert(nn.Sequential(model, FunctionalUser(model.up.weight)), (x,))
    with pytest.raises(ConversionError, match=r"1\.user\.weight .*its module is a FunctionalUser"):
        wrapper = nn.Sequential(model, nn.Module())
        wrapper[1].user = FunctionalUser(model.down.weight.clone())
        wrapper[1].forward = lambda x: wrapper[1].user(x)
        torch2ir.convert(wrapper, (x,))


def test_a_torchao_weight_of_a_linear_inside_another_leaf_is_refused():
    """``nn.MultiheadAttention`` (a handled leaf) reads its ``out_proj.weight`` itself: quantize_ leaves it alone,
    and one put there by hand is refused."""
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(64, 4, batch_first=True).eval()
    donor = nn.Sequential(nn.Linear(64, 64))
    tq.quantize_(donor, tq.Int8WeightOnlyConfig())
    attention.out_proj.weight = donor[0].weight
    x = torch.randn(2, 5, 64)
    with pytest.raises(ConversionError, match=r"attn\.out_proj\.weight .*is not the weight of an nn\.Linear kept as a "
                       "handled leaf"):
        torch2ir.convert(_Wrap(attention), (x,))


class _Wrap(nn.Module):
    def __init__(self, attention: nn.Module) -> None:
        super().__init__()
        self.attn = attention

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x)[0]


def test_a_torchao_class_or_attribute_the_records_do_not_carry_is_refused():
    model, x = quantized("int8_weight_only")

    class Other(type(model.up.weight)):
        pass

    Other.__module__ = "torchao.quantization"
    weight = model.up.weight
    model.up.weight = nn.Parameter(Other(weight.qdata, weight.scale, weight.block_size, weight.dtype),
                                   requires_grad=False)
    with pytest.raises(ConversionError, match=r"up\.weight is a torchao\.quantization\..*Other, not one of"):
        torch2ir.convert(model, (x,))
    torch.manual_seed(0)
    static = nn.Sequential(nn.Linear(64, 32)).eval()
    tq.quantize_(static, tq.Int8StaticActivationInt8WeightConfig(act_quant_scale=torch.tensor(0.1)))
    with pytest.raises(ConversionError, match="act_quant_scale"):
        torch2ir.convert(static, (torch.randn(2, 64),))


def test_a_state_of_another_class_is_refused_at_rebuild():
    model, x = quantized("int8_weight_only")
    ir = torch2ir.convert(model, (x,))
    torch.manual_seed(0)
    float_model = Block().eval()
    with pytest.raises(StateDictError, match="expected torchao.quantization.Int8Tensor, found a plain tensor"):
        ir2torch.convert(ir, float_model.state_dict())
    float_ir = torch2ir.convert(float_model, (x,))
    with pytest.raises(StateDictError, match="expected a plain tensor, found torchao.quantization.Int8Tensor"):
        ir2torch.convert(float_ir, model.state_dict())
    other, _ = quantized("float8_weight_only")
    with pytest.raises(StateDictError, match="found torchao.quantization.Float8Tensor"):
        ir2torch.convert(ir, other.state_dict())


def test_lowering_a_torchao_model_is_refused_by_name():
    model, x = quantized("int8_dynamic")
    ir = torch2ir.convert(model, (x,))
    with pytest.raises(ConversionError, match=r"torchao weights \(up\.weight, down\.weight: "
                                              r"torchao\.quantization\.Int8Tensor\)"):
        ir.lower()
    with pytest.raises(ConversionError, match=r"a model with torchao weights \(up\.weight, down\.weight\) cannot be "
                                              "lowered"):
        torch2ir.lower(model, (x,))


def test_the_model_keeps_its_torchao_weights_after_converting():
    model, x = quantized("int8_dynamic")
    weights = (model.up.weight, model.down.weight)
    torch2ir.convert(model, (x,))
    assert (model.up.weight, model.down.weight) == weights  # the same objects, put back after the stand-ins
    with pytest.raises(ConversionError):
        torch2ir.convert(nn.Sequential(model, FunctionalUser(model.up.weight)), (x,))
    assert (model.up.weight, model.down.weight) == weights


def test_the_memory_probe_measures_the_torchao_kernels_of_a_rebuild():
    """A rebuilt root's forward is probed on fake tensors with the torchao weights too: a call over the budget is
    refused before it runs, the same call within it runs exactly."""
    model, _ = quantized("int8_dynamic")
    x = torch.randn(4096, 64)
    ir = torch2ir.convert(model, (x,))
    with pytest.raises(ResourceBudgetError, match="would allocate"):
        ir2torch.convert(ir, model.state_dict(), max_bytes=400_000)(x)
    assert torch.equal(ir2torch.convert(ir, model.state_dict(), max_bytes=50_000_000)(x), model(x))


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(64, 64), nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


def test_a_torchao_weight_shared_by_two_linears_stays_shared(tmp_path):
    torch.manual_seed(0)
    model = _Tied().eval()
    tq.quantize_(model, tq.Int8DynamicActivationInt8WeightConfig())
    model.b.weight = model.a.weight
    x = torch.randn(3, 64)
    ir = torch2ir.convert(model, (x,))
    assert ir["b"].state["weight"]["tie"] == "a.weight" and ir["b"].state["weight"]["subclass"]
    save_safetensors(model.state_dict(), tmp_path / "m.safetensors")
    for state in (model.state_dict(), tmp_path / "m.safetensors"):
        rebuilt = ir2torch.convert(ir, state)
        assert rebuilt.b.weight is rebuilt.a.weight and type(rebuilt.a.weight) is type(model.a.weight)
        assert torch.equal(rebuilt(x), model(x))
