"""Models the benchmarks run, built from ``transformers`` configs with random (seeded) weights.

Nothing is downloaded (``HF_HUB_OFFLINE=1``); every model comes from a config object. The small
configs follow the test zoo's (``tests/models/real.py``, not imported: benchmarks stay independent
of the tests); the big ones have the dimensions of a real checkpoint and are built on ``meta``
unless a scenario needs their values.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

os.environ.setdefault("HF_HUB_OFFLINE", "1")

Inputs = tuple[tuple[Any, ...], dict[str, Any]]

VOCAB = 100  # vocabulary of the small text models
SEQ = 32  # sequence length of the text inputs
IMAGE = 32  # image side of the vision inputs

#: Config fields every small text model shares (eager attention: sdpa dispatch differs between modes).
_TEXT: dict[str, Any] = {"vocab_size": VOCAB, "attn_implementation": "eager", "use_cache": False}


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark model: how to build it and its example inputs.

    Attributes:
        name: short name used on the command line and in the tables.
        build: ``build(device) -> model`` in eval mode, created under ``torch.manual_seed(0)``.
        inputs: ``inputs(batch, device) -> (args, kwargs)``.
        kind: ``"text"`` or ``"image"``.
        allow: operators of other namespaces the model calls (the opt-in passed to convert and rebuild).
    """

    name: str
    build: Callable[[str | None], nn.Module]
    inputs: Callable[[int, str | None], Inputs]
    kind: str
    allow: tuple[str, ...] = ()


def _seeded(factory: Callable[[], nn.Module], device: str | None) -> nn.Module:
    """``factory()`` under ``torch.manual_seed(0)`` (on ``device``), in eval mode."""
    torch.manual_seed(0)
    if device is None:
        return factory().eval()
    with torch.device(device):
        return factory().eval()


def text_inputs(batch: int, device: str | None = None, *, seq: int = SEQ, vocab: int = VOCAB,
                mask: bool = True) -> Inputs:
    """Token ids ``(batch, seq)`` and, with ``mask``, an attention mask whose last row ends in padding."""
    if device == "meta":
        ids = torch.zeros((batch, seq), dtype=torch.long, device="meta")
        return (ids,), ({"attention_mask": torch.ones((batch, seq), dtype=torch.long, device="meta")} if mask else {})
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    if not mask:
        return (ids,), {}
    attention = torch.ones(batch, seq, dtype=torch.long)
    if batch > 1:
        attention[-1, seq - 2 :] = 0
    return (ids,), {"attention_mask": attention}


def image_inputs(batch: int, device: str | None = None) -> Inputs:
    """Random images ``(batch, 3, IMAGE, IMAGE)``."""
    if device == "meta":
        return (torch.zeros((batch, 3, IMAGE, IMAGE), device="meta"),), {}
    gen = torch.Generator().manual_seed(0)
    return (torch.randn(batch, 3, IMAGE, IMAGE, generator=gen),), {}


def _bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                                max_position_embeddings=64, **_TEXT))


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=64, tie_word_embeddings=True,
                                      bos_token_id=0, eos_token_id=0, **_TEXT))


def _llama() -> nn.Module:
    return llama(layers=2, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=VOCAB, positions=64)


def _resnet() -> nn.Module:
    from transformers import ResNetConfig, ResNetModel

    return ResNetModel(ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic"))


def _mobilenet_v2() -> nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2Model

    return MobileNetV2Model(MobileNetV2Config(image_size=IMAGE, depth_multiplier=0.35))


def llama(*, layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int, vocab: int,
          positions: int) -> nn.Module:
    """A ``LlamaForCausalLM`` of the given dimensions (built on the current default device)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    return LlamaForCausalLM(LlamaConfig(
        num_hidden_layers=layers, hidden_size=hidden, intermediate_size=intermediate, num_attention_heads=heads,
        num_key_value_heads=kv_heads, vocab_size=vocab, max_position_embeddings=positions, use_cache=False,
        attn_implementation="eager"))


def _moe(config_name: str, model_name: str, **experts: int) -> Callable[[], nn.Module]:
    """A small mixture-of-experts decoder with its default experts kernel (``transformers::grouped_mm_fallback``, a
    known operator: no ``allow=``)."""

    def build() -> nn.Module:
        import transformers

        config = getattr(transformers, config_name)(
            num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=64, **experts, **_TEXT)
        return getattr(transformers, model_name)(config)

    return build


def _small(name: str, factory: Callable[[], nn.Module], kind: str, allow: tuple[str, ...] = ()) -> ModelSpec:
    inputs = text_inputs if kind == "text" else image_inputs
    return ModelSpec(name, lambda device=None: _seeded(factory, device), inputs, kind, allow)


#: The small-config models of the convert / forward / ONNX scenarios, by name.
SMALL: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _small("bert", _bert, "text"),
        _small("gpt2", _gpt2, "text"),
        _small("llama", _llama, "text"),
        _small("resnet", _resnet, "image"),
        _small("mobilenet_v2", _mobilenet_v2, "image"),
        _small("mixtral", _moe("MixtralConfig", "MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2),
               "text"),
        _small("qwen2_moe", _moe("Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=32, shared_expert_intermediate_size=32), "text"),
        _small("qwen3_moe", _moe("Qwen3MoeConfig", "Qwen3MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=32), "text"),
        _small("olmoe", _moe("OlmoeConfig", "OlmoeForCausalLM", num_experts=4, num_experts_per_tok=2), "text"),
    )
}

#: Llama-2-7B dimensions (32 layers; 6.7 B parameters, 27 GB in float32 — only ever built on ``meta``).
LLAMA_7B = {"hidden": 4096, "intermediate": 11008, "heads": 32, "kv_heads": 32, "vocab": 32000, "positions": 4096}
LLAMA_7B_LAYERS = 32
SCALE_SEQ = 16  # sequence length of the weight-free scale scenario


def llama_7b(layers: int = LLAMA_7B_LAYERS, device: str | None = "meta") -> nn.Module:
    """Llama with Llama-2-7B dimensions and ``layers`` decoder layers, on ``device`` (default ``meta``)."""
    return _seeded(lambda: llama(layers=layers, **LLAMA_7B), device)


#: Llama-3-70B dimensions (80 layers; 70.6 B parameters, 282 GB in float32 — only ever built on ``meta``).
LLAMA_70B = {"hidden": 8192, "intermediate": 28672, "heads": 64, "kv_heads": 8, "vocab": 128256, "positions": 8192}
LLAMA_70B_LAYERS = 80


def llama_70b(layers: int = LLAMA_70B_LAYERS, device: str | None = "meta") -> nn.Module:
    """Llama with Llama-3-70B dimensions and ``layers`` decoder layers, on ``device`` (default ``meta``)."""
    return _seeded(lambda: llama(layers=layers, **LLAMA_70B), device)


#: The weight-free scale models by name: ``(builder, label)``.
SCALE_MODELS = {"7b": (llama_7b, "Llama-2-7B dims"), "70b": (llama_70b, "Llama-3-70B dims")}


def llama_sweep(layers: int, device: str | None = "meta") -> nn.Module:
    """The small Llama (hidden 64) with ``layers`` decoder layers: the layer-count sweep's model."""
    return _seeded(lambda: llama(layers=layers, hidden=64, intermediate=128, heads=4, kv_heads=2, vocab=VOCAB,
                                 positions=64), device)


#: GPT-2 small dimensions (124 M parameters with its tied head).
GPT2_SMALL = {"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257, "n_positions": 1024}


def gpt2_small_config(layers: int = GPT2_SMALL["n_layer"]) -> Any:
    """The ``GPT2Config`` of GPT-2 small (``layers`` blocks), eager attention, no cache."""
    from transformers import GPT2Config

    dims = {**GPT2_SMALL, "n_layer": layers}
    return GPT2Config(**dims, tie_word_embeddings=True, use_cache=False, attn_implementation="eager")


def gpt2_small(config: Any, device: str | None = None) -> nn.Module:
    """``GPT2LMHeadModel(config)`` with random seeded weights (on ``device``), in eval mode."""
    from transformers import GPT2LMHeadModel

    return _seeded(lambda: GPT2LMHeadModel(config), device)


def parameter_count(model: nn.Module) -> int:
    """Number of distinct parameter elements (tied parameters counted once)."""
    return sum(p.numel() for p in model.parameters())
