"""Decoder-only text architectures of the corpus, from transformers configs."""

from __future__ import annotations

from torch import nn

from tests.real.configs import _LLAMALIKE, _TEXT, VOCAB

# ------------------------------------------------------------------------------------------ decoders


def _opt() -> nn.Module:
    from transformers import OPTConfig, OPTForCausalLM

    config = OPTConfig(num_hidden_layers=2, hidden_size=64, ffn_dim=128, num_attention_heads=2,
                       max_position_embeddings=64, word_embed_proj_dim=64, dropout=0.1, attention_dropout=0.1,
                       use_cache=False, pad_token_id=1, bos_token_id=0, eos_token_id=2, **_TEXT)
    return OPTForCausalLM(config)


def _gpt_neo() -> nn.Module:
    from transformers import GPTNeoConfig, GPTNeoModel

    config = GPTNeoConfig(num_layers=2, hidden_size=64, num_heads=2, attention_types=[[["global", "local"], 1]],
                          window_size=4, max_position_embeddings=64, intermediate_size=128, embed_dropout=0.1,
                          attention_dropout=0.1, resid_dropout=0.1, use_cache=False, bos_token_id=0,
                          eos_token_id=0, **_TEXT)
    return GPTNeoModel(config)


def _gptj() -> nn.Module:
    from transformers import GPTJConfig, GPTJModel

    config = GPTJConfig(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, n_positions=64, n_inner=128,
                        resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, use_cache=False, bos_token_id=0,
                        eos_token_id=0, **_TEXT)
    return GPTJModel(config)


def _bloom() -> nn.Module:
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(n_layer=2, hidden_size=64, n_head=4, hidden_dropout=0.1, attention_dropout=0.1,
                         use_cache=False, bos_token_id=0, eos_token_id=0, pad_token_id=0, **_TEXT)
    return BloomForCausalLM(config)


def _falcon() -> nn.Module:
    from transformers import FalconConfig, FalconModel

    config = FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, hidden_dropout=0.1,
                          attention_dropout=0.1, max_position_embeddings=64, use_cache=False,
                          bos_token_id=0, eos_token_id=0, **_TEXT)
    return FalconModel(config)


def _falcon_alibi() -> nn.Module:
    from transformers import FalconConfig, FalconModel

    config = FalconConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, alibi=True,
                          new_decoder_architecture=False, multi_query=True, hidden_dropout=0.1,
                          attention_dropout=0.1, use_cache=False, bos_token_id=0, eos_token_id=0, **_TEXT)
    return FalconModel(config)


def _mistral() -> nn.Module:
    from transformers import MistralConfig, MistralForCausalLM

    return MistralForCausalLM(MistralConfig(**_LLAMALIKE, sliding_window=4, **_TEXT))


def _qwen2() -> nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    return Qwen2ForCausalLM(Qwen2Config(**_LLAMALIKE, **_TEXT))


def _qwen3() -> nn.Module:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    return Qwen3ForCausalLM(Qwen3Config(**_LLAMALIKE, head_dim=16, **_TEXT))


def _gemma() -> nn.Module:
    from transformers import GemmaConfig, GemmaForCausalLM

    return GemmaForCausalLM(GemmaConfig(**_LLAMALIKE, head_dim=16, pad_token_id=0, bos_token_id=1,
                                        eos_token_id=2, **_TEXT))


def _gemma2() -> nn.Module:
    from transformers import Gemma2Config, Gemma2ForCausalLM

    return Gemma2ForCausalLM(Gemma2Config(**_LLAMALIKE, head_dim=16, sliding_window=4, pad_token_id=0,
                                          bos_token_id=1, eos_token_id=2, **_TEXT))


def _phi() -> nn.Module:
    from transformers import PhiConfig, PhiForCausalLM

    config = PhiConfig(**_LLAMALIKE, resid_pdrop=0.1, embd_pdrop=0.1, partial_rotary_factor=0.5,
                       bos_token_id=0, eos_token_id=0, **_TEXT)
    return PhiForCausalLM(config)


def _phi3() -> nn.Module:
    from transformers import Phi3Config, Phi3ForCausalLM

    config = Phi3Config(**_LLAMALIKE, resid_pdrop=0.1, embd_pdrop=0.1, pad_token_id=0, bos_token_id=1,
                        eos_token_id=2, **_TEXT)
    return Phi3ForCausalLM(config)


def _stablelm() -> nn.Module:
    from transformers import StableLmConfig, StableLmModel

    config = StableLmConfig(**_LLAMALIKE, hidden_dropout=0.1, partial_rotary_factor=0.25, bos_token_id=0,
                            eos_token_id=0, **_TEXT)
    return StableLmModel(config)


def _gpt_bigcode() -> nn.Module:
    from transformers import GPTBigCodeConfig, GPTBigCodeForCausalLM

    config = GPTBigCodeConfig(n_layer=2, n_embd=64, n_head=2, n_positions=64, n_inner=128, multi_query=True,
                              resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, use_cache=False,
                              bos_token_id=0, eos_token_id=0, **_TEXT)
    return GPTBigCodeForCausalLM(config)


def _codegen() -> nn.Module:
    from transformers import CodeGenConfig, CodeGenModel

    config = CodeGenConfig(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, n_positions=64, n_ctx=64, n_inner=128,
                           resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, use_cache=False, bos_token_id=0,
                           eos_token_id=0, **_TEXT)
    return CodeGenModel(config)


def _gpt_neox() -> nn.Module:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    config = GPTNeoXConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                           max_position_embeddings=64, rotary_pct=0.25, attention_dropout=0.1, hidden_dropout=0.1,
                           use_cache=False, bos_token_id=0, eos_token_id=0, **_TEXT)
    return GPTNeoXForCausalLM(config)


def _olmo() -> nn.Module:
    from transformers import OlmoConfig, OlmoForCausalLM

    return OlmoForCausalLM(OlmoConfig(**_LLAMALIKE, pad_token_id=0, bos_token_id=1, eos_token_id=2, **_TEXT))


def _olmo2() -> nn.Module:
    from transformers import Olmo2Config, Olmo2ForCausalLM

    return Olmo2ForCausalLM(Olmo2Config(**_LLAMALIKE, pad_token_id=0, bos_token_id=1, eos_token_id=2, **_TEXT))


def _starcoder2() -> nn.Module:
    from transformers import Starcoder2Config, Starcoder2ForCausalLM

    return Starcoder2ForCausalLM(Starcoder2Config(**_LLAMALIKE, residual_dropout=0.1, embedding_dropout=0.1,
                                                  bos_token_id=0, eos_token_id=0, **_TEXT))


def _granite() -> nn.Module:
    from transformers import GraniteConfig, GraniteForCausalLM

    return GraniteForCausalLM(GraniteConfig(**_LLAMALIKE, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                            **_TEXT))


def _cohere() -> nn.Module:
    from transformers import CohereConfig, CohereForCausalLM

    return CohereForCausalLM(CohereConfig(**_LLAMALIKE, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                          **_TEXT))


def _mixtral() -> nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    return MixtralForCausalLM(MixtralConfig(**_LLAMALIKE, num_local_experts=4, num_experts_per_tok=2, **_TEXT))


def _mixtral_batched() -> nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(**_LLAMALIKE, num_local_experts=4, num_experts_per_tok=2, **_TEXT)
    config._experts_implementation = "batched_mm"
    return MixtralForCausalLM(config)


def _mixtral_eager() -> nn.Module:
    from transformers import MixtralConfig, MixtralForCausalLM

    config = MixtralConfig(**_LLAMALIKE, num_local_experts=4, num_experts_per_tok=2, **_TEXT)
    config._experts_implementation = "eager"
    return MixtralForCausalLM(config)


def _xglm() -> nn.Module:
    from transformers import XGLMConfig, XGLMModel

    config = XGLMConfig(num_layers=2, d_model=64, attention_heads=2, ffn_dim=128, max_position_embeddings=64,
                        dropout=0.1, attention_dropout=0.1, activation_dropout=0.1, use_cache=False,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2, **_TEXT)
    return XGLMModel(config)


def _biogpt() -> nn.Module:
    from transformers import BioGptConfig, BioGptForCausalLM

    config = BioGptConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                          max_position_embeddings=64, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                          layerdrop=0.0, use_cache=False, pad_token_id=1, bos_token_id=0, eos_token_id=2, **_TEXT)
    return BioGptForCausalLM(config)


def _mpt() -> nn.Module:
    from transformers import MptConfig, MptModel

    config = MptConfig(n_layers=2, d_model=64, n_heads=4, expansion_ratio=2, max_seq_len=64, resid_pdrop=0.1,
                       emb_pdrop=0.1, use_cache=False, **_TEXT)  # attn_config.attn_pdrop is typed int in 5.23
    return MptModel(config)


def _mamba() -> nn.Module:
    from transformers import MambaConfig, MambaModel

    config = MambaConfig(num_hidden_layers=2, hidden_size=32, state_size=8, expand=2, conv_kernel=4,
                         use_cache=False, use_mambapy=False, vocab_size=VOCAB, pad_token_id=0, bos_token_id=0,
                         eos_token_id=0)
    return MambaModel(config)
