"""Mixture-of-experts decoders with their default experts kernel (``transformers::grouped_mm_fallback``).

That operator is a known operator (:mod:`common.known_ops`): they convert, rebuild and lower exactly with no
``allow=``.
"""

from __future__ import annotations

from torch import nn

from tests.real.decoders import _LLAMALIKE, _TEXT


def _build(config_name: str, model_name: str, **moe: int) -> nn.Module:
    import transformers

    config = getattr(transformers, config_name)(**_LLAMALIKE, **moe, **_TEXT)
    return getattr(transformers, model_name)(config)


def qwen2_moe() -> nn.Module:
    return _build("Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=32, shared_expert_intermediate_size=32)


def qwen3_moe() -> nn.Module:
    return _build("Qwen3MoeConfig", "Qwen3MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
                  moe_intermediate_size=32)


def olmoe() -> nn.Module:
    return _build("OlmoeConfig", "OlmoeForCausalLM", num_experts=4, num_experts_per_tok=2)


def phimoe() -> nn.Module:
    return _build("PhimoeConfig", "PhimoeForCausalLM", num_local_experts=4, num_experts_per_tok=2)


#: name -> (model class, builder, why train mode differs: "" when it does not)
MOE = {
    "qwen2_moe": ("Qwen2MoeForCausalLM", qwen2_moe, ""),
    "qwen3_moe": ("Qwen3MoeForCausalLM", qwen3_moe, ""),
    "olmoe": ("OlmoeForCausalLM", olmoe, ""),
    "phimoe": ("PhimoeForCausalLM", phimoe, "TrainModeWarning: the router adds jitter noise, drawn in Python, "
               "only in train mode; eval mode is exact"),
}
