"""Converting a transformers decoder (``*ForCausalLM``) for ``generate()``: the call of a decoding step.

``generate()`` calls the model as ``model(input_ids=, cache=, position_ids=, attention_mask=, logits_to_keep=1)``
(``past_key_values=`` before transformers 5.24; the step is converted with the name the model's ``forward`` takes)
at every step (the position ids counted from the attention mask, so a left-padded row starts at 0): first the prompt
with an empty ``DynamicCache``, then one token at a time with the cache the previous step returned.
:func:`convert_for_generation` converts exactly that call, with a past of a few tokens and symbolic sizes (batch,
new tokens, past tokens), so that one IR runs the prompt (past of 0 tokens) and every later step; the cache goes in
and out of the graph as its key and value tensors (transformers' pytree form of ``DynamicCache``,
:mod:`common.caches`), and each layer's ``torch.cat`` of the past and the new keys is an op of its attention's
graph. ``ir2torch.generation.for_generation`` gives the rebuild a ``generate()``."""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.export import Dim

from common.caches import (
    CACHE_NAMES,
    cache_name,
    caches_unflattened_without_copies,
    check_dynamic_cache,
    output_cache_field,
)
from common.errors import ConversionError
from common.ir import IR

#: Example sizes of the traced step: batch, new tokens, past tokens (none is 0 or 1: export specializes those).
EXAMPLE_BATCH, EXAMPLE_NEW, EXAMPLE_PAST = 2, 3, 4


def _max_positions(config: Any) -> int | None:
    """The longest sequence the config allows: its position table, and the sliding window when it has one (past
    the window, transformers' sliding cache layers drop tokens, which their pytree form does not carry)."""
    limits = [getattr(config, name, None) for name in ("max_position_embeddings", "n_positions", "sliding_window")]
    known = [int(v) for v in limits if isinstance(v, int) and v > 0]
    return min(known) if known else None


def generation_call(model: nn.Module, max_length: int | None = None,
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The example keyword arguments and ``dynamic_shapes`` of a decoding step of ``model``.

    ``max_length``: the longest sequence (prompt and generated tokens, padding included) the IR is converted for;
    default: the config's position table or sliding window, else 4096. The past is the model's own cache of a
    few example tokens (so its shapes and layer kinds are the model's).

    Raises:
        ConversionError: the model has no ``config`` with a vocabulary, or its cache is not a ``DynamicCache``.
    """
    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", None)
    if not isinstance(vocab, int) or vocab < 1:
        raise ConversionError(f"{type(model).__name__} has no transformers config with a vocab_size: "
                              "convert_for_generation converts transformers decoders (*ForCausalLM)")
    limit = max_length or _max_positions(config) or 4096
    if limit < EXAMPLE_NEW + EXAMPLE_PAST + 1:
        raise ConversionError(f"max_length {limit} is shorter than the traced example "
                              f"({EXAMPLE_PAST} past and {EXAMPLE_NEW} new tokens)")
    generator = torch.Generator().manual_seed(0)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    past_ids = torch.randint(0, vocab, (EXAMPLE_BATCH, EXAMPLE_PAST), generator=generator).to(device)
    name = cache_name(inspect.signature(model.forward).parameters)
    if name is None:
        raise ConversionError(f"{type(model).__name__}.forward takes no cache argument ({' or '.join(CACHE_NAMES)}): "
                              "convert_for_generation converts transformers decoders (*ForCausalLM)")
    with torch.no_grad():
        output = model(input_ids=past_ids, use_cache=True)
        past = getattr(output, output_cache_field(output))
    if type(past).__name__ != "DynamicCache":
        raise ConversionError(f"{type(model).__name__} returns a {type(past).__name__}, not a DynamicCache: "
                              "only the DynamicCache is carried by an IR (common.caches)")
    check_dynamic_cache(past)
    ids = torch.randint(0, vocab, (EXAMPLE_BATCH, EXAMPLE_NEW), generator=generator).to(device)
    mask = torch.ones(EXAMPLE_BATCH, EXAMPLE_PAST + EXAMPLE_NEW, dtype=torch.long, device=device)
    mask[1, :2] = 0  # a left-padded row: the mask's padding path is traced
    positions = _positions(mask)[:, -EXAMPLE_NEW:].contiguous()  # a slice's strides would be traced
    batch = Dim("batch", min=1, max=max(limit, 64))
    new = Dim("new_tokens", min=1, max=limit - 1)
    seen = Dim("past_tokens", min=0, max=limit - 1)
    layers = len(past.layers)
    per_tensor = {0: batch, 2: seen}
    dynamic = {"input_ids": {0: batch, 1: new},
               name: [[per_tensor] * layers, [per_tensor] * layers],
               "position_ids": {0: batch, 1: new},
               "attention_mask": {0: batch, 1: Dim.AUTO},
               "logits_to_keep": None}
    return {"input_ids": ids, name: past, "position_ids": positions, "attention_mask": mask,
            "logits_to_keep": 1}, dynamic


def _positions(mask: torch.Tensor) -> torch.Tensor:
    """The position ids ``generate()`` computes from an attention mask (padding-aware; 1 on padding)."""
    positions = mask.long().cumsum(-1) - 1
    return positions.masked_fill(mask == 0, 1)


def convert_for_generation(model: nn.Module, *, max_length: int | None = None,
                           convert_kwargs: Mapping[str, Any] | None = None) -> IR:
    """The IR of a decoding step of transformers decoder ``model`` (see the module's text), for
    ``ir2torch.generation.for_generation(rebuilt, model.config).generate(...)``.

    ``max_length``: see :func:`generation_call`; ``convert_kwargs``: further arguments of ``torch2ir.convert``
    (``trace_once``, ``opaque``, ...). The model is converted in eval mode (generation's).

    Raises:
        ConversionError: see :func:`generation_call`, and whatever ``torch2ir.convert`` refuses.
    """
    from torch2ir.converter import convert

    kwargs, dynamic = generation_call(model, max_length)
    options = dict(convert_kwargs or {})
    with caches_unflattened_without_copies():  # no copy of the past in the graph (common.caches)
        return _convert(convert, model, kwargs, dynamic, options)


def _convert(convert: Any, model: nn.Module, kwargs: dict[str, Any], dynamic: Any, options: dict[str, Any]) -> IR:
    """``convert(model, (), kwargs, dynamic_shapes=dynamic, **options)``, once more with the ranges export proposes
    when the traced code bounds a size more tightly than the config says."""
    try:
        return convert(model, (), kwargs, dynamic_shapes=dynamic, **options)
    except ConversionError as exc:
        # the traced code bounds a size more tightly than the config says (a sliding window's mask): once, with
        # the ranges export proposes (the rebuild then refuses sizes outside them)
        cause = str(exc.__cause__ or "")
        if "Suggested fixes" not in cause:
            raise
        bounds = {name: int(bound) for name, bound in _SUGGESTED_MAX.findall(cause.partition("Suggested fixes:")[2])}
        if not bounds:
            raise
    return convert(model, (), kwargs, dynamic_shapes=_bounded(dynamic, bounds), **options)


#: A bound ``torch.export`` suggests for a dim of :func:`generation_call` (``past_tokens = Dim('past_tokens',
#: max=60)``): only the ``max``, read as an integer (its ``min`` reflects the example's 0/1 specialization).
_SUGGESTED_MAX = re.compile(r"^\s*(batch|new_tokens|past_tokens) = Dim\('\1'(?:, min=\d+)?, max=(\d+)\)\s*$",
                            re.MULTILINE)


def _bounded(dynamic: Any, bounds: Mapping[str, int]) -> Any:
    """``dynamic`` with each named ``Dim`` of ``bounds`` replaced by one of the same minimum and that maximum."""
    if isinstance(dynamic, dict):
        return {key: _bounded(value, bounds) for key, value in dynamic.items()}
    if isinstance(dynamic, list):
        return [_bounded(value, bounds) for value in dynamic]
    name = getattr(dynamic, "__name__", None)
    if name in bounds:
        return _dim(name, dynamic.min, min(bounds[name], dynamic.max))
    return dynamic


@functools.lru_cache(maxsize=64)
def _dim(name: str, low: int, high: int) -> Any:
    """One ``Dim`` object per name and range (every tensor of a size shares it)."""
    return Dim(name, min=low, max=high)


__all__ = ["convert_for_generation", "generation_call"]
