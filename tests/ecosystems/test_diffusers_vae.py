"""diffusers' autoencoders round-trip exactly from tiny configurations (random weights, no download).

AsymmetricAutoencoderKL (its decoder is
conditioned on the masked image), VQModel (nearest-codebook quantization: ``argmin`` over distances and an
embedding lookup, with the straight-through ``z + (z_q - z).detach()``), AutoencoderKLTemporalDecoder (Stable
Video Diffusion's VAE: temporal convolutions and a learned time-mixing ``alpha`` in the decoder) and AutoencoderKL
with two ResNet layers per block and a mid-block attention (the single-layer one is in test_diffusers.py):
eval outputs exact, also after a JSON save and load, and every parameter's gradient exact after one backward
(:func:`tests.ecosystems.roundtrip.round_trip`). The posterior's mode is decoded (``sample_posterior=False``);
VQModel also reaches a fixpoint, has every graph module swappable for the original's, lowers (``ir.lower()``) to
a FlatIR that runs exactly and is exact in train mode.

AutoencoderTiny's ``AutoencoderTinyBlock`` puts one activation module twice in an ``nn.Sequential`` (``conv.1`` and
``conv.3``): the rebuild ran the second one last, silently, until it restored the recorded order of the children
(tests/loop/test_signatures.py); it is here with a fixpoint.
"""

from __future__ import annotations

import pytest
import torch

from tests.ecosystems.roundtrip import (
    assert_every_module_swaps,
    assert_fixpoint,
    assert_lowered_exact,
    assert_train_exact,
    round_trip,
)

pytestmark = pytest.mark.filterwarnings("ignore::torch2ir.train.dropout.TrainModeWarning")

POSTERIOR_MODE = {"sample_posterior": False, "return_dict": False}


def _autoencoder_kl(d):
    model = d.AutoencoderKL(in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=2,
                            latent_channels=4, norm_num_groups=4,
                            down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                            up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"))
    return model, (torch.randn(1, 3, 16, 16),), POSTERIOR_MODE


def _asymmetric_autoencoder_kl(d):
    model = d.AsymmetricAutoencoderKL(in_channels=3, out_channels=3, down_block_out_channels=(8, 16),
                                      down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                                      up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"),
                                      up_block_out_channels=(8, 16), layers_per_down_block=1,
                                      layers_per_up_block=1, latent_channels=4, norm_num_groups=4)
    return model, (torch.randn(1, 3, 16, 16),), POSTERIOR_MODE


def _vq_model(d):
    model = d.VQModel(in_channels=3, out_channels=3, block_out_channels=(8, 16), layers_per_block=1,
                      latent_channels=4, norm_num_groups=4, num_vq_embeddings=16,
                      down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
                      up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"))
    return model, (torch.randn(1, 3, 16, 16),), {"return_dict": False}


def _autoencoder_kl_temporal_decoder(d):
    # its groups are fixed at 32: 32 channels is the narrowest
    model = d.AutoencoderKLTemporalDecoder(in_channels=3, out_channels=3, block_out_channels=(32,),
                                           down_block_types=("DownEncoderBlock2D",), layers_per_block=1,
                                           latent_channels=4)
    return model, (torch.randn(2, 3, 8, 8),), {**POSTERIOR_MODE, "num_frames": 2}


def _autoencoder_tiny(d):
    model = d.AutoencoderTiny(in_channels=3, out_channels=3, encoder_block_out_channels=(8, 8),
                              decoder_block_out_channels=(8, 8), num_encoder_blocks=(1, 1),
                              num_decoder_blocks=(1, 1), latent_channels=4)
    return model, (torch.randn(1, 3, 16, 16),), {"return_dict": False}


CASES = {f.__name__[1:]: f for f in (_autoencoder_kl, _asymmetric_autoencoder_kl, _vq_model,
                                      _autoencoder_kl_temporal_decoder, _autoencoder_tiny)}
FULL = ("vq_model",)


@pytest.mark.parametrize("name", sorted(CASES))
def test_round_trip_is_exact(diffusers, name):
    torch.manual_seed(0)
    model, args, kwargs = CASES[name](diffusers)
    ir, rebuilt = round_trip(model, args, kwargs)
    if name in (*FULL, "autoencoder_tiny"):
        assert_fixpoint(ir, rebuilt, args, kwargs)
    if name in FULL:
        assert assert_every_module_swaps(model, ir, rebuilt, args, kwargs) > 0
        assert_lowered_exact(model, ir, args, kwargs)
        assert_train_exact(model, args, kwargs)
