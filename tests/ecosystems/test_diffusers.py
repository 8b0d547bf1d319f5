"""diffusers' backbones round-trip exactly from tiny configurations (random weights, no download).

UNet2DModel (time embedding, attention blocks, skip connections passed as tuples), UNet2DConditionModel (cross
attention), AutoencoderKL (encoder, diagonal Gaussian mode, decoder) and the DiT transformer (adaptive layer norm
on timestep and class label, patch embedding and unpatchify).
"""

from __future__ import annotations

import pytest
import torch

from tests.ecosystems.roundtrip import assert_fixpoint, assert_guarded, round_trip

# eval mode is what is compared (DiT's class-label dropout and a ResNet block's train-only branch: TrainModeWarning)
pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")


def _unet2d(d):
    model = d.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, block_out_channels=(8, 16),
                          layers_per_block=1, norm_num_groups=4, attention_head_dim=4,
                          down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                          up_block_types=("AttnUpBlock2D", "UpBlock2D"))
    return model, (torch.randn(1, 3, 16, 16), torch.tensor([3])), {"return_dict": False}


def _unet2d_condition(d):
    model = d.UNet2DConditionModel(sample_size=8, in_channels=4, out_channels=4, block_out_channels=(8, 16),
                                   layers_per_block=1, norm_num_groups=4, cross_attention_dim=8,
                                   attention_head_dim=4,
                                   down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
                                   up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"))
    args = (torch.randn(1, 4, 8, 8), torch.tensor([3]), torch.randn(1, 5, 8))
    return model, args, {"return_dict": False}


def _autoencoder_kl(d):
    model = d.AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=1,
                            latent_channels=4, norm_num_groups=4,
                            down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                            up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"))
    return model, (torch.randn(1, 3, 16, 16),), {"sample_posterior": False, "return_dict": False}


def _dit(d):
    model = d.DiTTransformer2DModel(num_attention_heads=2, attention_head_dim=8, in_channels=4, num_layers=2,
                                    sample_size=8, patch_size=2, num_embeds_ada_norm=10, norm_num_groups=4)
    kwargs = {"timestep": torch.tensor([3]), "class_labels": torch.tensor([1]), "return_dict": False}
    return model, (torch.randn(1, 4, 8, 8),), kwargs


CASES = {"unet2d": _unet2d, "unet2d_condition": _unet2d_condition, "autoencoder_kl": _autoencoder_kl, "dit": _dit}


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_is_exact(diffusers, name):
    torch.manual_seed(0)
    model, args, kwargs = CASES[name](diffusers)
    ir, rebuilt = round_trip(model, args, kwargs)
    if name == "dit":
        assert_fixpoint(ir, rebuilt, args, kwargs)
        assert_guarded(rebuilt, args, kwargs)
