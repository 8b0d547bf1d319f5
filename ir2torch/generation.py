"""``generate()`` for a rebuilt transformers decoder: :func:`for_generation`.

A decoder converted by ``torch2ir.generation.convert_for_generation`` is rebuilt as a module whose ``forward`` runs
one decoding step: ``rebuilt(input_ids=, cache=, position_ids=, attention_mask=, logits_to_keep=1)``
(``past_key_values=`` when converted with transformers before 5.24: the name the IR records) returns the original
output type
(``CausalLMOutputWithPast``) holding the logits and a new ``DynamicCache``. :func:`for_generation` wraps it in a
transformers ``PreTrainedModel`` with ``GenerationMixin`` holding the original model's config, so that transformers'
own ``generate()`` (greedy, sampling, beam search, stopping criteria, ...) drives it. The wrapper's ``forward``

- has the original's generation arguments in its signature (``position_ids``, ``logits_to_keep``), so that
  ``generate()`` computes and passes them as it does to the original (padding-aware position ids, logits of the
  last token only), and passes the five arguments the IR was converted for; ``generate()``'s empty cache of the
  prompt step is given key/value tensors of 0 tokens (shapes from the rebuild's recorded inputs), a missing
  attention mask is all ones and missing position ids the cache's positions (what the original computes);
  ``logits_to_keep`` other than the converted ``1`` is refused by the rebuild's input guard;
- takes a ``StaticCache`` (``cache_implementation="static"``) of plain and sliding-window static layers: the
  tokens it holds are passed as a ``DynamicCache`` of the config's layers holding views of them, the rebuild runs
  on that (it reads its inputs, never writes them), and the new keys and values it returns are written into the
  ``StaticCache`` as transformers' own ``StaticLayer.update`` writes them (its ops where its code was read, itself
  elsewhere: :func:`_write_all`; the wrapper writes, never the rebuilt graph);
  ``generate()`` gets its ``StaticCache`` back;
- refuses, with :class:`~common.caches.UnsupportedCacheError` naming it, any other cache (quantized, offloaded,
  ...) or layer class, a sliding-window layer past its window, and an argument it cannot pass on
  (``inputs_embeds``, ...).

transformers is imported by :func:`for_generation` (its caller holds a transformers config); nothing here runs at
import.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import torch
from torch import nn

from common.caches import (
    CACHE_NAMES,
    UnsupportedCacheError,
    cache_name,
    check_dynamic_cache,
    output_cache_field,
    output_unflatten,
    static_cache_length,
)
from common.errors import BuildError, InputMismatchError

#: Arguments ``generate()`` passes that the wrapper checks and drops: ``{name: values it may have}``.
_DROPPED = {"use_cache": (True, None), "return_dict": (True, None), "output_attentions": (False, None),
            "output_hidden_states": (False, None)}


def _input_guard(rebuilt: nn.Module) -> Any:
    """The rebuild's input guard (its recorded input specs).

    Raises:
        BuildError: the rebuild records none.
    """
    meta = getattr(rebuilt, "meta", None)
    guard = meta.get("input_guard") if isinstance(meta, dict) else None
    if guard is None:
        raise BuildError("the rebuilt model records no input specs (rebuilt with guard_inputs=False, or not a "
                         "graph module): for_generation reads the shapes of the past from them",
                         hint="rebuild with ir2torch.convert(ir, state) (the default guard_inputs=True)")
    return guard


def _past_leaves(rebuilt: nn.Module) -> list[tuple[tuple[int | str, ...], torch.dtype]]:
    """``(shape, dtype)`` of each key/value tensor of the past the rebuild was converted for, in pytree order.

    Raises:
        BuildError: the rebuild has no input guard recording them, or was not converted with a past.
    """
    name = cache_argument(rebuilt)
    leaves = [(tuple(leaf.shape), leaf.dtype) for leaf in _input_guard(rebuilt).leaves
              if _argument(leaf.path) == name and leaf.kind == "tensor"]
    if not leaves:
        raise BuildError(f"the rebuilt model takes no {name} tensors: it was not converted for generation",
                         hint="convert with torch2ir.generation.convert_for_generation(model)")
    return leaves


def _argument(path: str) -> str:
    """The argument name a guard leaf's path starts with (``cache[0][1]`` -> ``cache``)."""
    end = next((i for i, c in enumerate(path) if not (c.isalnum() or c == "_")), len(path))
    return path[:end]


def cache_argument(rebuilt: nn.Module) -> str:
    """The name the rebuild takes its cache by (:data:`~common.caches.CACHE_NAMES`: the converting transformers'
    ``cache``, or ``past_key_values`` before 5.24), read from its input guard.

    Raises:
        BuildError: the rebuild records no input specs, or takes neither name.
    """
    name = cache_name(_argument(leaf.path) for leaf in _input_guard(rebuilt).leaves)
    if name is None:
        raise BuildError(f"the rebuilt model takes no cache ({' or '.join(CACHE_NAMES)}): it was not converted for "
                         "generation", hint="convert with torch2ir.generation.convert_for_generation(model)")
    return name


def _fill_empty(cache: Any, leaves: list[tuple[tuple[int | str, ...], torch.dtype]], batch: int,
                device: torch.device) -> None:
    """Give each layer of ``generate()``'s empty ``cache`` keys and values of 0 tokens (the prompt step)."""
    layers = len(cache.layers)
    if len(leaves) != 2 * layers:
        raise InputMismatchError(f"the cache has {layers} layers, the rebuilt model was converted for "
                                 f"{len(leaves) // 2}")
    empty = [torch.zeros([batch if i == 0 else (s if isinstance(s, int) else 0) for i, s in enumerate(shape)],
                         dtype=dtype, device=device) for shape, dtype in leaves]
    for i, layer in enumerate(cache.layers):
        layer.update(empty[i], empty[layers + i])


def forward_step(rebuilt: nn.Module, leaves: list[tuple[tuple[int | str, ...], torch.dtype]],
                 input_ids: torch.Tensor, past_key_values: Any, position_ids: torch.Tensor | None,
                 attention_mask: torch.Tensor | None, logits_to_keep: int, extra: dict[str, Any],
                 name: str = "past_key_values") -> Any:
    """One decoding step of ``rebuilt`` with ``generate()``'s arguments (see the module's text); ``name``: the
    argument the rebuild takes the cache by (:func:`cache_argument`)."""
    _check_extra(extra)
    kind = type(past_key_values).__name__
    if kind != "DynamicCache":
        raise UnsupportedCacheError(f"a rebuilt decoder takes a DynamicCache or a StaticCache, not a {kind}",
                                    hint="generate with the default cache or cache_implementation='static', and "
                                    "use_cache=True")
    check_dynamic_cache(past_key_values)
    if all(not getattr(layer, "is_initialized", False) for layer in past_key_values.layers):
        _fill_empty(past_key_values, leaves, input_ids.shape[0], input_ids.device)
    return _run(rebuilt, name, input_ids, past_key_values, past_key_values.get_seq_length(), position_ids,
                attention_mask, logits_to_keep)


def _check_extra(extra: dict[str, Any]) -> None:
    """Refuse an argument of ``generate()``'s other than :data:`_DROPPED` with the values it may have."""
    for key, value in extra.items():
        if key not in _DROPPED or not any(value is v or value == v for v in _DROPPED[key]):
            raise InputMismatchError(f"generate() passed {key}={type(value).__name__}, which the rebuilt decoder "
                                     "was not converted to take", hint="generate from input_ids only")


def _run(rebuilt: nn.Module, name: str, input_ids: torch.Tensor, cache: Any, seen: int,
         position_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, logits_to_keep: int) -> Any:
    """``rebuilt``'s call on a ``DynamicCache`` holding ``seen`` tokens, a missing mask and positions made as the
    original makes them."""
    batch, new = input_ids.shape
    if attention_mask is None:
        attention_mask = torch.ones(batch, seen + new, dtype=torch.long, device=input_ids.device)
    if position_ids is None:  # what the original computes without them: the cache's positions
        position_ids = torch.arange(seen, seen + new, device=input_ids.device).expand(batch, new)
    return rebuilt(input_ids=input_ids, **{name: cache}, position_ids=position_ids,
                   attention_mask=attention_mask, logits_to_keep=logits_to_keep)


def static_step(rebuilt: nn.Module, leaves: list[tuple[tuple[int | str, ...], torch.dtype]],
                layout: list[int | None], input_ids: torch.Tensor, cache: Any, position_ids: torch.Tensor | None,
                attention_mask: torch.Tensor | None, logits_to_keep: int, extra: dict[str, Any],
                name: str = "past_key_values") -> Any:
    """One decoding step of ``rebuilt`` with a ``StaticCache`` (see the module's text): the tokens it holds go in as
    a ``DynamicCache`` of ``layout`` (each layer's sliding window or ``None``, the model config's) holding views of
    them (the rebuild only reads its inputs), the step's new keys and values are written into ``cache`` as
    ``StaticLayer.update`` writes them (:func:`_write_all`), and the output holds ``cache`` in place of the rebuild's
    ``DynamicCache``."""
    from transformers import DynamicCache

    batch, new = input_ids.shape
    layers = cache.layers
    seen = static_cache_length(cache, new, batch)
    if len(layout) != len(layers):
        raise UnsupportedCacheError(f"the StaticCache has {len(layers)} layers, the model's config "
                                    f"{len(layout)}: it was made for another model")
    context = (["key_cache", "value_cache"], list(layout))
    if not seen:  # the prompt step: forward_step gives the empty layers tokens of 0
        output = forward_step(rebuilt, leaves, input_ids, output_unflatten(DynamicCache)([[], []], context),
                              position_ids, attention_mask, logits_to_keep, extra, name)
    else:  # ``narrow(2, 0, seen)``: the view ``[:, :, :seen]`` makes (the same slice), through one binding call
        _check_extra(extra)
        dynamic = output_unflatten(DynamicCache)([[layer.keys.narrow(2, 0, seen) for layer in layers],
                                                  [layer.values.narrow(2, 0, seen) for layer in layers]], context)
        check_dynamic_cache(dynamic)  # a sliding layer of a longer window than the config's would drop tokens
        output = _run(rebuilt, name, input_ids, dynamic, seen, position_ids, attention_mask, logits_to_keep)
    field = output_cache_field(output)
    returned = getattr(output, field)
    check_dynamic_cache(returned)  # a sliding layer that dropped tokens would lose new ones here
    if len(returned.layers) != len(layers):
        raise InputMismatchError(f"the rebuilt decoder returned a cache of {len(returned.layers)} layers, not "
                                 f"{len(layers)}")
    _write_all(layers, returned.layers, seen, new)  # what each layer's update does, in fewer ops
    setattr(output, field, cache)
    return output


#: transformers releases whose ``StaticLayer.update`` and ``StaticSlidingWindowLayer.update`` were read (the same
#: code in both; :func:`_write_all`).
READ_TRANSFORMERS = frozenset({"5.23.0", "5.24.0"})


@functools.cache
def _static_layers() -> tuple[type, type] | None:
    """transformers' ``StaticLayer`` and ``StaticSlidingWindowLayer`` when its release is in
    :data:`READ_TRANSFORMERS`, else ``None``."""
    import transformers
    from transformers.cache_utils import StaticLayer, StaticSlidingWindowLayer

    return (StaticLayer, StaticSlidingWindowLayer) if transformers.__version__ in READ_TRANSFORMERS else None


def _write_all(layers: list[Any], returned: list[Any], seen: int, new: int) -> None:
    """``layer.update(source.keys[:, :, -new:], source.values[:, :, -new:])`` for each layer of the ``StaticCache``
    and the layer the rebuild returned. Where ``update``'s code was read (:func:`_static_layers`, exact classes) and
    the layer is initialized, with room for the tokens and its counter tensor at ``seen`` (a ``StaticLayer``'s was
    read by ``static_cache_length``, nothing wrote it since; a sliding layer's is read here), the ops ``update``
    runs are run without it: the counters updated as it updates them, and ``index_copy_`` of the same tensors at
    positions ``seen`` onward (the values of its ``arange(new) + cumulative_length``, int64 on the layer's device),
    one position tensor for every layer (``update`` makes two ops of it a layer) and the new tokens as ``narrow``
    (the view ``[:, :, -new:]`` makes). ``index_copy_`` checks dtypes, devices, sizes and overlap and raises what
    it raises in ``update``; any other layer runs ``update``."""
    classes = _static_layers()
    positions: dict[Any, torch.Tensor] = {}
    for layer, source in zip(layers, returned, strict=True):
        keys, values = source.keys, source.values
        kind = type(layer)
        fast = classes is not None and (kind is classes[0] or kind is classes[1]) and layer.is_initialized and \
            seen + new <= layer.max_cache_len and type(keys) is torch.Tensor and type(values) is torch.Tensor and \
            keys.dim() == 4 and values.dim() == 4 and keys.shape[2] >= new and values.shape[2] >= new
        sliding = fast and kind is classes[1]  # type: ignore[index]
        if sliding and (layer.cumulative_length_int != seen or int(layer.cumulative_length) != seen):
            fast = False
        if not fast:
            layer.update(keys[:, :, -new:], values[:, :, -new:])
            continue
        device = layer.device
        position = positions.get(device)
        if position is None:
            position = positions[device] = torch.arange(seen, seen + new, device=device)
        if sliding:
            layer.cumulative_length_int += new
        else:
            layer.cumulative_length.add_(new)
        layer.keys.index_copy_(2, position, keys.narrow(2, keys.shape[2] - new, new))
        layer.values.index_copy_(2, position, values.narrow(2, values.shape[2] - new, new))
        if sliding:
            layer.cumulative_length.add_(new)


@functools.cache
def _wrapper_class() -> type:
    """The ``PreTrainedModel`` + ``GenerationMixin`` class around a rebuilt decoder (made once, on first use)."""
    from transformers import DynamicCache, GenerationMixin, PreTrainedModel, StaticCache

    class RebuiltForGeneration(PreTrainedModel, GenerationMixin):
        """A rebuilt decoder (``self.rebuilt``) that transformers' ``generate()`` drives; see
        :mod:`ir2torch.generation`."""

        base_model_prefix = "rebuilt"
        main_input_name = "input_ids"
        _supports_cache_class = True
        # the attention and experts ran when the IR was traced: the config's choices are kept as they are
        def _check_and_adjust_attn_implementation(self, requested: Any, *args: Any, **kwargs: Any) -> Any:
            return requested

        def _check_and_adjust_experts_implementation(self, requested: Any, *args: Any, **kwargs: Any) -> Any:
            return requested

        def create_masks_for_generate(self, attention_mask: torch.Tensor | None = None, **kwargs: Any) -> Any:
            """The 2-dim attention mask as it is: ``generate()`` expands it to a 4-dim mask of the cache's size
            for a ``StaticCache`` (for a compiled forward); the rebuild takes the 2-dim mask and builds its own
            (as the original does from a 2-dim mask)."""
            return attention_mask

        def __init__(self, config: Any, rebuilt: nn.Module) -> None:
            super().__init__(config)
            self.rebuilt = rebuilt
            self._past_leaves = _past_leaves(rebuilt)
            self._cache_argument = cache_argument(rebuilt)
            # each layer's sliding window (or None) in the config's DynamicCache: the layout the IR was converted for
            self._layout = [getattr(layer, "sliding_window", None) for layer in DynamicCache(config=config).layers]

        def forward(self, input_ids: torch.Tensor, cache: Any = None,
                    position_ids: torch.Tensor | None = None, attention_mask: torch.Tensor | None = None,
                    logits_to_keep: int = 0, past_key_values: Any = None, **kwargs: Any) -> Any:
            """One decoding step (:func:`forward_step`, :func:`static_step` for a ``StaticCache``);
            ``generate()`` reads this signature (it passes ``position_ids`` and ``logits_to_keep=1`` because they
            are named, as it does to the original) and passes the cache as ``cache`` (transformers 5.24) or
            ``past_key_values`` (before); the rebuild gets it under the name its IR records."""
            if cache is not None and past_key_values is not None:
                raise InputMismatchError("generate() passed both cache= and past_key_values=",
                                         hint="pass the cache once")
            cache = past_key_values if cache is None else cache
            if type(cache) is StaticCache:
                return static_step(self.rebuilt, self._past_leaves, self._layout, input_ids, cache,
                                   position_ids, attention_mask, logits_to_keep, kwargs, self._cache_argument)
            return forward_step(self.rebuilt, self._past_leaves, input_ids, cache, position_ids,
                                attention_mask, logits_to_keep, kwargs, self._cache_argument)

        def _init_weights(self, module: nn.Module) -> None:
            """Nothing: the rebuild holds the original's weights."""

    return RebuiltForGeneration


def for_generation(rebuilt: nn.Module, config: Any, generation_config: Any = None) -> nn.Module:
    """A module whose ``generate()`` runs ``rebuilt`` (a decoder converted by
    ``torch2ir.generation.convert_for_generation``) as transformers runs the original.

    Args:
        rebuilt: ``ir2torch.convert(ir, state)`` of that IR.
        config: the original model's config (``model.config``): ``generate()`` reads its special tokens and sizes.
        generation_config: the original's ``model.generation_config`` (default: made from ``config``, as
            transformers does for a model without a ``generation_config.json``).

    Returns:
        a ``transformers.PreTrainedModel`` with ``GenerationMixin``; its ``rebuilt`` attribute is ``rebuilt``
        (registered as a child: ``.to()``, ``.eval()`` and ``parameters()`` reach it).

    Raises:
        BuildError: ``rebuilt`` was not converted with a past, or records no input specs.
    """
    model = _wrapper_class()(copy.deepcopy(config), rebuilt)  # PreTrainedModel writes into its config
    if generation_config is not None:
        model.generation_config = generation_config
    return model.eval() if not rebuilt.training else model


__all__ = ["for_generation", "forward_step", "static_step"]
