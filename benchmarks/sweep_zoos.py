"""Model builders of the registry sweep (:mod:`benchmarks.sweep`) beyond torchvision and timm: diffusers' backbones
at tiny sizes, and every ``transformers`` model type built from its default configuration shrunk.

A transformers model type's default configuration is shrunk generically: every integer field that sizes the
model (hidden size, layers, heads, feed-forward width, vocabulary, experts, image size...) present on the
configuration or on its text / vision / audio sub-configurations is set to a small value. A model whose shrunk
configuration does not build or does not run in eager mode is reported as such (``eager failed``): the sweep
counts what converts among what runs, and says which types it could not build.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

#: Integer configuration fields set to small values (when the configuration has them).
SMALL: dict[str, int] = {
    "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
    "intermediate_size": 64, "vocab_size": 128, "max_position_embeddings": 64, "d_model": 32,
    "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
    "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "num_layers": 2, "d_ff": 64, "num_heads": 2, "d_kv": 16,
    "n_embd": 32, "n_layer": 2, "n_head": 2, "n_inner": 64, "embed_dim": 32, "num_experts": 4,
    "num_local_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "head_dim": 16,
    "image_size": 32, "patch_size": 8, "projection_dim": 32, "text_embed_dim": 32, "vision_embed_dim": 32,
    "num_decoder_layers": 2, "encoder_hidden_size": 32, "decoder_hidden_size": 32, "ffn_dim": 64,
    "shared_expert_intermediate_size": 32, "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8, "v_head_dim": 16, "n_routed_experts": 4, "first_k_dense_replace": 1,
}
#: Sub-configurations shrunk the same way.
SUBCONFIGS = ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config")
SEQUENCE = 8

def diffusers_blocks() -> dict[str, Callable[[], tuple[Any, tuple, dict]]]:
    """Tiny configurations of diffusers' backbones: ``name -> () -> (model, args, kwargs)``."""
    import torch

    from tests.ecosystems.load import diffusers

    d = diffusers()

    def unet2d():
        m = d.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(8, 16),
                          layers_per_block=1, norm_num_groups=4, attention_head_dim=4,
                          down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                          up_block_types=("AttnUpBlock2D", "UpBlock2D"))
        return m, (torch.randn(1, 3, 16, 16), torch.tensor([3])), {"return_dict": False}

    def unet2d_condition():
        m = d.UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, block_out_channels=(8, 16),
                                   layers_per_block=1, norm_num_groups=4, cross_attention_dim=8,
                                   attention_head_dim=4,
                                   down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                   up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
        return m, (torch.randn(1, 4, 16, 16), torch.tensor([3]), torch.randn(1, 5, 8)), {"return_dict": False}

    def unet3d_condition():
        m = d.UNet3DConditionModel(sample_size=8, in_channels=4, out_channels=4, block_out_channels=(8, 16),
                                   layers_per_block=1, norm_num_groups=4, cross_attention_dim=8,
                                   attention_head_dim=4,
                                   down_block_types=("CrossAttnDownBlock3D", "DownBlock3D"),
                                   up_block_types=("UpBlock3D", "CrossAttnUpBlock3D"))
        x = torch.randn(1, 4, 2, 8, 8)
        return m, (x, torch.tensor([3]), torch.randn(1, 5, 8)), {"return_dict": False}

    def autoencoder_kl():
        m = d.AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=1,
                            latent_channels=4, norm_num_groups=4,
                            down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                            up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"))
        return m, (torch.randn(1, 3, 16, 16),), {"sample_posterior": False, "return_dict": False}

    def dit():
        m = d.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=2,
                                    sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=4)
        return m, (torch.randn(1, 4, 8, 8),), {"timestep": torch.tensor([3]), "class_labels": torch.tensor([1]),
                                               "return_dict": False}

    def transformer2d():
        m = d.Transformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=16, num_layers=1,
                                 norm_num_groups=4, cross_attention_dim=8)
        return m, (torch.randn(1, 16, 8, 8),), {"encoder_hidden_states": torch.randn(1, 5, 8),
                                                "return_dict": False}

    def sd3():
        m = d.SD3Transformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8,
                                    num_attention_heads=2, joint_attention_dim=16, caption_projection_dim=16,
                                    pooled_projection_dim=8, out_channels=4, pos_embed_max_size=16)
        return m, (torch.randn(1, 4, 8, 8),), {"encoder_hidden_states": torch.randn(1, 5, 16),
                                               "pooled_projections": torch.randn(1, 8),
                                               "timestep": torch.tensor([3]), "return_dict": False}

    def flux():
        m = d.FluxTransformer2DModel(patch_size=1, in_channels=16, num_layers=1, num_single_layers=1,
                                     attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                     pooled_projection_dim=8, axes_dims_rope=(2, 2, 4))
        return m, (torch.randn(1, 16, 16),), {"encoder_hidden_states": torch.randn(1, 5, 16),
                                              "pooled_projections": torch.randn(1, 8),
                                              "timestep": torch.tensor([0.5]), "img_ids": torch.zeros(16, 3),
                                              "txt_ids": torch.zeros(5, 3), "return_dict": False}

    return {f.__name__: f for f in (unet2d, unet2d_condition, unet3d_condition, autoencoder_kl, dit,
                                      transformer2d, sd3, flux)}


def transformers_names() -> list[str]:
    """Every model type transformers maps to a base model class (``AutoModel``), sorted."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


def _shrink(config: Any, depth: int = 0) -> None:
    for field, value in SMALL.items():
        if isinstance(getattr(config, field, None), int) and not isinstance(getattr(config, field), bool):
            setattr(config, field, value)
    if hasattr(config, "use_cache"):
        config.use_cache = False
    vocab = getattr(config, "vocab_size", None)
    for field in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
                  "cls_token_id", "mask_token_id"):
        token = getattr(config, field, None)
        if isinstance(vocab, int) and isinstance(token, int) and token >= vocab:
            setattr(config, field, 0)
    if depth < 2:
        for field in SUBCONFIGS:
            sub = getattr(config, field, None)
            if sub is not None and hasattr(sub, "to_dict"):
                _shrink(sub, depth + 1)


def _config(model_type: str) -> Any:
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING[model_type]()
    _shrink(config)
    return config


def transformers_params(model_type: str) -> int | None:
    """Parameters of the shrunk model, built on ``meta`` (``None`` when it does not build)."""
    import torch
    from transformers import AutoModel

    try:
        with torch.device("meta"):
            model = AutoModel.from_config(_config(model_type))
    except Exception:  # noqa: BLE001 - the build proper reports it
        return None
    return sum(p.numel() for p in model.parameters())


def transformers_model(model_type: str) -> tuple[Any, tuple, dict]:
    """The shrunk base model of ``model_type`` (random weights) and keyword inputs for its main input."""
    import torch
    from transformers import AutoModel

    config = _config(model_type)
    model = AutoModel.from_config(config).eval()
    main = getattr(model, "main_input_name", "input_ids")
    params = inspect.signature(model.forward).parameters
    vision = getattr(config, "vision_config", None) or config
    kwargs: dict[str, Any] = {}
    if main == "input_ids" or ("input_ids" in params and main not in params):
        vocab = getattr(getattr(config, "text_config", None) or config, "vocab_size", 128) or 128
        kwargs["input_ids"] = torch.randint(0, min(vocab, 128), (1, SEQUENCE))
    if main == "pixel_values" or ("pixel_values" in params and ("input_ids" not in kwargs or
                                                               getattr(config, "vision_config", None) is not None)):
        side = getattr(vision, "image_size", 32)
        side = side if isinstance(side, int) else 32
        kwargs["pixel_values"] = torch.randn(1, getattr(vision, "num_channels", 3), side, side)
    if main == "input_values":
        kwargs["input_values"] = torch.randn(1, 4000)
    if main == "input_features":
        bins = getattr(config, "num_mel_bins", 80)
        kwargs["input_features"] = torch.randn(1, bins, 2 * getattr(config, "max_source_positions", 32))
    if ("decoder_input_ids" in params and "input_ids" in kwargs) or (main == "input_features" and \
            "decoder_input_ids" in params):
        kwargs["decoder_input_ids"] = torch.randint(0, 100, (1, SEQUENCE))
    if not kwargs:
        raise ValueError(f"no input made for main input {main!r}")
    return model, (), kwargs


__all__ = ["diffusers_blocks", "transformers_model", "transformers_names", "transformers_params"]
