"""Real models quantized with torchao's ``quantize_`` round-trip bit-exact (issue 51 point 2): a transformers
``LlamaForCausalLM`` (tiny config, random weights) and timm's ``vit_tiny_patch16_224`` (32x32 images), each with
the configurations torchao 0.18 runs on CPU. The rebuild's outputs equal the quantized original's
(``torch.equal``), from its ``state_dict()`` and from ``.safetensors`` (no pickle), every ``nn.Linear`` keeps a
weight of the original's torchao class, and the rebuild converts back to the same IR."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.ir import IR
from common.state_dict import save_safetensors
from common.torchao_tensors import class_name

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import torchao.quantization as tq  # torchao warns about its CUDA extensions at import

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning",
                                        "ignore::torch2ir.train.dropout.TrainModeWarning")

CONFIGS = {
    "int8_weight_only": lambda: tq.Int8WeightOnlyConfig(),
    "int8_dynamic": lambda: tq.Int8DynamicActivationInt8WeightConfig(),
    "float8_weight_only": lambda: tq.Float8WeightOnlyConfig(),
    "int4_weight_only_groups": lambda: tq.IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=tq.PerGroup(32)),
    "int8_dynamic_int4_weight": lambda: tq.Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=tq.PerGroup(32)),
}


def _llama() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    return LlamaForCausalLM(config).eval(), (torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0)),)


def _output(out: object) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out  # type: ignore[attr-defined,return-value]


def _round_trip(model: nn.Module, args: tuple[torch.Tensor, ...], config: str, tmp_path) -> None:
    tq.quantize_(model, CONFIGS[config]())
    linears = {p: class_name(m.weight) for p, m in model.named_modules() if isinstance(m, nn.Linear)}
    assert linears and all(linears.values())  # every Linear quantized
    want = _output(model(*args))
    ir = torch2ir.convert(model, args)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(_output(rebuilt(*args)), want)
    assert {p: class_name(rebuilt.get_submodule(p).weight) for p in linears} == linears
    assert torch2ir.convert(rebuilt, args) == ir  # fixpoint
    ir.save(tmp_path / "m.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "m.safetensors")
    again = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), tmp_path / "m.safetensors")
    assert torch.equal(_output(again(*args)), want)


@pytest.mark.parametrize("config", CONFIGS)
def test_a_quantized_llama_round_trips_bit_exact(config, tmp_path):
    torch.manual_seed(0)
    model, args = _llama()
    _round_trip(model, args, config, tmp_path)


@pytest.mark.parametrize("config", CONFIGS)
def test_a_quantized_vit_round_trips_bit_exact(config, timm, tmp_path):
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", img_size=32, pretrained=False).eval()
    _round_trip(model, (torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0)),), config, tmp_path)


@pytest.mark.parametrize("config", ["int8_weight_only", "int8_dynamic"])
def test_a_quantized_llama_generates_as_the_original(config):
    """A decoding step converted with dynamic sizes (``convert_for_generation``) keeps the torchao weights: greedy
    ``generate()`` on the rebuild gives the quantized original's tokens."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from ir2torch.generation import for_generation
    from torch2ir.generation import convert_for_generation

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2)).eval()
    tq.quantize_(model, CONFIGS[config]())
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(0))
    rebuilt = for_generation(ir2torch.convert(convert_for_generation(model, max_length=32), model.state_dict()),
                             model.config)
    want = model.generate(ids, max_new_tokens=10, do_sample=False)
    assert want.shape == (1, 18)
    assert torch.equal(rebuilt.generate(ids, max_new_tokens=10, do_sample=False), want)
