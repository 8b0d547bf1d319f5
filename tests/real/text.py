"""Text encoders and encoder-decoders of the corpus, from transformers configs (decoders: decoders.py)."""

from __future__ import annotations

from torch import nn

from tests.models.real import WHISPER_POSITIONS
from tests.real.configs import _BARTLIKE, _BERTLIKE, _LLAMALIKE, _TEXT, VOCAB

# ------------------------------------------------------------------------------------------ encoders


def _roberta() -> nn.Module:
    from transformers import RobertaConfig, RobertaModel

    return RobertaModel(RobertaConfig(**_BERTLIKE, use_cache=False, **_TEXT))


def _xlm_roberta() -> nn.Module:
    from transformers import XLMRobertaConfig, XLMRobertaModel

    return XLMRobertaModel(XLMRobertaConfig(**_BERTLIKE, use_cache=False, **_TEXT))


def _xlm() -> nn.Module:
    """XLM asserts ``lengths.max().item() <= slen``: an unbacked size bounded above only (its range is
    ``[-int_oo, SEQ]``)."""
    from transformers import XLMConfig, XLMModel

    config = XLMConfig(vocab_size=VOCAB, emb_dim=64, n_layers=2, n_heads=2, max_position_embeddings=64, dropout=0.1,
                       attention_dropout=0.1, use_cache=False, attn_implementation="eager")
    return XLMModel(config)


def _distilbert() -> nn.Module:
    from transformers import DistilBertConfig, DistilBertModel

    config = DistilBertConfig(n_layers=2, dim=64, n_heads=2, hidden_dim=128, max_position_embeddings=64,
                              dropout=0.1, attention_dropout=0.1, **_TEXT)
    return DistilBertModel(config)


def _albert() -> nn.Module:
    from transformers import AlbertConfig, AlbertModel

    config = AlbertConfig(embedding_size=32, **{**_BERTLIKE, "hidden_dropout_prob": 0.1,
                                                "attention_probs_dropout_prob": 0.1}, **_TEXT)
    return AlbertModel(config)


def _electra() -> nn.Module:
    from transformers import ElectraConfig, ElectraModel

    return ElectraModel(ElectraConfig(embedding_size=32, **_BERTLIKE, use_cache=False, **_TEXT))


def _deberta() -> nn.Module:
    from transformers import DebertaConfig, DebertaModel

    config = DebertaConfig(**_BERTLIKE, relative_attention=True, pos_att_type=["c2p", "p2c"],
                           max_relative_positions=16, **_TEXT)
    return DebertaModel(config)


def _deberta_v2() -> nn.Module:
    from transformers import DebertaV2Config, DebertaV2Model

    config = DebertaV2Config(**_BERTLIKE, relative_attention=True, pos_att_type=["c2p", "p2c"],
                             position_buckets=8, max_relative_positions=16, norm_rel_ebd="layer_norm", **_TEXT)
    return DebertaV2Model(config)


def _mpnet() -> nn.Module:
    from transformers import MPNetConfig, MPNetModel

    return MPNetModel(MPNetConfig(**_BERTLIKE, **_TEXT))


def _roformer() -> nn.Module:
    from transformers import RoFormerConfig, RoFormerModel

    return RoFormerModel(RoFormerConfig(embedding_size=64, **_BERTLIKE, use_cache=False, **_TEXT))


def _convbert() -> nn.Module:
    from transformers import ConvBertConfig, ConvBertModel

    return ConvBertModel(ConvBertConfig(embedding_size=64, head_ratio=2, conv_kernel_size=5, **_BERTLIKE, **_TEXT))


def _mobilebert() -> nn.Module:
    from transformers import MobileBertConfig, MobileBertModel

    config = MobileBertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=64,
                              embedding_size=32, intra_bottleneck_size=32, num_feedforward_networks=2,
                              max_position_embeddings=64, hidden_dropout_prob=0.1,
                              attention_probs_dropout_prob=0.1, **_TEXT)
    return MobileBertModel(config)


def _squeezebert() -> nn.Module:
    from transformers import SqueezeBertConfig, SqueezeBertModel

    config = SqueezeBertConfig(num_hidden_layers=2, hidden_size=64, embedding_size=64, num_attention_heads=2,
                               intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.1,
                               attention_probs_dropout_prob=0.1, **_TEXT)
    return SqueezeBertModel(config)


def _fnet() -> nn.Module:
    from transformers import FNetConfig, FNetModel

    config = FNetConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, max_position_embeddings=64,
                        hidden_dropout_prob=0.1, use_tpu_fourier_optimizations=False, vocab_size=VOCAB)
    return FNetModel(config)


def _modernbert() -> nn.Module:
    from transformers import ModernBertConfig, ModernBertModel

    config = ModernBertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=2, intermediate_size=128,
                              max_position_embeddings=64, local_attention=4, attention_dropout=0.1,
                              embedding_dropout=0.1, mlp_dropout=0.1, pad_token_id=0, bos_token_id=1,
                              eos_token_id=2, cls_token_id=1, sep_token_id=2, **_TEXT)
    return ModernBertModel(config)


def _bert_mlm() -> nn.Module:
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig(**_BERTLIKE, use_cache=False, **_TEXT))


def _bert_sdpa() -> nn.Module:
    """BERT with SDPA attention: its dropout is the ``dropout_p`` argument of scaled_dot_product_attention."""
    from transformers import BertConfig, BertModel

    return BertModel(BertConfig(**_BERTLIKE, use_cache=False, vocab_size=VOCAB, attn_implementation="sdpa"))


def _bert_seqcls() -> nn.Module:
    from transformers import BertConfig, BertForSequenceClassification

    return BertForSequenceClassification(BertConfig(**_BERTLIKE, num_labels=3, use_cache=False, **_TEXT))



# --------------------------------------------------------------------------------- encoder-decoders


def _bart() -> nn.Module:
    from transformers import BartConfig, BartForConditionalGeneration

    return BartForConditionalGeneration(BartConfig(**_BARTLIKE))


def _mbart() -> nn.Module:
    from transformers import MBartConfig, MBartModel

    return MBartModel(MBartConfig(**_BARTLIKE))


def _marian() -> nn.Module:
    from transformers import MarianConfig, MarianMTModel

    config = MarianConfig(**{**_BARTLIKE, "pad_token_id": 0, "decoder_start_token_id": 0},
                          decoder_vocab_size=VOCAB)
    return MarianMTModel(config)


def _pegasus() -> nn.Module:
    from transformers import PegasusConfig, PegasusModel

    return PegasusModel(PegasusConfig(**{**_BARTLIKE, "pad_token_id": 0, "eos_token_id": 1,
                                         "decoder_start_token_id": 0}))


def _t5() -> nn.Module:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(d_model=64, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=2, d_kv=32,
                      dropout_rate=0.1, use_cache=False, decoder_start_token_id=0, pad_token_id=0,
                      eos_token_id=1, **_TEXT)
    return T5ForConditionalGeneration(config)


def _mt5() -> nn.Module:
    from transformers import MT5Config, MT5Model

    config = MT5Config(d_model=64, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=2, d_kv=32,
                       dropout_rate=0.1, use_cache=False, decoder_start_token_id=0, pad_token_id=0,
                       eos_token_id=1, **_TEXT)
    return MT5Model(config)




def _whisper() -> nn.Module:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                           decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=80,
                           max_source_positions=WHISPER_POSITIONS, max_target_positions=16, dropout=0.1,
                           attention_dropout=0.1, activation_dropout=0.1, use_cache=False, pad_token_id=0,
                           bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, begin_suppress_tokens=None,
                           apply_spec_augment=False, **_TEXT)
    return WhisperForConditionalGeneration(config)


def _longformer() -> nn.Module:
    from transformers import LongformerConfig, LongformerModel

    config = LongformerConfig(**_BERTLIKE, attention_window=4, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                              **_TEXT)
    return LongformerModel(config)


def _funnel() -> nn.Module:
    from transformers import FunnelConfig, FunnelModel

    config = FunnelConfig(block_sizes=[1, 1], block_repeats=None, num_decoder_layers=1, d_model=64, n_head=2,
                          d_head=32, d_inner=128, hidden_dropout=0.1, attention_dropout=0.1,
                          activation_dropout=0.1, max_position_embeddings=64, **_TEXT)
    return FunnelModel(config)


def _llama_seqcls() -> nn.Module:
    from transformers import LlamaConfig, LlamaForSequenceClassification

    return LlamaForSequenceClassification(LlamaConfig(**_LLAMALIKE, num_labels=3, pad_token_id=0, **_TEXT))


def _m2m100() -> nn.Module:
    from transformers import M2M100Config, M2M100Model

    return M2M100Model(M2M100Config(**_BARTLIKE, encoder_layerdrop=0.0, decoder_layerdrop=0.0))


def _blenderbot_small() -> nn.Module:
    from transformers import BlenderbotSmallConfig, BlenderbotSmallModel

    return BlenderbotSmallModel(BlenderbotSmallConfig(**_BARTLIKE))
