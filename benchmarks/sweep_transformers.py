"""Every ``transformers`` model type at a small size, for the registry sweep (:mod:`benchmarks.sweep`).

A model type's default configuration is shrunk generically, and the first of a cascade of candidate
configurations whose model builds and runs in eager mode is kept:

1. ``small``: every integer field that sizes the model (:data:`SMALL`: hidden size, layers, heads, feed-forward
   width, vocabulary, experts, image size...) set to a small value on the configuration and on its text / vision
   / audio sub-configurations, then the relations between fields made consistent again (:func:`_consistent`);
2. ``small, first layers``: the same, the per-layer lists (``layer_types``...) cut to their first layers instead
   of keeping one layer of each kind;
3. ``small, rebuilt``: the same values passed to the configuration class, so that it derives its dependent fields
   (per-layer lists, head sizes, rope sections...) itself;
4. ``shallow``: only the depth (:data:`DEPTH`) and the vocabulary shrunk, the widths kept;
5. ``shallow, rebuilt``: the same through the configuration class.

Candidates over :data:`MAX_PARAMS` parameters are passed over.

Inputs are made from the model's forward signature and configuration (:mod:`benchmarks.sweep_inputs`), also as a
cascade (all the inputs a multimodal model takes, then its main input alone, then text alone). A type none of
whose candidates runs is reported as ``eager failed`` with the error of the first candidate: the sweep counts what
converts among what runs, and says which types it could not build.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator
from typing import Any

from benchmarks.sweep_inputs import input_candidates, run

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
    "out_hidden_size": 32, "num_queries": 10,
}
#: Fields of :data:`SMALL` also set when the default configuration leaves them ``None`` (for the class to derive).
DERIVED = ("head_dim", "num_key_value_heads", "vocab_size", "intermediate_size", "num_experts",
           "moe_intermediate_size", "num_experts_per_tok")
#: The fields of :data:`SMALL` that count layers: the only ones the ``shallow`` candidates shrink (with the
#: vocabulary).
DEPTH = ("num_hidden_layers", "encoder_layers", "decoder_layers", "num_layers", "n_layer", "num_decoder_layers",
         "num_encoder_layers", "vocab_size")
#: Sub-configurations shrunk the same way.
SUBCONFIGS = ("text_config", "vision_config", "audio_config", "encoder_config", "decoder_config")
#: Token ids at the top of the vocabulary kept for special tokens (image, video, audio placeholders...).
RESERVED = 32
#: Special tokens of plain text, kept where they are when inside the vocabulary.
TEXT_TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "sep_token_id",
               "cls_token_id", "mask_token_id", "unk_token_id")
#: Mamba-2 (heads, head size) fields, as the configurations name them.
MAMBA_HEADS = (("mamba_n_heads", "mamba_d_head"), ("n_mamba_heads", "mamba_headdim"), ("num_heads", "head_dim"))
#: Candidates over this many parameters are passed over (the sweep's ``--max-params`` default).
MAX_PARAMS = 1e8


def transformers_names() -> list[str]:
    """Every model type transformers maps to a base model class (``AutoModel``), sorted."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return sorted(MODEL_MAPPING_NAMES)


# ------------------------------------------------------------------------------------------ configurations


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _set(config: Any, field: str, value: Any) -> None:
    """``setattr`` that passes over read-only properties and per-layer attributes."""
    with contextlib.suppress(AttributeError, RuntimeError):
        setattr(config, field, value)


def _get(config: Any, field: str) -> Any:
    """``getattr`` that reads a per-layer attribute transformers refuses to read globally as absent."""
    try:
        return getattr(config, field, None)
    except RuntimeError:  # AmbiguousGlobalPerLayerAttributeError
        return None


def _subconfigs(config: Any) -> list[Any]:
    return [sub for field in SUBCONFIGS if hasattr(sub := _get(config, field), "to_dict")]


def _sample(values: list[Any], n: int) -> list[Any]:
    """``n`` of a per-layer list: the first layer of each kind first (so that every kind of layer stays, e.g.
    sliding and full attention), then the first layers."""
    try:
        firsts = sorted({values.index(v) for v in values})
    except TypeError:  # unhashable values
        firsts = []
    chosen = (firsts + [i for i in range(len(values)) if i not in firsts])[:n]
    return [values[i] for i in sorted(chosen)]


def _shrink(config: Any, fields: dict[str, int], kinds: bool = True, depth: int = 0) -> None:
    """Set ``fields`` on ``config`` and its sub-configurations where they are integers; truncate the per-layer
    lists (``layer_types``...) to the new number of layers."""
    layers = _get(config, "num_hidden_layers")
    for field, value in fields.items():
        current = _get(config, field)
        if _integer(current) or (current is None and field in DERIVED and hasattr(config, field)):
            _set(config, field, value)
    new_layers = _get(config, "num_hidden_layers")
    if _integer(layers) and _integer(new_layers) and new_layers < layers:
        for field, value in list(vars(config).items()):  # per layer (per stage), or the stem and per stage
            if isinstance(value, (list, tuple)) and len(value) == layers:
                kept = _sample(list(value), new_layers) if kinds else value[:new_layers]
                _set(config, field, type(value)(kept))
            elif isinstance(value, (list, tuple)) and len(value) == layers + 1 and field.endswith("names"):
                _set(config, field, type(value)(value[:new_layers + 1]))
    if hasattr(config, "use_cache"):
        config.use_cache = False
    if depth < 2:
        for sub in _subconfigs(config):
            _shrink(sub, fields, kinds, depth + 1)


def _consistent(config: Any, depth: int = 0) -> None:
    """Restore relations between fields the shrinking broke: key-value heads dividing the heads, experts per
    token at most the experts, rotary dimensions within the head, special tokens inside the vocabulary."""
    heads, kv = _get(config, "num_attention_heads"), _get(config, "num_key_value_heads")
    if _integer(heads) and _integer(kv) and (kv > heads or heads % kv):
        _set(config, "num_key_value_heads", heads)
    experts = _get(config, "num_experts") or _get(config, "n_routed_experts")
    top_k = _get(config, "num_experts_per_tok")
    if _integer(experts) and _integer(top_k) and top_k > experts:
        _set(config, "num_experts_per_tok", experts)
    if _integer(experts) and _integer(_get(config, "n_group")) and experts % _get(config, "n_group"):
        _set(config, "n_group", 1)
        _set(config, "topk_group", 1)
    _no_timm(config)
    _rotary(config)
    _mamba(config)
    if hasattr(config, "prediction_length") and _get(config, "prediction_length") is None:  # time series
        _set(config, "prediction_length", 4)
        _set(config, "context_length", _get(config, "context_length") or 4)
    _tokens_inside(config, text_vocab(config))
    if depth < 2:
        for sub in _subconfigs(config):
            _consistent(sub, depth + 1)


def _no_timm(config: Any) -> None:
    """A timm backbone (timm is not installed beside transformers) replaced by transformers' own small ResNet
    with the same output stages."""
    import importlib.util

    backbone = _get(config, "backbone_config")
    if getattr(backbone, "model_type", None) != "timm_backbone" or importlib.util.find_spec("timm") is not None:
        return
    from transformers import ResNetConfig

    indices = list(getattr(backbone, "out_indices", None) or [1, 2, 3, 4])
    _set(config, "backbone_config", ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 64, 128], depths=[1] * 4,
                                                 out_indices=indices))
    _set(config, "use_timm_backbone", False)


def _mamba(config: Any) -> None:
    """Mamba-2 heads that tile the expanded width: ``heads * head size == expand * hidden size``."""
    hidden, expand = _get(config, "hidden_size"), _get(config, "mamba_expand") or _get(config, "expand")
    if not (_integer(hidden) and isinstance(expand, (int, float))):
        return
    inner = int(expand * hidden)
    if _integer(_get(config, "mamba_d_ssm")):
        _set(config, "mamba_d_ssm", inner)
    for heads, size in MAMBA_HEADS:
        count, width = _get(config, heads), _get(config, size)
        if _integer(count) and (heads != "num_heads" or _get(config, "state_size")) and \
                not (_integer(width) and count * width == inner):
            _set(config, heads, 2)
            _set(config, size, inner // 2)
            for groups in ("n_groups", "mamba_n_groups", "mamba_ngroups"):
                if _integer(_get(config, groups)) and 2 % _get(config, groups):
                    _set(config, groups, 1)
            return


def _head_dim(config: Any) -> int | None:
    """The attention head size: ``head_dim``, or the hidden size over the heads."""
    head_dim, hidden, heads = (_get(config, f) for f in ("head_dim", "hidden_size", "num_attention_heads"))
    if _integer(head_dim):
        return head_dim
    return hidden // heads if _integer(hidden) and _integer(heads) and heads else None


def _uses(config: Any, word: str) -> bool:
    """Whether the modeling module of ``config``'s class mentions ``word``."""
    import importlib
    import inspect

    try:
        module = importlib.import_module(type(config).__module__.replace(".configuration_", ".modeling_"))
        return word in inspect.getsource(module)
    except Exception:  # noqa: BLE001 - no modeling module of that name
        return False


def _rotary(config: Any) -> None:
    """Rotary dimensions consistent with the shrunk head: multi-head latent attention's head size is its rope
    part, a partial ``rotary_dim`` fits the head, multimodal rope sections (``mrope_section``) sum to half the
    rotary dimension."""
    parameters = _get(config, "rope_parameters")
    factor = _get(config, "partial_rotary_factor") or 1.0
    if isinstance(parameters, dict):
        factor = parameters.get("partial_rotary_factor", factor)
    rope, nope = _get(config, "qk_rope_head_dim"), _get(config, "qk_nope_head_dim")
    latent = _integer(rope) and _integer(nope)
    if latent:  # the rotary part of each head is the rope part (HY-V4-VL's sections sum to its half)
        _set(config, "head_dim", int(rope / factor))
        _set(config, "qk_head_dim", rope + nope)
    head = rope if latent else _head_dim(config)
    if not _integer(head):
        return
    if not latent and _integer(_get(config, "rotary_dim")) and _get(config, "rotary_dim") > head:
        _set(config, "rotary_dim", head)
    if isinstance(parameters, dict) and ("mrope_section" in parameters or _uses(config, "mrope_section")):
        half = int(head * (1.0 if latent else factor)) // 2
        parameters["mrope_section"] = [half - 2 * (3 * half // 8), 3 * half // 8, 3 * half // 8]


def text_vocab(config: Any) -> int | None:
    """The vocabulary of the model's text embedding (its text sub-configuration's, if it has one)."""
    vocab = _get(_get(config, "text_config") or config, "vocab_size")
    return vocab if _integer(vocab) else _get(config, "vocab_size") if _integer(_get(config, "vocab_size")) else None


def _tokens_inside(config: Any, vocab: int | None) -> None:
    """Text special tokens outside the vocabulary become 0; every other ``*_token_id`` / ``*_token_index``
    (image, video, audio placeholders...) gets its own id among the top :data:`RESERVED` of the vocabulary,
    which the random text never draws."""
    if not _integer(vocab) or vocab <= 2 * RESERVED:
        return
    moved: dict[int, int] = {}
    for field, value in sorted(vars(config).items()):
        if not _integer(value) or not field.endswith(("_token_id", "_token_index")) or value < 0:
            continue
        if field in TEXT_TOKENS:
            if value >= vocab:
                _set(config, field, 0)
            continue
        if value not in moved and len(moved) < RESERVED:
            moved[value] = vocab - 1 - len(moved)
        if value in moved:
            _set(config, field, moved[value])


def _rebuilt(config: Any) -> Any:
    """``config`` through its class again: the shrunk values as keyword arguments, the per-layer fields left out
    so that the class derives them."""
    data = config.to_dict()
    layers = data.get("num_hidden_layers")
    for key in ("layer_types", "per_layer_config", "head_dim", "mlp_layer_types"):
        data.pop(key, None)
    for sub in SUBCONFIGS:
        if isinstance(data.get(sub), dict):
            for key in ("layer_types", "per_layer_config"):
                data[sub].pop(key, None)
    for key, value in list(data.items()):
        if isinstance(value, list) and _integer(layers) and len(value) != layers and key.endswith("_types"):
            data.pop(key)
    return type(config)(**data)


def _default(model_type: str) -> Any:
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[model_type]()


def _small(model_type: str, kinds: bool = True) -> Any:
    config = _default(model_type)
    _shrink(config, SMALL, kinds)
    _consistent(config)
    return config


def _small_first_layers(model_type: str) -> Any:
    return _small(model_type, kinds=False)


def _shallow(model_type: str) -> Any:
    config = _default(model_type)
    _shrink(config, {k: v for k, v in SMALL.items() if k in DEPTH})
    _consistent(config)
    return config


def _rebuilt_of(make: Callable[[str], Any]) -> Callable[[str], Any]:
    def rebuilt(model_type: str) -> Any:
        config = _rebuilt(make(model_type))
        _consistent(config)
        return config

    return rebuilt


#: The candidate configurations, in the order tried.
CANDIDATES: dict[str, Callable[[str], Any]] = {
    "small": _small, "small, first layers": _small_first_layers, "small, rebuilt": _rebuilt_of(_small),
    "shallow": _shallow, "shallow, rebuilt": _rebuilt_of(_shallow),
}


def candidates(model_type: str) -> Iterator[tuple[str, Any]]:
    """The candidate configurations of ``model_type`` that can be made, as ``(label, config)``."""
    for label, make in CANDIDATES.items():
        try:
            yield label, make(model_type)
        except Exception:  # noqa: BLE001 - the next candidate
            continue


# ---------------------------------------------------------------------------------------------- the models


def _params(config: Any) -> int | None:
    import torch
    from transformers import AutoModel

    try:
        with torch.device("meta"):
            model = AutoModel.from_config(copy.deepcopy(config))
    except Exception:  # noqa: BLE001 - the build proper reports it
        return None
    return sum(p.numel() for p in model.parameters())


def transformers_params(model_type: str) -> int | None:
    """Parameters of the smallest candidate model of ``model_type`` built on ``meta`` (``None`` if none builds)."""
    sizes = [params for _, config in candidates(model_type) if (params := _params(config)) is not None]
    return min(sizes, default=None)


def transformers_default_on_meta(model_type: str) -> Any:
    """The model of ``model_type``'s default configuration (its real dimensions), built on ``meta``: what the
    shrunk model's shares are measured against again (:mod:`benchmarks.sweep_opaque`)."""
    import torch
    from transformers import AutoModel

    with torch.device("meta"):
        return AutoModel.from_config(_default(model_type))


def transformers_model(model_type: str, max_params: float = MAX_PARAMS) -> tuple[Any, tuple, dict]:
    """The first candidate model of ``model_type`` (random weights) that runs in eager mode on one of its input
    candidates, with those inputs as keyword arguments.

    Raises:
        Exception: the error of the first candidate, when none runs.
    """
    import torch
    from transformers import AutoModel

    first: Exception | None = None
    for _, config in candidates(model_type):
        params = _params(config)
        if params is not None and params > max_params:
            continue
        try:
            torch.manual_seed(0)
            model = AutoModel.from_config(config).eval()
        except Exception as error:  # noqa: BLE001 - the next candidate
            first = first or error
            continue
        for kwargs in input_candidates(model, config):
            try:
                run(model, kwargs)
            except Exception as error:  # noqa: BLE001 - the next candidate
                first = first or error
                continue
            return model, (), kwargs
    raise first or ValueError(f"no candidate configuration of {model_type!r} builds")


__all__ = ["candidates", "transformers_default_on_meta", "transformers_model", "transformers_names",
           "transformers_params"]
