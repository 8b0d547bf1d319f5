"""More diffusers model classes for the registry sweep (:mod:`benchmarks.sweep`, ``--zoo diffusers``), each built
from a tiny configuration (after diffusers' own unit tests' configs) with the input it is called on; the eight
backbones of :func:`benchmarks.sweep_zoos.diffusers_blocks` come first."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Built = tuple[Any, tuple, dict]


def more_diffusers() -> dict[str, Callable[[], Built]]:
    """``name -> () -> (model, args, kwargs)`` for UNet variants, autoencoders, a ControlNet and DiT-style
    transformers of the installed diffusers."""
    import torch

    from tests.ecosystems.load import diffusers

    d = diffusers()
    r = torch.randn
    t = torch.tensor([3])
    no_dict = {"return_dict": False}

    def unet2d_condition_sdxl() -> Built:  # SDXL's added (text, time) conditioning, two transformer layers
        m = d.UNet2DConditionModel(sample_size=16, in_channels=4, out_channels=4, block_out_channels=(8, 16),
                                   layers_per_block=1, norm_num_groups=4, cross_attention_dim=8,
                                   attention_head_dim=(2, 4), transformer_layers_per_block=(1, 2),
                                   use_linear_projection=True, addition_embed_type="text_time",
                                   addition_time_embed_dim=4, projection_class_embeddings_input_dim=8 + 6 * 4,
                                   down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                                   up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"))
        cond = {"text_embeds": r(1, 8), "time_ids": r(1, 6)}
        return m, (r(1, 4, 16, 16), t, r(1, 5, 8)), {"added_cond_kwargs": cond, **no_dict}

    def unet2d_condition_simple() -> Built:  # DeepFloyd IF's simple cross attention and resnet up/down sampling
        m = d.UNet2DConditionModel(sample_size=16, in_channels=3, out_channels=6, block_out_channels=(8, 16),
                                   layers_per_block=1, norm_num_groups=4, cross_attention_dim=8,
                                   attention_head_dim=4, resnet_time_scale_shift="scale_shift",
                                   encoder_hid_dim=12, mid_block_type="UNetMidBlock2DSimpleCrossAttn",
                                   down_block_types=("ResnetDownsampleBlock2D", "SimpleCrossAttnDownBlock2D"),
                                   up_block_types=("SimpleCrossAttnUpBlock2D", "ResnetUpsampleBlock2D"))
        return m, (r(1, 3, 16, 16), t, r(1, 5, 12)), no_dict

    def unet1d() -> Built:
        m = d.UNet1DModel(block_out_channels=(8, 8, 16, 16), in_channels=14, out_channels=14,
                          time_embedding_type="positional", use_timestep_embedding=True, flip_sin_to_cos=False,
                          freq_shift=1.0, out_block_type="OutConv1DBlock", mid_block_type="MidResTemporalBlock1D",
                          down_block_types=("DownResnetBlock1D",) * 4, up_block_types=("UpResnetBlock1D",) * 3,
                          act_fn="swish", norm_num_groups=8, layers_per_block=1)
        return m, (r(1, 14, 16), t), no_dict

    def vq_model() -> Built:
        m = d.VQModel(block_out_channels=(8, 16), norm_num_groups=4, in_channels=3, out_channels=3,
                      down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                      latent_channels=3, num_vq_embeddings=16)
        return m, (r(1, 3, 16, 16),), no_dict

    def autoencoder_tiny() -> Built:
        m = d.AutoencoderTiny(in_channels=3, out_channels=3, encoder_block_out_channels=(8, 8),
                              decoder_block_out_channels=(8, 8), num_encoder_blocks=(1, 1),
                              num_decoder_blocks=(1, 1), latent_channels=4)
        return m, (r(1, 3, 16, 16),), no_dict

    def autoencoder_dc() -> Built:
        m = d.AutoencoderDC(in_channels=3, latent_channels=4, attention_head_dim=2,
                            encoder_block_types=("ResBlock", "EfficientViTBlock"),
                            decoder_block_types=("ResBlock", "EfficientViTBlock"),
                            encoder_block_out_channels=(8, 8), decoder_block_out_channels=(8, 8),
                            encoder_qkv_multiscales=((), (5,)), decoder_qkv_multiscales=((), (5,)),
                            encoder_layers_per_block=(1, 1), decoder_layers_per_block=[1, 1],
                            downsample_block_type="conv", upsample_block_type="interpolate",
                            decoder_norm_types="rms_norm", decoder_act_fns="silu", scaling_factor=0.41407)
        return m, (r(1, 3, 16, 16),), no_dict

    def controlnet() -> Built:
        m = d.ControlNetModel(in_channels=4, block_out_channels=(8, 16), layers_per_block=1,
                              norm_num_groups=4, cross_attention_dim=8, attention_head_dim=4,
                              conditioning_embedding_out_channels=(8, 8),
                              down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"))
        return m, (r(1, 4, 16, 16), t, r(1, 5, 8), r(1, 3, 32, 32)), no_dict

    def pixart() -> Built:
        m = d.PixArtTransformer2DModel(sample_size=8, num_layers=2, patch_size=2, attention_head_dim=8,
                                       num_attention_heads=2, caption_channels=16, in_channels=4,
                                       cross_attention_dim=16, out_channels=8, attention_bias=True,
                                       activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
                                       norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6)
        cond = {"resolution": None, "aspect_ratio": None}
        return m, (r(1, 4, 8, 8),), {"encoder_hidden_states": r(1, 5, 16), "timestep": t,
                                     "added_cond_kwargs": cond, **no_dict}

    def sana() -> Built:
        m = d.SanaTransformer2DModel(patch_size=1, in_channels=4, out_channels=4, num_layers=1,
                                     attention_head_dim=4, num_attention_heads=2, num_cross_attention_heads=2,
                                     cross_attention_head_dim=4, cross_attention_dim=8, caption_channels=8,
                                     sample_size=8)
        return m, (r(1, 4, 8, 8), r(1, 5, 8), t), no_dict

    def hunyuan_dit() -> Built:
        m = d.HunyuanDiT2DModel(sample_size=8, patch_size=2, in_channels=4, num_layers=2, attention_head_dim=8,
                                num_attention_heads=2, cross_attention_dim=16, cross_attention_dim_t5=16,
                                pooled_projection_dim=8, hidden_size=16, text_len=5, text_len_t5=7,
                                activation_fn="gelu-approximate")
        kwargs = {"encoder_hidden_states": r(1, 5, 16), "text_embedding_mask": torch.ones(1, 5),
                  "encoder_hidden_states_t5": r(1, 7, 16), "text_embedding_mask_t5": torch.ones(1, 7),
                  "image_meta_size": torch.tensor([[8.0, 8, 8, 8, 0, 0]]), "style": torch.zeros(1, dtype=torch.long),
                  "image_rotary_emb": _rotary_2d(8 // 2, 8 // 2, 8), **no_dict}
        return m, (r(1, 4, 8, 8), torch.tensor([3.0])), kwargs

    def cogvideox() -> Built:
        m = d.CogVideoXTransformer3DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4,
                                          out_channels=4, time_embed_dim=2, text_embed_dim=16, num_layers=1,
                                          sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
                                          temporal_compression_ratio=4, max_text_seq_length=5)
        return m, (r(1, 3, 4, 8, 8), r(1, 5, 16), t), no_dict

    def wan() -> Built:
        m = d.WanTransformer3DModel(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12,
                                    in_channels=4, out_channels=4, text_dim=16, freq_dim=256, ffn_dim=32,
                                    num_layers=2, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
                                    rope_max_seq_len=32)
        return m, (r(1, 4, 2, 8, 8), t, r(1, 5, 16)), no_dict

    def ltx_video() -> Built:
        m = d.LTXVideoTransformer3DModel(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1,
                                         num_attention_heads=2, attention_head_dim=8, cross_attention_dim=16,
                                         num_layers=1, caption_channels=16, qk_norm="rms_norm_across_heads")
        return m, (r(1, 2 * 4 * 4, 8), r(1, 5, 16), t, torch.ones(1, 5)), {"num_frames": 2, "height": 4,
                                                                            "width": 4, **no_dict}

    def aura_flow() -> Built:
        m = d.AuraFlowTransformer2DModel(sample_size=8, patch_size=2, in_channels=4, num_mmdit_layers=1,
                                         num_single_dit_layers=1, attention_head_dim=8, num_attention_heads=2,
                                         caption_projection_dim=16, joint_attention_dim=16, out_channels=4,
                                         pos_embed_max_size=32)
        return m, (r(1, 4, 8, 8),), {"encoder_hidden_states": r(1, 5, 16), "timestep": t, **no_dict}

    def lumina2() -> Built:
        m = d.Lumina2Transformer2DModel(sample_size=4, patch_size=2, in_channels=4, hidden_size=24, num_layers=2,
                                        num_refiner_layers=1, num_attention_heads=3, num_kv_heads=1,
                                        multiple_of=2, ffn_dim_multiplier=None, norm_eps=1e-5, scaling_factor=1.0,
                                        axes_dim_rope=(4, 2, 2), axes_lens=(128, 128, 128), cap_feat_dim=8)
        return m, (r(1, 4, 4, 4), t, r(1, 5, 8), torch.ones(1, 5, dtype=torch.bool)), no_dict

    def prior_transformer() -> Built:
        m = d.PriorTransformer(num_attention_heads=2, attention_head_dim=4, num_layers=2, embedding_dim=8,
                               num_embeddings=7, additional_embeddings=4)
        return m, (r(1, 8), t, r(1, 8)), {"encoder_hidden_states": r(1, 7, 8), **no_dict}

    def mochi() -> Built:
        m = d.MochiTransformer3DModel(patch_size=2, num_attention_heads=2, attention_head_dim=8, num_layers=2,
                                      pooled_projection_dim=16, in_channels=4, text_embed_dim=16,
                                      time_embed_dim=4, activation_fn="swiglu", max_sequence_length=16)
        return m, (r(1, 4, 2, 8, 8), r(1, 5, 16), t, torch.ones(1, 5, dtype=torch.bool)), no_dict

    def hunyuan_video() -> Built:
        m = d.HunyuanVideoTransformer3DModel(in_channels=4, out_channels=4, num_attention_heads=2,
                                             attention_head_dim=10, num_layers=1, num_single_layers=1,
                                             num_refiner_layers=1, patch_size=1, patch_size_t=1,
                                             guidance_embeds=True, text_embed_dim=16, pooled_projection_dim=8,
                                             rope_axes_dim=(2, 4, 4))
        return m, (r(1, 4, 1, 8, 8), t, r(1, 5, 16), torch.ones(1, 5), r(1, 8)), {
            "guidance": torch.tensor([3.0]), **no_dict}

    def latte() -> Built:
        m = d.LatteTransformer3DModel(sample_size=8, video_length=2, num_layers=1, patch_size=2, attention_head_dim=8,
                                      num_attention_heads=2, caption_channels=16, in_channels=4,
                                      cross_attention_dim=16, out_channels=8, attention_bias=True,
                                      activation_fn="gelu-approximate", num_embeds_ada_norm=1000,
                                      norm_type="ada_norm_single", norm_elementwise_affine=False, norm_eps=1e-6)
        return m, (r(1, 4, 2, 8, 8),), {"timestep": t, "encoder_hidden_states": r(1, 5, 16),
                                        "enable_temporal_attentions": True, **no_dict}

    def chroma() -> Built:
        m = d.ChromaTransformer2DModel(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1,
                                       attention_head_dim=16, num_attention_heads=2, joint_attention_dim=32,
                                       axes_dims_rope=(4, 4, 8), approximator_num_channels=8,
                                       approximator_hidden_dim=16, approximator_layers=1)
        return m, (r(1, 16, 4),), {"encoder_hidden_states": r(1, 5, 32), "timestep": torch.tensor([0.5]),
                                   "img_ids": torch.zeros(16, 3), "txt_ids": torch.zeros(5, 3), **no_dict}

    def stable_audio_dit() -> Built:
        m = d.StableAudioDiTModel(sample_size=4, in_channels=3, num_layers=2, attention_head_dim=4,
                                  num_key_value_attention_heads=2, num_attention_heads=2, out_channels=3,
                                  cross_attention_dim=4, time_proj_dim=8, global_states_input_dim=8,
                                  cross_attention_input_dim=4)
        return m, (r(1, 3, 4),), {"timestep": t, "encoder_hidden_states": r(1, 5, 4),
                                  "global_hidden_states": r(1, 1, 8), "rotary_embedding": None, **no_dict}

    def autoencoder_kl_wan() -> Built:
        m = d.AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                               temperal_downsample=[False, True, True])
        return m, (r(1, 3, 9, 16, 16),), no_dict

    def autoencoder_oobleck() -> Built:
        m = d.AutoencoderOobleck(encoder_hidden_size=12, downsampling_ratios=[2, 4], decoder_channels=12,
                                 decoder_input_channels=6, audio_channels=2, channel_multiples=[2, 4],
                                 sampling_rate=16000)
        return m, (r(1, 2, 64),), {"sample_posterior": False, **no_dict}

    def autoencoder_kl_temporal_decoder() -> Built:
        m = d.AutoencoderKLTemporalDecoder(block_out_channels=(32, 32), in_channels=3, out_channels=3,
                                           down_block_types=("DownEncoderBlock2D",) * 2, latent_channels=4,
                                           layers_per_block=1)
        return m, (r(2, 3, 16, 16),), {"num_frames": 2, **no_dict}

    return {f.__name__: f for f in (unet2d_condition_sdxl, unet2d_condition_simple, unet1d, vq_model,
                                      autoencoder_tiny, autoencoder_dc, controlnet, pixart, sana, hunyuan_dit,
                                      cogvideox, wan, ltx_video, aura_flow, lumina2, prior_transformer, mochi,
                                      hunyuan_video, latte, chroma, stable_audio_dit, autoencoder_kl_wan,
                                      autoencoder_oobleck, autoencoder_kl_temporal_decoder)}


def _rotary_2d(height: int, width: int, head_dim: int) -> tuple[Any, Any]:
    """HunyuanDiT's 2-D rotary embedding of a ``height x width`` patch grid (its pipeline computes it)."""
    from diffusers.models.embeddings import get_2d_rotary_pos_embed

    return get_2d_rotary_pos_embed(head_dim, ((0, 0), (height, width)), (height, width))


__all__ = ["more_diffusers"]
