"""The timm sample of ``test_timm.py`` and ``test_timm_train.py``: one model per timm family, shrunk.

A family is the timm module a model is registered from (``timm.models._registry._model_to_module``: ``resnet``,
``convnext``, ``vision_transformer``, ...; timm 1.0.31 has 98). :data:`CASES` maps each family of the sample,
sorted, to the family's smallest registered variant (timm's own ``test_*`` model where it has one), made
small through ``timm.create_model(name, pretrained=False, num_classes=10, **kwargs)`` (fewer blocks, narrower
stages, a smaller ``img_size``) and run on a ``1x3xSxS`` input at the smallest size ``S`` it accepts. Where a
registered variant fixes an argument so that ``create_model`` cannot override it (``dict(depths=..., **kwargs)``
raises on a second ``depths``), the family's model class is built directly: its entry names
``"<module>.<Class>"``. The choice is fixed, not drawn: weights and inputs are seeded (``torch.manual_seed(0)``
before building, then the input drawn), so every run checks the same numbers.

Of the 98 families, the 71 of :data:`CASES` are checked by ``make test-zoo``; left out:

- :data:`SLOW` (19 families, configurations kept): exact, but 3.8-16 s each for one round trip on this
  project's two shared cores, beyond the time budget of ``test_timm.py`` (about four minutes for the file);
  ``TORCH2IR_TIMM_SLOW=1`` runs them too;
- no size argument and too slow (8-25 s for one round trip even at 64x64 or 75x75): ``inception_resnet_v2``,
  ``inception_v3``, ``inception_v4``, ``nasnet`` (18 s even at ``stem_size=8, num_features=192``),
  ``pnasnet``, ``mobilenetv5`` (80 M parameters at its smallest), ``mvitv2`` (23 M parameters, configured by
  name only);
- timm itself fails when shrunk: ``hieradet_sam2`` (``ZeroDivisionError`` with fewer stages).

``benchmarks/sweep.py --zoo timm`` converts full-size models of every family (``benchmarks/results-sweep.md``).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

import torch
from torch import nn

#: ghostnet's and repghost's stage configuration cut to four one-block stages ([kernel, expansion, channels,
#: squeeze-excitation ratio, stride] per block)
_GHOST = [[[3, 16, 16, 0, 1]], [[3, 48, 24, 0, 2]], [[5, 72, 40, 0.25, 2]], [[3, 120, 48, 0.25, 2]]]
_ONE4 = (1, 1, 1, 1)

#: family -> (registered model name, or ``"<module>.<Class>"`` of timm.models; keyword arguments; input size)
CASES: dict[str, tuple[str, dict[str, Any], int]] = {
    "beit": ("beit_base_patch16_224", dict(img_size=32, embed_dim=32, depth=1, num_heads=2), 32),
    "byobnet": ("test_byobnet", {}, 32),
    "cait": ("cait_xxs24_224", dict(img_size=32, embed_dim=32, depth=1, num_heads=2, depth_token_only=1), 32),
    "coat": ("coat_lite_tiny", dict(img_size=32, embed_dims=[32] * 4, serial_depths=[1] * 4), 32),
    "convit": ("convit_tiny", dict(img_size=32, depth=2, local_up_to_layer=1, embed_dim=8, num_heads=2), 32),
    "convmixer": ("convmixer.ConvMixer", dict(dim=16, depth=1, kernel_size=3, patch_size=4), 32),
    "convnext": ("convnext_atto", dict(depths=_ONE4), 32),
    "crossvit": ("crossvit_tiny_240", dict(depth=[[1, 1, 0]]), 240),
    "cspnet": ("cs3darknet_focus_s", {}, 32),
    "davit": ("davit_tiny", dict(depths=_ONE4, embed_dims=(8, 16, 32, 64), num_heads=_ONE4), 32),
    "deepseek_vit": ("deepseek_vit_412m", dict(img_size=28, embed_dim=32, depth=1, num_heads=2), 28),
    "deit": ("deit_tiny_distilled_patch16_224", dict(img_size=32, depth=1), 32),
    "densenet": ("densenet121", dict(block_config=(2, 2), growth_rate=8), 32),
    "dla": ("dla46_c", {}, 32),
    "dpn": ("dpn48b", dict(k_sec=_ONE4), 32),
    "edgenext": ("edgenext_xx_small", dict(depths=_ONE4), 64),
    "efficientformer": ("efficientformer_l1", dict(depths=_ONE4, embed_dims=(8, 16, 16, 32)), 224),
    "efficientnet": ("test_efficientnet", {}, 32),
    "efficientvit_mit": ("efficientvit_b0", dict(depths=(0, 1, 1, 1, 1)), 64),
    "eva": ("eva02_tiny_patch14_224", dict(img_size=28, depth=1), 28),
    "fasternet": ("fasternet_t0", dict(depths=_ONE4), 32),
    "fastvit": ("fastvit_t8", dict(layers=_ONE4), 32),
    "focalnet": ("focalnet.FocalNet", dict(depths=_ONE4, embed_dim=16), 32),
    "gcvit": ("gcvit.GlobalContextVit", dict(depths=_ONE4, num_heads=(1, 2, 4, 8), embed_dim=16, img_size=64), 64),
    "gemma4_vit": ("gemma4_vit_167m", dict(depth=1, embed_dim=32, num_heads=2), 32),
    "ghostnet": ("ghostnet.GhostNet", dict(cfgs=_GHOST, width=0.5), 32),
    "hgnet": ("hgnetv2_b0", {}, 64),
    "hiera": ("hiera_tiny_224", dict(img_size=64, stages=_ONE4, embed_dim=16, num_heads=1), 64),
    "inception_next": ("inception_next_atto", dict(depths=_ONE4), 32),
    "levit": ("levit_128s", dict(img_size=64, depth=(1, 1, 1)), 64),
    "mambaout": ("test_mambaout", {}, 32),
    "maxxvit": ("test_coatnet", dict(img_size=32), 32),
    "metaformer": ("metaformer.MetaFormer", dict(depths=_ONE4, dims=(16, 32, 64, 64)), 32),
    "mlp_mixer": ("mlp_mixer.MlpMixer", dict(img_size=32, patch_size=16, num_blocks=1, embed_dim=32), 32),
    "mobilenetv3": ("lcnet_050", {}, 32),
    "naflexvit": ("naflexvit_base_patch16_gap", dict(embed_dim=32, depth=1, num_heads=2), 32),
    "nest": ("nest.Nest", dict(img_size=32, embed_dims=(16, 32, 64), num_heads=(1, 2, 4), depths=(1, 1, 1)), 32),
    "nfnet": ("test_nfnet", {}, 32),
    "pit": ("pit_ti_224", dict(img_size=64, depth=(1, 1, 1)), 64),
    "pvt_v2": ("pvt_v2_b0", dict(depths=_ONE4), 32),
    "qwen3_vit": ("qwen3_vit_88m", dict(depth=1), 32),
    "rdnet": ("rdnet_tiny", dict(num_blocks_list=[1] * 7), 32),
    "regnet": ("regnetx_002", {}, 32),
    "repghost": ("repghost.RepGhostNet", dict(cfgs=_GHOST, width=0.5), 32),
    "repvit": ("repvit_m0_9", dict(depth=_ONE4), 32),
    "res2net": ("res2net50_14w_8s", dict(layers=_ONE4), 32),
    "resnest": ("resnest14d", dict(layers=_ONE4), 32),
    "resnet": ("resnet10t", {}, 32),
    "resnetv2": ("resnetv2_18", dict(layers=_ONE4), 32),
    "rexnet": ("rexnet_100", dict(depth_mult=0.5), 32),
    "selecsls": ("selecsls42", {}, 32),
    "senet": ("legacy_seresnet18", {}, 32),
    "sequencer": ("sequencer2d_s", dict(layers=_ONE4), 32),
    "sknet": ("skresnet18", {}, 32),
    "starnet": ("starnet_s050", {}, 32),
    "swin_transformer": ("swin_tiny_patch4_window7_224", dict(img_size=32, window_size=4, depths=(2, 1),
                                                              embed_dim=16, num_heads=(1, 2)), 32),
    "swin_transformer_v2": ("swinv2_tiny_window8_256", dict(img_size=32, window_size=4, depths=(2, 1),
                                                            embed_dim=16, num_heads=(1, 2)), 32),
    "swin_transformer_v2_cr": ("swinv2_cr_tiny_224", dict(img_size=32, window_size=4, depths=(2, 1),
                                                          embed_dim=16, num_heads=(1, 2)), 32),
    "tiny_vit": ("tiny_vit_5m_224", dict(depths=_ONE4), 64),
    "tnt": ("tnt_s_patch16_224", dict(img_size=32, depth=1), 32),
    "tresnet": ("tresnet_m", dict(layers=_ONE4), 32),
    "twins": ("twins_svt_small", dict(depths=_ONE4, embed_dims=(16, 32, 64, 128)), 64),
    "vgg": ("vgg11", dict(mlp_ratio=0.01), 32),
    "visformer": ("visformer_tiny", dict(depth=(1, 1, 1), img_size=64), 64),
    "vision_transformer": ("vit_tiny_patch16_224", dict(depth=2, img_size=32), 32),
    "vision_transformer_hybrid": ("vit_tiny_r_s16_p8_224", dict(img_size=32, depth=1), 32),
    "vision_transformer_sam": ("samvit_base_patch16", dict(img_size=64, embed_dim=32, depth=1, num_heads=2,
                                                           global_attn_indexes=(0,)), 64),
    "volo": ("volo.VOLO", dict(layers=_ONE4, img_size=32, embed_dims=(32, 64, 64, 64), num_heads=(1, 2, 2, 2)), 32),
    "vovnet": ("ese_vovnet19b_slim_dw", {}, 32),
    "xception": ("legacy_xception", {}, 64),
    "xcit": ("xcit_nano_12_p16_224", dict(img_size=32, depth=1, embed_dim=32, num_heads=2), 32),
}

#: families left out of :data:`CASES` for time (3.8-16 s each for one round trip on 2 loaded cores), exact when
#: last run like this (eval round trip, fixpoint, lowering, swaps): ``TORCH2IR_TIMM_SLOW=1`` runs them too
SLOW: dict[str, tuple[str, dict[str, Any], int]] = {
    "byoanet": ("botnet26t_256", dict(img_size=64), 64),
    "cpubone": ("cpubone_b0_bfrobust", {}, 32),
    "csatv2": ("csatv2", dict(depths=_ONE4, transformer_depths=(0, 0, 1, 1), dims=(16, 32, 64, 64)), 64),
    "cspnext": ("cspnext_tiny", {}, 32),
    "efficientformer_v2": ("efficientformerv2_s0", dict(depths=_ONE4, img_size=64), 64),
    "efficientvim": ("efficientvim_m1", dict(depths=(1, 1, 1)), 64),
    "efficientvit_msra": ("efficientvit_m0", dict(img_size=64, depth=(1, 1, 1), num_heads=(1, 1, 1),
                                                  embed_dim=(16, 32, 48)), 64),
    "hardcorenas": ("hardcorenas_a", {}, 32),
    "hrnet": ("hrnet_w18_small", {}, 32),
    "iformer": ("iformer_t", dict(depths=(1, 1, 3, 3), attn_groups=(0, 0, 1, 1)), 64),
    "lcnetv2": ("lcnetv2_small", {}, 32),
    "lowformer": ("lowformer_b0", dict(depth_list=[0, 1, 1, 1, 1]), 64),
    "mobilevit": ("mobilevit_xxs", {}, 32),
    "nextvit": ("nextvit_small", dict(depths=(1, 1, 5, 1)), 64),
    "shvit": ("shvit_s1", dict(depth=(1, 1, 1)), 64),
    "swiftformer": ("swiftformer_xs", dict(layers=_ONE4, img_size=64), 64),
    "vision_transformer_relpos": ("test_vit_relpos", dict(img_size=32), 32),
    "vitamin": ("vitamin_small_224", dict(img_size=32), 32),
    "xception_aligned": ("xception41p", {}, 64),
}


def build(timm: ModuleType, family: str) -> tuple[nn.Module, torch.Tensor]:
    """``family``'s model (seeded weights, 10 classes) and its seeded ``1x3xSxS`` input."""
    name, kwargs, size = CASES[family] if family in CASES else SLOW[family]
    torch.manual_seed(0)
    if "." in name:
        module, cls = name.rsplit(".", 1)
        model = getattr(importlib.import_module(f"timm.models.{module}"), cls)(num_classes=10, **kwargs)
    else:
        model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
    return model, torch.randn(1, 3, size, size)


def family_of(name: str) -> str:
    """The timm module ``name`` (a registered model, or ``"<module>.<Class>"``) comes from."""
    from timm.models import _registry

    return name.rsplit(".", 1)[0] if "." in name else _registry._model_to_module[name]
