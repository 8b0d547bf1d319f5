"""Vision and audio architectures of the corpus, from transformers configs."""

from __future__ import annotations

from torch import nn

from tests.real.configs import _TEXT, _VITLIKE, _W2V, DROP_PATH, IMG, VOCAB

# ------------------------------------------------------------------------------------------- vision


def _deit() -> nn.Module:
    from transformers import DeiTConfig, DeiTModel

    return DeiTModel(DeiTConfig(**_VITLIKE))


def _vit_cls() -> nn.Module:
    from transformers import ViTConfig, ViTForImageClassification

    return ViTForImageClassification(ViTConfig(**_VITLIKE, num_labels=5))


def _beit(drop_path: float = DROP_PATH) -> nn.Module:
    from transformers import BeitConfig, BeitModel

    config = BeitConfig(**_VITLIKE, use_relative_position_bias=True, use_mean_pooling=True,
                        layer_scale_init_value=0.1, drop_path_rate=drop_path)
    return BeitModel(config)


def _data2vec_vision() -> nn.Module:
    from transformers import Data2VecVisionConfig, Data2VecVisionModel

    config = Data2VecVisionConfig(**_VITLIKE, use_relative_position_bias=True, use_mean_pooling=True,
                                  layer_scale_init_value=0.1, drop_path_rate=DROP_PATH)
    return Data2VecVisionModel(config)


def _dinov2() -> nn.Module:
    from transformers import Dinov2Config, Dinov2Model

    config = Dinov2Config(**{k: v for k, v in _VITLIKE.items() if k != "intermediate_size"}, mlp_ratio=2,
                          drop_path_rate=DROP_PATH)
    return Dinov2Model(config)


def _yolos() -> nn.Module:
    from transformers import YolosConfig, YolosModel

    config = YolosConfig(**{**_VITLIKE, "image_size": [IMG, IMG]}, num_detection_tokens=4)
    return YolosModel(config)


def _vit_mae() -> nn.Module:
    from transformers import ViTMAEConfig, ViTMAEModel

    return ViTMAEModel(ViTMAEConfig(**_VITLIKE, mask_ratio=0.5))


def _swin(drop_path: float = DROP_PATH, attn: str = "eager") -> nn.Module:
    from transformers import SwinConfig, SwinModel

    config = SwinConfig(image_size=IMG, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                        window_size=4, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                        drop_path_rate=drop_path, attn_implementation=attn)
    return SwinModel(config)


def _swinv2() -> nn.Module:
    from transformers import Swinv2Config, Swinv2Model

    config = Swinv2Config(image_size=IMG, patch_size=2, embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                          window_size=4, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                          drop_path_rate=DROP_PATH, attn_implementation="eager")
    return Swinv2Model(config)


def _convnext_v2() -> nn.Module:
    from transformers import ConvNextV2Config, ConvNextV2Model

    config = ConvNextV2Config(image_size=IMG, hidden_sizes=[16, 32], depths=[1, 1], num_stages=2,
                              drop_path_rate=DROP_PATH)
    return ConvNextV2Model(config)


def _convnext_cls(drop_path: float = DROP_PATH) -> nn.Module:
    from transformers import ConvNextConfig, ConvNextForImageClassification

    config = ConvNextConfig(image_size=IMG, hidden_sizes=[16, 32], depths=[2, 1], num_stages=2, num_labels=5,
                            drop_path_rate=drop_path)
    return ConvNextForImageClassification(config)


def _regnet() -> nn.Module:
    from transformers import RegNetConfig, RegNetModel

    return RegNetModel(RegNetConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], groups_width=8))


def _resnet_bottleneck() -> nn.Module:
    from transformers import ResNetConfig, ResNetForImageClassification

    config = ResNetConfig(embedding_size=16, hidden_sizes=[32, 64], depths=[1, 2], layer_type="bottleneck",
                          downsample_in_bottleneck=True, num_labels=5)
    return ResNetForImageClassification(config)


def _bit() -> nn.Module:
    from transformers import BitConfig, BitModel

    return BitModel(BitConfig(embedding_size=16, hidden_sizes=[16, 32], depths=[1, 1], num_groups=4,
                              drop_path_rate=DROP_PATH))


def _efficientnet() -> nn.Module:
    from transformers import EfficientNetConfig, EfficientNetModel

    # hidden_dim must equal round_filters(1280) = 320 at width 0.25; drop_connect is a DropPath (see limitations)
    config = EfficientNetConfig(image_size=IMG, width_coefficient=0.25, depth_coefficient=0.25, hidden_dim=320,
                                dropout_rate=0.1, drop_connect_rate=0.0)
    return EfficientNetModel(config)


def _mobilenet_v1() -> nn.Module:
    from transformers import MobileNetV1Config, MobileNetV1Model

    return MobileNetV1Model(MobileNetV1Config(image_size=IMG, depth_multiplier=0.25))


def _mobilevit() -> nn.Module:
    from transformers import MobileViTConfig, MobileViTModel

    config = MobileViTConfig(image_size=64, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
                             num_attention_heads=2, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                             attn_implementation="eager")
    return MobileViTModel(config)


def _segformer() -> nn.Module:
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    config = SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                             patch_sizes=[7, 3], strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2],
                             decoder_hidden_size=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                             num_labels=4, drop_path_rate=DROP_PATH, attn_implementation="eager")
    return SegformerForSemanticSegmentation(config)


def _levit() -> nn.Module:
    from transformers import LevitConfig, LevitModel

    config = LevitConfig(image_size=64, hidden_sizes=[32, 48, 64], num_attention_heads=[2, 3, 4], depths=[1, 1, 1],
                         key_dim=[8, 8, 8], mlp_ratio=[2, 2, 2], attention_ratio=[2, 2, 2])
    return LevitModel(config)


def _poolformer() -> nn.Module:
    from transformers import PoolFormerConfig, PoolFormerModel

    config = PoolFormerConfig(hidden_sizes=[16, 32], depths=[1, 1], num_encoder_blocks=2, patch_sizes=[7, 3],
                              strides=[4, 2], padding=[2, 1], mlp_ratio=2.0, drop_path_rate=DROP_PATH)
    return PoolFormerModel(config)


def _pvt() -> nn.Module:
    from transformers import PvtConfig, PvtModel

    config = PvtConfig(image_size=IMG, num_encoder_blocks=2, depths=[1, 1], sequence_reduction_ratios=[2, 1],
                       hidden_sizes=[16, 32], patch_sizes=[4, 2], strides=[4, 2], num_attention_heads=[1, 2],
                       mlp_ratios=[2, 2], hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                       drop_path_rate=DROP_PATH, attn_implementation="eager")
    return PvtModel(config)


def _focalnet() -> nn.Module:
    from transformers import FocalNetConfig, FocalNetModel

    config = FocalNetConfig(image_size=IMG, patch_size=4, embed_dim=16, hidden_sizes=[16, 32], depths=[1, 1],
                            focal_levels=[2, 2], focal_windows=[3, 3], hidden_dropout_prob=0.1,
                            drop_path_rate=DROP_PATH)
    return FocalNetModel(config)


def _clip_text() -> nn.Module:
    from transformers import CLIPTextConfig, CLIPTextModel

    config = CLIPTextConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                            max_position_embeddings=16, attention_dropout=0.1, pad_token_id=1, bos_token_id=0,
                            eos_token_id=2, **_TEXT)
    return CLIPTextModel(config)


def _clip_vision() -> nn.Module:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    config = CLIPVisionConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                              image_size=IMG, patch_size=8, attention_dropout=0.1, attn_implementation="eager")
    return CLIPVisionModel(config)


def _clip() -> nn.Module:
    from transformers import CLIPConfig, CLIPModel

    text = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128,
            "max_position_embeddings": 16, "vocab_size": VOCAB, "pad_token_id": 1, "bos_token_id": 0,
            "eos_token_id": 2}
    vision = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128,
              "image_size": IMG, "patch_size": 8}
    return CLIPModel(CLIPConfig(text_config=text, vision_config=vision, projection_dim=32,
                                attn_implementation="eager"))


def _llava() -> nn.Module:
    """A CLIP vision tower, a projector and a Llama: the image features are scattered into the token embeddings at
    the image tokens (export writes ``torch.sym_ite`` for the count check)."""
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    vision = CLIPVisionConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2, intermediate_size=64,
                              image_size=16, patch_size=8, projection_dim=32)
    text = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, use_cache=False)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=VOCAB - 1,
                         vision_feature_layer=-1, attn_implementation="eager")
    return LlavaForConditionalGeneration(config)


def _siglip_vision() -> nn.Module:
    from transformers import SiglipVisionConfig, SiglipVisionModel

    config = SiglipVisionConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                                image_size=IMG, patch_size=8, attention_dropout=0.1, attn_implementation="eager")
    return SiglipVisionModel(config)


# -------------------------------------------------------------------------------------------- audio


def _wav2vec2() -> nn.Module:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    return Wav2Vec2Model(Wav2Vec2Config(**_W2V))


def _wav2vec2_ctc_stable() -> nn.Module:
    from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

    config = Wav2Vec2Config(**_W2V, feat_extract_norm="layer", do_stable_layer_norm=True, final_dropout=0.1)
    return Wav2Vec2ForCTC(config)


def _hubert() -> nn.Module:
    from transformers import HubertConfig, HubertModel

    return HubertModel(HubertConfig(**_W2V))


def _data2vec_audio() -> nn.Module:
    from transformers import Data2VecAudioConfig, Data2VecAudioModel

    return Data2VecAudioModel(Data2VecAudioConfig(**{**_W2V, "num_conv_pos_embeddings": 3}))


def _wavlm() -> nn.Module:
    from transformers import WavLMConfig, WavLMModel

    return WavLMModel(WavLMConfig(**_W2V, num_buckets=16, max_bucket_distance=32))


def _ast() -> nn.Module:
    from transformers import ASTConfig, ASTModel

    config = ASTConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                       patch_size=16, frequency_stride=10, time_stride=10, max_length=64, num_mel_bins=32,
                       hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1, attn_implementation="eager")
    return ASTModel(config)
