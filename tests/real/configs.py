"""Shared sizes, config fragments and example inputs of the real-architecture corpus (see corpus.py).

Every model is built from a small config with random weights, nothing is downloaded. Dropout probabilities
are > 0 so that the train-mode checks exercise dropout.
"""

from __future__ import annotations

import os

import torch

from tests.models.case import Inputs, gen, randn
from tests.models.real import WHISPER_POSITIONS

os.environ.setdefault("HF_HUB_OFFLINE", "1")

VOCAB = 100
SEQ = 8
DEC_SEQ = 6
IMG = 32

# Config fields shared by the text models.
_TEXT = {"vocab_size": VOCAB, "attn_implementation": "eager"}
# BERT-style encoder sizes (field names shared by BERT, RoBERTa, ELECTRA, DeBERTa, MPNet, ...).
_BERTLIKE = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
}
# Llama-style decoder sizes (Mistral, Qwen2, Qwen3, Gemma, OLMo, StableLM, Phi, ...).
_LLAMALIKE = {
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,
    "attention_dropout": 0.1,
    "use_cache": False,
}
# Stochastic depth (DropPath) is a Python branch on self.training (torch.rand + floor): the IR follows the eval
# trace, so a train-mode rebuild never drops paths. 0 here; the *_droppath variants show the limitation.
DROP_PATH = 0.0
# ViT-style vision encoder sizes (DeiT, BEiT, Data2VecVision, DINOv2, YOLOS, ...).
_VITLIKE = {
    "image_size": IMG,
    "patch_size": 8,
    "num_channels": 3,
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "attn_implementation": "eager",
}
# BART-style encoder-decoder sizes (BART, mBART, Marian, Pegasus, ...).
_BARTLIKE = {
    "d_model": 64,
    "encoder_layers": 2,
    "decoder_layers": 2,
    "encoder_attention_heads": 2,
    "decoder_attention_heads": 2,
    "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128,
    "max_position_embeddings": 64,
    "dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.1,
    "use_cache": False,
    "pad_token_id": 1,
    "bos_token_id": 0,
    "eos_token_id": 2,
    "decoder_start_token_id": 2,
    **_TEXT,
}
# wav2vec2-style audio sizes: 1600 samples -> conv strides 5*4*2 = 40 -> 39 frames.
_W2V = {
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "conv_dim": (16, 16, 16),
    "conv_stride": (5, 4, 2),
    "conv_kernel": (10, 8, 4),
    "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 2,
    "hidden_dropout": 0.1,
    "attention_dropout": 0.1,
    "activation_dropout": 0.1,
    "feat_proj_dropout": 0.1,
    "layerdrop": 0.0,  # layer drop is a Python branch on self.training + torch.rand: not in the eval trace
    "apply_spec_augment": False,  # SpecAugment draws its masks with numpy in train mode
    "vocab_size": 32,
    "attn_implementation": "eager",
}



# ------------------------------------------------------------------------------------------- inputs


def _text_inputs() -> Inputs:
    """Token ids of shape (2, SEQ) and an attention mask with the second row padded at the end."""
    ids = torch.randint(3, VOCAB, (2, SEQ), generator=gen())
    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[1, SEQ - 2 :] = 0
    return (ids,), {"attention_mask": mask}


def _ids_inputs() -> Inputs:
    """Token ids only (models without an attention mask: FNet, Mamba)."""
    return (torch.randint(3, VOCAB, (2, SEQ), generator=gen()),), {}


def _clip_text_inputs() -> Inputs:
    """Token ids ending with the EOS token (2), used by CLIP's pooler, and a padding mask."""
    (ids,), kwargs = _text_inputs()
    ids[0, -1] = 2
    ids[1, SEQ - 3] = 2
    return (ids,), kwargs


def _seq2seq_inputs() -> Inputs:
    """Encoder ids + mask (2, SEQ) and decoder ids (2, DEC_SEQ)."""
    g = gen()
    ids = torch.randint(3, VOCAB, (2, SEQ), generator=g)
    mask = torch.ones(2, SEQ, dtype=torch.long)
    mask[1, SEQ - 2 :] = 0
    dec = torch.randint(3, VOCAB, (2, DEC_SEQ), generator=g)
    return (ids,), {"attention_mask": mask, "decoder_input_ids": dec}


def _whisper_inputs() -> Inputs:
    g = gen()
    feats = randn(g, 1, 80, 2 * WHISPER_POSITIONS)
    return (feats,), {"decoder_input_ids": torch.randint(3, VOCAB, (1, DEC_SEQ), generator=g)}


def _image_inputs() -> Inputs:
    return (randn(gen(), 1, 3, IMG, IMG),), {}


def _image2_inputs() -> Inputs:
    """A batch of 2: EfficientNet / MobileNetV1 end at 1x1, train-mode BatchNorm needs > 1 value per channel."""
    return (randn(gen(), 2, 3, IMG, IMG),), {}


def _image64_inputs() -> Inputs:
    return (randn(gen(), 1, 3, 64, 64),), {}


def _image64x2_inputs() -> Inputs:
    """A batch of 2 64px images (LeViT's last stage is 1x1: train-mode BatchNorm needs batch > 1)."""
    return (randn(gen(), 2, 3, 64, 64),), {}


def _vit_mae_inputs() -> Inputs:
    """ViTMAE masks patches at random: pass the noise explicitly so both models mask the same ones."""
    g = gen()
    return (randn(g, 1, 3, IMG, IMG),), {"noise": torch.rand(1, (IMG // 8) ** 2, generator=g)}


def _clip_inputs() -> Inputs:
    (ids,), kwargs = _clip_text_inputs()
    return (ids,), {**kwargs, "pixel_values": randn(gen(), 1, 3, IMG, IMG)}


def _llava_inputs() -> Inputs:
    """Four image tokens (one per 8x8 patch of a 16x16 image) before the text, and the image."""
    ids = torch.cat([torch.full((1, 4), VOCAB - 1), torch.randint(3, VOCAB - 1, (1, SEQ - 4), generator=gen())], 1)
    return (), {"input_ids": ids, "pixel_values": randn(gen(), 1, 3, 16, 16), "use_cache": False}


def _wave_inputs() -> Inputs:
    """1600 samples of raw audio."""
    return (randn(gen(), 1, 1600),), {}


def _ast_inputs() -> Inputs:
    """A (batch, max_length, num_mel_bins) spectrogram."""
    return (randn(gen(), 1, 64, 32),), {}


