"""Model builders of the registry sweep (:mod:`benchmarks.sweep`) beyond torchvision and timm: diffusers' backbones
at tiny sizes and brevitas' own example networks (every ``transformers`` model type, shrunk:
:mod:`benchmarks.sweep_transformers`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def diffusers_blocks() -> dict[str, Callable[[], tuple[Any, tuple, dict]]]:
    """Tiny configurations of diffusers' backbones: ``name -> () -> (model, args, kwargs)``, with the further classes
    of :func:`benchmarks.sweep_diffusers.more_diffusers`."""
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

    from benchmarks.sweep_diffusers import more_diffusers

    return {**{f.__name__: f for f in (unet2d, unet2d_condition, unet3d_condition, autoencoder_kl, dit,
                                         transformer2d, sd3, flux)}, **more_diffusers()}


#: brevitas' BNN-PYNQ networks (``brevitas_examples.bnn_pynq``: their shipped .ini files) and the input each takes
_BNN = {"cnv_1w1a": (1, 3, 32, 32), "cnv_1w2a": (1, 3, 32, 32), "cnv_2w2a": (1, 3, 32, 32),
        "lfc_1w1a": (1, 1, 28, 28), "lfc_1w2a": (1, 1, 28, 28), "sfc_1w1a": (1, 1, 28, 28),
        "sfc_1w2a": (1, 1, 28, 28), "sfc_2w2a": (1, 1, 28, 28), "tfc_1w1a": (1, 1, 28, 28),
        "tfc_1w2a": (1, 1, 28, 28), "tfc_2w2a": (1, 1, 28, 28), "resnet18_4w4a": (1, 3, 32, 32)}
#: brevitas' ImageNet examples (``brevitas_examples.imagenet_classification``, 224x224: their final pool is 7x7) and
#: the bit width of those whose .ini leaves it to the caller
_IMAGENET = {"quant_mobilenet_v1": 8, "quant_mobilenet_v1_4b": None, "quant_proxylessnas_mobile14_4b": None,
             "quant_proxylessnas_mobile14_4b5b": None}


def brevitas_models() -> dict[str, Callable[[], tuple[Any, tuple, dict]]]:
    """brevitas' example networks with random weights (nothing downloaded): BNN-PYNQ, the ImageNet examples and
    every super-resolution ESPCN (``name -> () -> (model, args, kwargs)``). Each is called once in eval mode
    before it is returned: brevitas initializes its runtime statistics on the first call."""
    import torch

    def ready(model: Any, shape: tuple[int, ...]) -> tuple[Any, tuple, dict]:
        x = torch.rand(shape) * 2 - 1
        model.eval()
        with torch.no_grad():
            model(x)
        return model, (x,), {}

    def bnn(name: str) -> Callable[[], tuple[Any, tuple, dict]]:
        def build() -> tuple[Any, tuple, dict]:
            from brevitas_examples.bnn_pynq.models import model_with_cfg

            return ready(model_with_cfg(name, pretrained=False)[0], _BNN[name])

        return build

    def imagenet(name: str) -> Callable[[], tuple[Any, tuple, dict]]:
        def build() -> tuple[Any, tuple, dict]:
            from brevitas_examples.imagenet_classification.models import model_with_cfg

            return ready(model_with_cfg(name, pretrained=None, bit_width=_IMAGENET[name])[0], (1, 3, 224, 224))

        return build

    def espcn(name: str) -> Callable[[], tuple[Any, tuple, dict]]:
        def build() -> tuple[Any, tuple, dict]:
            from brevitas_examples.super_resolution.models import model_impl

            return ready(model_impl[name](), (1, 3, 16, 16))

        return build

    from brevitas_examples.super_resolution.models import model_impl

    return {**{f"bnn_pynq.{n}": bnn(n) for n in _BNN}, **{f"imagenet.{n}": imagenet(n) for n in _IMAGENET},
            **{f"super_resolution.{n}": espcn(n) for n in sorted(model_impl)}}


__all__ = ["brevitas_models", "diffusers_blocks"]
