"""Real architectures from transformers, built from small configs with random (seeded) weights.

Nothing is downloaded: every model is created from a config object. ``transformers`` is imported lazily inside
the builders, so importing this module (or :func:`tests.models.zoo.by_name`) stays cheap. Configs use
``attn_implementation="eager"`` and ``use_cache=False`` where they have them (cache objects are not exportable).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch import nn

from tests.models.case import Case, Inputs, gen, randn, seeded

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB = 100
SEQ = 8

# Config fields shared by the text models.
_TEXT = {"vocab_size": VOCAB, "attn_implementation": "eager"}


def _bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        use_cache=False,
        **_TEXT,
    )
    return BertModel(config)


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        n_layer=2,
        n_embd=64,
        n_head=2,
        n_positions=64,
        use_cache=False,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=0,
        **_TEXT,
    )
    return GPT2LMHeadModel(config)


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        max_position_embeddings=64,
        use_cache=False,
        **_TEXT,
    )
    return LlamaForCausalLM(config)


def _vit() -> nn.Module:
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(
        image_size=32,
        patch_size=8,
        num_channels=3,
        num_hidden_layers=2,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=128,
        attn_implementation="eager",
    )
    return ViTModel(config)


def _resnet() -> nn.Module:
    from transformers import ResNetConfig, ResNetModel

    config = ResNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], layer_type="basic")
    return ResNetModel(config)


def _mobilenet_v2() -> nn.Module:
    from transformers import MobileNetV2Config, MobileNetV2Model

    config = MobileNetV2Config(image_size=32, depth_multiplier=0.35)
    return MobileNetV2Model(config)


def _convnext() -> nn.Module:
    from transformers import ConvNextConfig, ConvNextModel

    config = ConvNextConfig(image_size=32, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)
    return ConvNextModel(config)


def _t5_encoder() -> nn.Module:
    from transformers import T5Config, T5EncoderModel

    config = T5Config(d_model=64, d_ff=128, num_layers=2, num_heads=2, d_kv=32, use_cache=False, **_TEXT)
    return T5EncoderModel(config)


WHISPER_POSITIONS = 16  # input_features are (batch, 80, 2 * WHISPER_POSITIONS)


def _whisper_encoder() -> nn.Module:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    config = WhisperConfig(
        d_model=64,
        encoder_layers=2,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
        num_mel_bins=80,
        max_source_positions=WHISPER_POSITIONS,
        max_target_positions=16,
        use_cache=False,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        begin_suppress_tokens=None,
        **_TEXT,
    )
    return WhisperEncoder(config)


def _text_inputs() -> Inputs:
    """Token ids of shape (2, SEQ) and an attention mask with the second row padded at the end."""
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=gen())
    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[1, SEQ - 2 :] = 0
    return (ids,), {"attention_mask": mask}


def _image_inputs() -> Inputs:
    return (randn(gen(), 1, 3, 32, 32),), {}


def _audio_inputs() -> Inputs:
    return (randn(gen(), 1, 80, 2 * WHISPER_POSITIONS),), {}


def _case(name: str, factory: Callable[[], nn.Module], inputs: Callable[[], Inputs], *tags: str) -> Case:
    """A transformers case: seeded eval-mode builder, tagged ``transformers`` and ``model_output``."""
    return Case(name, seeded(factory), inputs, frozenset({"transformers", "model_output", *tags}))


REAL: list[Case] = [
    _case("bert", _bert, _text_inputs, "dropout", "attention", "int_input", "kwargs", "buffers", "non_persistent"),
    _case("gpt2", _gpt2, _text_inputs, "dropout", "attention", "int_input", "kwargs", "tied"),
    _case("llama", _llama, _text_inputs, "attention", "int_input", "kwargs", "buffers", "non_persistent", "no_grad"),
    _case("vit", _vit, _image_inputs, "dropout", "attention"),
    _case("resnet", _resnet, _image_inputs, "conv", "batchnorm", "buffers", "residual"),
    _case("mobilenet_v2", _mobilenet_v2, _image_inputs, "conv", "batchnorm", "buffers", "residual"),
    _case("convnext", _convnext, _image_inputs, "conv", "residual"),
    _case("t5_encoder", _t5_encoder, _text_inputs, "tied", "dropout", "attention", "int_input", "kwargs"),
    _case("whisper_encoder", _whisper_encoder, _audio_inputs, "conv", "attention"),
]
