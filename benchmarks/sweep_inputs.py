"""Inputs of a shrunk ``transformers`` model for the registry sweep (:mod:`benchmarks.sweep_transformers`).

The inputs are made from the names of the model's forward parameters and from its configuration: token ids drawn
below the special tokens, images of the vision configuration's size (or flattened patches with their
``grid_thw`` for the models that take them), videos, audio, time series. A multimodal model gets as many image
placeholder tokens as its own ``get_image_features`` returns features for the image. Several candidates are made,
richest first: :func:`benchmarks.sweep_transformers.transformers_model` keeps the first that runs.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

#: Length of the random text.
SEQUENCE = 8
#: Audio samples of a raw waveform input (a multiple of the usual hop lengths: 96, 160, 256, 320, 480, 1920).
SAMPLES = 3840
#: Frames of a video input (when the configuration does not say).
FRAMES = 2


def run(model: Any, kwargs: dict[str, Any]) -> Any:
    """``model(**kwargs)`` without gradients, seeded."""
    import torch

    torch.manual_seed(0)
    with torch.no_grad():
        return model(**kwargs)


def _field(config: Any, *names: str, default: Any = None) -> Any:
    """The first of ``names`` set on ``config`` or its vision / audio / text / encoder sub-configuration."""
    for holder in (config, *(getattr(config, s, None) for s in ("vision_config", "audio_config", "text_config",
                                                                "encoder_config"))):
        for name in names:
            try:
                value = getattr(holder, name, None) if holder is not None else None
            except RuntimeError:  # a per-layer attribute
                value = None
            if value is not None:
                return value
    return default


def _side(config: Any) -> int:
    side = _field(config, "image_size", default=32)
    side = side[0] if isinstance(side, (list, tuple)) else side.get("height", 32) if isinstance(side, dict) else side
    return side if isinstance(side, int) else 32


def _text(config: Any) -> Any:
    import torch

    from benchmarks.sweep_transformers import RESERVED, text_vocab

    vocab = text_vocab(config) or 128
    high = vocab - RESERVED if vocab > 2 * RESERVED else vocab
    return torch.randint(0, min(high, 128 - RESERVED), (1, SEQUENCE))


def _image(config: Any, params: dict[str, Any], stacked: bool = False) -> dict[str, Any]:
    """An image: ``(1, channels, side, side)``, or patches and their grid for the models taking ``grid_thw``
    (Qwen-VL style: flattened ``(patches, channels * temporal patch * patch²)``, or ``stacked`` unflattened)."""
    import torch

    channels = _field(config, "num_channels", "in_channels", "in_chans", default=3)
    grid_name = next((n for n in ("image_grid_thw", "grid_thw") if n in params), None)
    if "spatial_shapes" in params:  # NaFlex (SigLIP 2): a sequence of flattened patches, its shape and its mask
        patch = _field(config, "patch_size", default=16)
        return {"pixel_values": torch.randn(1, 16, channels * patch * patch),
                "spatial_shapes": torch.tensor([[4, 4]]), "pixel_attention_mask": torch.ones(1, 16, dtype=torch.long)}
    if grid_name is None:
        side = _side(config)
        if "pixel_values" not in params and "pixel_values_videos" in params:
            return {"pixel_values_videos": torch.randn(1, _frames(config), channels, side, side)}
        return {"pixel_values": torch.randn(1, channels, side, side)}
    merge = _field(config, "spatial_merge_size", "merge_size", default=2)
    patch = _field(config, "patch_size", default=14)
    temporal = _field(config, "temporal_patch_size", default=1)
    grid = torch.tensor([[1, 2 * merge, 2 * merge]])
    shape = (channels, temporal, patch, patch) if temporal > 1 else (channels, patch, patch)
    patches = torch.randn(int(grid.prod()), *shape)
    name = "hidden_states" if "hidden_states" in params and "pixel_values" not in params else "pixel_values"
    return {name: patches if stacked else patches.flatten(1), grid_name: grid}


def _frames(config: Any) -> int:
    frames = _field(config, "num_frames", "frames_per_clip", default=FRAMES)
    return frames if isinstance(frames, int) else FRAMES


def _video(config: Any, image: dict[str, Any]) -> dict[str, Any]:
    """``image``'s pixel values as a video of the configuration's number of frames."""
    import torch

    _, channels, height, width = image["pixel_values"].shape
    return {"pixel_values": torch.randn(1, _frames(config), channels, height, width)}


def _image_tokens(model: Any, image: dict[str, Any]) -> int | None:
    """How many features the model's ``get_image_features`` makes of ``image`` (``None`` when it cannot say)."""
    import torch
    import torch.utils._pytree as pytree

    probe = getattr(model, "get_image_features", None)
    if probe is None:
        return None
    try:
        with torch.no_grad():
            out = probe(**image)
    except Exception:  # noqa: BLE001 - no count
        return None
    out = getattr(out, "pooler_output", None) if getattr(out, "pooler_output", None) is not None else \
        getattr(out, "last_hidden_state", out)
    leaves = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.dim() >= 2]
    return sum(t.numel() // t.shape[-1] for t in leaves) or None


def _audio(model: Any, config: Any, main: str) -> list[dict[str, Any]]:
    """Audio inputs: a waveform, or mel features in either layout."""
    import torch

    params = dict(inspect.signature(model.forward).parameters)
    if main == "input_values":
        return [_masks({"input_values": torch.randn(1, SAMPLES)}, params, SAMPLES),
                _masks({"input_values": torch.randn(1, 1, SAMPLES)}, params, SAMPLES)]
    bins = _field(config, "num_mel_bins", "feature_size", "input_feat_size", "n_mels", default=80)
    frames = 2 * (_field(config, "max_source_positions", default=32) or 32)
    frames = min(frames, 3000) if isinstance(frames, int) else 64
    return [_masks({main: torch.randn(1, bins, frames)}, params, frames),
            _masks({main: torch.randn(1, frames, bins)}, params, frames),
            _masks({main: torch.randn(1, bins, 200)}, params, 200)]  # windows of 100 frames


def _masks(kwargs: dict[str, Any], params: dict[str, Any], length: int) -> dict[str, Any]:
    """``kwargs`` with all-ones masks of ``length`` for the required ``*_mask`` parameters, and decoder token ids
    when the model takes them."""
    import torch

    out = dict(kwargs)
    for name, param in params.items():
        if name.endswith("_mask") and param.default is inspect.Parameter.empty and name not in out:
            out[name] = torch.ones(1, length, dtype=torch.long)
    if "decoder_input_ids" in params and "decoder_input_ids" not in out:
        out["decoder_input_ids"] = torch.randint(0, 64, (1, SEQUENCE))
    return out


def _series(config: Any, params: dict[str, Any]) -> dict[str, Any]:
    """A time series: ``past_values`` of the configuration's context length and channels."""
    import torch

    length = _field(config, "context_length", "context_len", "max_context", default=32)
    length = length if isinstance(length, int) and length < 4096 else 32
    length += max(_field(config, "lags_sequence", default=[0]) or [0])  # lagged values reach back further
    channels = _field(config, "num_input_channels", "input_size", default=1)
    series = torch.randn(1, length, channels) if channels != 1 or "num_input_channels" in str(config) else \
        torch.randn(1, length)
    out = {"past_values": series}
    for name, param in params.items():  # the other required past inputs: observed masks, time features
        if name.startswith("past_") and name not in out and param.default is inspect.Parameter.empty:
            out[name] = torch.ones_like(series) if name.endswith("mask") else \
                torch.randn(1, length, _field(config, "num_time_features", default=1))
    return out


def input_candidates(model: Any, config: Any) -> Iterator[dict[str, Any]]:
    """Keyword inputs for ``model``, richest first: text with image placeholder tokens and the image, the main
    input alone (with the masks it requires), text alone."""
    import torch

    main = getattr(model, "main_input_name", "input_ids")
    params = dict(inspect.signature(model.forward).parameters)
    text = "input_ids" in params
    vision = any(n in params for n in ("pixel_values", "pixel_values_videos")) or "grid_thw" in params
    if text and vision:
        image = _image(config, params)
        ids = _text(config)
        token = _field(config, "image_token_id", "image_token_index")
        count = _image_tokens(model, image) if isinstance(token, int) else None
        if count:
            ids = torch.cat([torch.full((1, count), token), ids], dim=1)
        extra: dict[str, Any] = {}
        if "mm_token_type_ids" in params and isinstance(token, int):
            extra["mm_token_type_ids"] = (ids == token).int()
        if "image_sizes" in params:
            extra["image_sizes"] = torch.tensor([[_side(config), _side(config)]])
        yield _masks({"input_ids": ids, **image, **extra}, params, ids.shape[1])
        yield _masks({"input_ids": ids, **image}, params, ids.shape[1])
        if image.get("pixel_values", torch.empty(0)).dim() == 4:
            yield _masks({"input_ids": ids, **_video(config, image)}, params, ids.shape[1])
    if main in ("input_values", "input_features", "audio_mel"):
        yield from _audio(model, config, main)
    elif main == "past_values":
        yield _series(config, params)
    elif main in ("pixel_values", "pixel_values_videos") or (vision and not text):
        image = _image(config, params)
        yield _masks(image, params, 1)
        yield _masks(_image(config, params, stacked=True), params, 1)
        if image.get("pixel_values", torch.empty(0)).dim() == 4:
            yield _masks(_video(config, image), params, 1)
    if text:
        yield _masks({"input_ids": _text(config)}, params, SEQUENCE)


__all__ = ["SEQUENCE", "input_candidates", "run"]
