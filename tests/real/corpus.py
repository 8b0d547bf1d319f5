"""The real-architecture corpus: what ``tests/real/test_corpus.py`` proves and ``docs/supported.md`` lists.

Three groups, each entry built from a small config with random weights (see ``text.py``,
``vision_audio.py``, ``configs.py``):

* :data:`CORPUS`: round-trips exactly in eval mode, and in train mode unless ``train_differs`` says why not;
* :data:`UNSUPPORTED`: conversion raises a ``ConversionError`` whose message contains ``match``.

The models of ``tests/models/real.py`` and the ``torch.nn`` roots of the zoo are part of the corpus too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn

from tests.models.case import Inputs, seeded
from tests.models.real import REAL
from tests.models.zoo import by_name
from tests.real import configs, decoders, moe, text, vision_audio


@dataclass(frozen=True)
class Arch:
    """One corpus architecture: ``label`` is the model class, ``kind`` its family."""

    name: str
    label: str
    kind: str
    build: Callable[[], nn.Module]
    inputs: Callable[[], Inputs]
    train_differs: str = ""  # why train mode is not equivalent ("" when it is)
    reason: str = ""  # for UNSUPPORTED: why conversion fails
    match: str = ""  # for UNSUPPORTED: a substring of the ConversionError message
    allow: tuple[str, ...] = ()  # operators of other namespaces this architecture needs (opt-in)


def _arch(
    name: str, label: str, kind: str, build: Callable[[], nn.Module], inputs: Callable[[], Inputs], **extra: Any
) -> Arch:
    return Arch(name, label, kind, seeded(build), inputs, **extra)


_BASE_LABELS = {
    "bert": ("BertModel", "text encoder"),
    "gpt2": ("GPT2LMHeadModel", "text decoder"),
    "llama": ("LlamaForCausalLM", "text decoder"),
    "vit": ("ViTModel", "vision"),
    "resnet": ("ResNetModel", "vision"),
    "mobilenet_v2": ("MobileNetV2Model", "vision"),
    "convnext": ("ConvNextModel", "vision"),
    "t5_encoder": ("T5EncoderModel", "text encoder"),
    "whisper_encoder": ("WhisperEncoder", "audio"),
    "transformer": ("torch.nn.Transformer", "torch.nn"),
    "multihead_attention": ("torch.nn.MultiheadAttention", "torch.nn"),
    "lstm": ("torch.nn.LSTM", "torch.nn"),
}


def _base() -> list[Arch]:
    cases = [*REAL, *(by_name(n) for n in ("transformer", "multihead_attention", "lstm"))]
    return [Arch(c.name, *_BASE_LABELS[c.name], c.build, c.inputs) for c in cases]


_DROP_PATH = (
    "DropPath (`drop_path_rate > 0`) draws `torch.rand` in Python in train mode only: conversion warns "
    "(`TrainModeWarning`)"
)
_MHA_DROPOUT = (
    "its attention calls `F.multi_head_attention_forward(training=self.training)`: that dropout is a Python "
    "branch the eval trace does not contain"
)
_EXPORT = "torch.export could not trace"


CORPUS: list[Arch] = [
    *_base(),
    _arch("roberta", "RobertaModel", "text encoder", text._roberta, configs._text_inputs),
    _arch("xlm_roberta", "XLMRobertaModel", "text encoder", text._xlm_roberta, configs._text_inputs),
    _arch("distilbert", "DistilBertModel", "text encoder", text._distilbert, configs._text_inputs),
    _arch("albert", "AlbertModel", "text encoder", text._albert, configs._text_inputs),
    _arch("electra", "ElectraModel", "text encoder", text._electra, configs._text_inputs),
    _arch("deberta", "DebertaModel", "text encoder", text._deberta, configs._text_inputs),
    _arch("deberta_v2", "DebertaV2Model", "text encoder", text._deberta_v2, configs._text_inputs),
    _arch("mpnet", "MPNetModel", "text encoder", text._mpnet, configs._text_inputs),
    _arch("roformer", "RoFormerModel", "text encoder", text._roformer, configs._text_inputs),
    _arch("convbert", "ConvBertModel", "text encoder", text._convbert, configs._text_inputs),
    _arch("mobilebert", "MobileBertModel", "text encoder", text._mobilebert, configs._text_inputs),
    _arch("squeezebert", "SqueezeBertModel", "text encoder", text._squeezebert, configs._text_inputs),
    _arch("fnet", "FNetModel", "text encoder", text._fnet, configs._ids_inputs),
    _arch("bert_mlm", "BertForMaskedLM", "text encoder", text._bert_mlm, configs._text_inputs),
    _arch("bert_seqcls", "BertForSequenceClassification", "text encoder", text._bert_seqcls, configs._text_inputs),
    _arch("bert_sdpa", "BertModel", "text encoder", text._bert_sdpa, configs._text_inputs),
    _arch("opt", "OPTForCausalLM", "text decoder", decoders._opt, configs._text_inputs),
    _arch("gpt_neo", "GPTNeoModel", "text decoder", decoders._gpt_neo, configs._text_inputs),
    _arch("gptj", "GPTJModel", "text decoder", decoders._gptj, configs._text_inputs),
    _arch("bloom", "BloomForCausalLM", "text decoder", decoders._bloom, configs._text_inputs),
    _arch("falcon", "FalconModel", "text decoder", decoders._falcon, configs._text_inputs),
    _arch("falcon_alibi", "FalconModel", "text decoder", decoders._falcon_alibi, configs._text_inputs),
    _arch("mistral", "MistralForCausalLM", "text decoder", decoders._mistral, configs._text_inputs),
    _arch("qwen2", "Qwen2ForCausalLM", "text decoder", decoders._qwen2, configs._text_inputs),
    _arch("qwen3", "Qwen3ForCausalLM", "text decoder", decoders._qwen3, configs._text_inputs),
    _arch("gemma", "GemmaForCausalLM", "text decoder", decoders._gemma, configs._text_inputs),
    _arch("gemma2", "Gemma2ForCausalLM", "text decoder", decoders._gemma2, configs._text_inputs),
    _arch("phi", "PhiForCausalLM", "text decoder", decoders._phi, configs._text_inputs),
    _arch("phi3", "Phi3ForCausalLM", "text decoder", decoders._phi3, configs._text_inputs),
    _arch("stablelm", "StableLmModel", "text decoder", decoders._stablelm, configs._text_inputs),
    _arch("gpt_bigcode", "GPTBigCodeForCausalLM", "text decoder", decoders._gpt_bigcode, configs._text_inputs),
    _arch("codegen", "CodeGenModel", "text decoder", decoders._codegen, configs._text_inputs),
    _arch("gpt_neox", "GPTNeoXForCausalLM", "text decoder", decoders._gpt_neox, configs._text_inputs),
    _arch("olmo", "OlmoForCausalLM", "text decoder", decoders._olmo, configs._text_inputs),
    _arch("olmo2", "Olmo2ForCausalLM", "text decoder", decoders._olmo2, configs._text_inputs),
    _arch("starcoder2", "Starcoder2ForCausalLM", "text decoder", decoders._starcoder2, configs._text_inputs),
    _arch("granite", "GraniteForCausalLM", "text decoder", decoders._granite, configs._text_inputs),
    _arch("cohere", "CohereForCausalLM", "text decoder", decoders._cohere, configs._text_inputs),
    _arch("mixtral_batched", "MixtralForCausalLM", "text decoder", decoders._mixtral_batched, configs._text_inputs),
    _arch("xglm", "XGLMModel", "text decoder", decoders._xglm, configs._text_inputs),
    _arch("biogpt", "BioGptForCausalLM", "text decoder", decoders._biogpt, configs._text_inputs),
    _arch("mpt", "MptModel", "text decoder", decoders._mpt, configs._text_inputs),
    _arch("mamba", "MambaModel", "text decoder", decoders._mamba, configs._ids_inputs),
    _arch("bart", "BartForConditionalGeneration", "encoder-decoder", text._bart, configs._seq2seq_inputs),
    _arch("mbart", "MBartModel", "encoder-decoder", text._mbart, configs._seq2seq_inputs),
    _arch("marian", "MarianMTModel", "encoder-decoder", text._marian, configs._seq2seq_inputs),
    _arch("pegasus", "PegasusModel", "encoder-decoder", text._pegasus, configs._seq2seq_inputs),
    _arch("t5", "T5ForConditionalGeneration", "encoder-decoder", text._t5, configs._seq2seq_inputs),
    _arch("mt5", "MT5Model", "encoder-decoder", text._mt5, configs._seq2seq_inputs),
    _arch("whisper", "WhisperForConditionalGeneration", "encoder-decoder", text._whisper, configs._whisper_inputs),
    _arch("deit", "DeiTModel", "vision", vision_audio._deit, configs._image_inputs),
    _arch("vit_cls", "ViTForImageClassification", "vision", vision_audio._vit_cls, configs._image_inputs),
    _arch("beit", "BeitModel", "vision", vision_audio._beit, configs._image_inputs),
    _arch(
        "beit_droppath",
        "BeitModel",
        "vision",
        lambda: vision_audio._beit(drop_path=0.1),
        configs._image_inputs,
        train_differs=_DROP_PATH,
    ),
    _arch("data2vec_vision", "Data2VecVisionModel", "vision", vision_audio._data2vec_vision, configs._image_inputs),
    _arch("dinov2", "Dinov2Model", "vision", vision_audio._dinov2, configs._image_inputs),
    _arch("yolos", "YolosModel", "vision", vision_audio._yolos, configs._image_inputs),
    _arch("vit_mae", "ViTMAEModel", "vision", vision_audio._vit_mae, configs._vit_mae_inputs),
    _arch("swin", "SwinModel", "vision", vision_audio._swin, configs._image_inputs),
    _arch(
        "swin_droppath",
        "SwinModel",
        "vision",
        lambda: vision_audio._swin(drop_path=0.1),
        configs._image_inputs,
        train_differs=_DROP_PATH,
    ),
    _arch("swin_sdpa", "SwinModel", "vision", lambda: vision_audio._swin(attn="sdpa"), configs._image_inputs),
    _arch("swinv2", "Swinv2Model", "vision", vision_audio._swinv2, configs._image_inputs),
    _arch("convnext_v2", "ConvNextV2Model", "vision", vision_audio._convnext_v2, configs._image_inputs),
    _arch(
        "convnext_cls", "ConvNextForImageClassification", "vision", vision_audio._convnext_cls, configs._image_inputs
    ),
    _arch(  # no dropout op anywhere: only the meta-device train pass can see its DropPath
        "convnext_droppath",
        "ConvNextForImageClassification",
        "vision",
        lambda: vision_audio._convnext_cls(drop_path=0.1),
        configs._image_inputs,
        train_differs=_DROP_PATH,
    ),
    _arch("regnet", "RegNetModel", "vision", vision_audio._regnet, configs._image_inputs),
    _arch(
        "resnet_bottleneck",
        "ResNetForImageClassification",
        "vision",
        vision_audio._resnet_bottleneck,
        configs._image_inputs,
    ),
    _arch("bit", "BitModel", "vision", vision_audio._bit, configs._image_inputs),
    _arch("efficientnet", "EfficientNetModel", "vision", vision_audio._efficientnet, configs._image2_inputs),
    _arch("mobilenet_v1", "MobileNetV1Model", "vision", vision_audio._mobilenet_v1, configs._image2_inputs),
    _arch("mobilevit", "MobileViTModel", "vision", vision_audio._mobilevit, configs._image64_inputs),
    _arch("segformer", "SegformerForSemanticSegmentation", "vision", vision_audio._segformer, configs._image64_inputs),
    _arch("levit", "LevitModel", "vision", vision_audio._levit, configs._image64x2_inputs),
    _arch("poolformer", "PoolFormerModel", "vision", vision_audio._poolformer, configs._image_inputs),
    _arch("pvt", "PvtModel", "vision", vision_audio._pvt, configs._image_inputs),
    _arch("focalnet", "FocalNetModel", "vision", vision_audio._focalnet, configs._image_inputs),
    _arch("clip_text", "CLIPTextModel", "text encoder", vision_audio._clip_text, configs._clip_text_inputs),
    _arch("clip_vision", "CLIPVisionModel", "vision", vision_audio._clip_vision, configs._image_inputs),
    _arch("clip", "CLIPModel", "vision", vision_audio._clip, configs._clip_inputs),
    _arch("siglip_vision", "SiglipVisionModel", "vision", vision_audio._siglip_vision, configs._image_inputs),
    _arch("wav2vec2", "Wav2Vec2Model", "audio", vision_audio._wav2vec2, configs._wave_inputs),
    _arch("wav2vec2_ctc_stable", "Wav2Vec2ForCTC", "audio", vision_audio._wav2vec2_ctc_stable, configs._wave_inputs),
    _arch("hubert", "HubertModel", "audio", vision_audio._hubert, configs._wave_inputs),
    _arch("data2vec_audio", "Data2VecAudioModel", "audio", vision_audio._data2vec_audio, configs._wave_inputs),
    _arch("wavlm", "WavLMModel", "audio", vision_audio._wavlm, configs._wave_inputs, train_differs=_MHA_DROPOUT),
    _arch("ast", "ASTModel", "audio", vision_audio._ast, configs._ast_inputs),
    _arch("funnel", "FunnelModel", "text encoder", text._funnel, configs._text_inputs),
    _arch("llama_seqcls", "LlamaForSequenceClassification", "text decoder", text._llama_seqcls, configs._text_inputs),
    _arch("m2m100", "M2M100Model", "encoder-decoder", text._m2m100, configs._seq2seq_inputs),
    _arch(
        "blenderbot_small", "BlenderbotSmallModel", "encoder-decoder", text._blenderbot_small, configs._seq2seq_inputs
    ),
]

# the rotary embedding is called twice with different graphs (global and sliding-window attention): per-call graphs
CORPUS.append(_arch("modernbert", "ModernBertModel", "text encoder", text._modernbert, configs._text_inputs))
# the default experts kernel is transformers' grouped_mm_fallback operator, a known operator (common.known_ops):
# converted and rebuilt without allow=
CORPUS.append(_arch("mixtral", "MixtralForCausalLM", "text decoder", decoders._mixtral, configs._text_inputs))
CORPUS.extend(_arch(name, label, "text decoder", build, configs._text_inputs, train_differs=differs)
              for name, (label, build, differs) in moe.MOE.items())

UNSUPPORTED: list[Arch] = [
    _arch(
        "mixtral_eager",
        "MixtralForCausalLM",
        "text decoder",
        decoders._mixtral_eager,
        configs._text_inputs,
        reason="the eager experts loop over data-dependent token counts: torch.export cannot trace it",
        match=f"{_EXPORT} MixtralForCausalLM in model.layers.0.mlp.experts "
        "(transformers.models.mixtral.modeling_mixtral.MixtralExperts): ",
    ),
    _arch(
        "longformer",
        "LongformerModel",
        "text encoder",
        text._longformer,
        configs._text_inputs,
        reason="`.any().item()` in its forward: torch.export cannot trace it",
        match=f"{_EXPORT} LongformerModel in encoder.layer.0.attention.self "
        "(transformers.models.longformer.modeling_longformer.LongformerSelfAttention): ",
    ),
]
