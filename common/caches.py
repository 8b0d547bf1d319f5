"""transformers' key/value cache classes as pytree nodes: the allow-list of the cache kinds an IR may carry.

A ``*ForCausalLM`` called with ``use_cache=True`` takes and returns a ``transformers.cache_utils.DynamicCache``.
``torch.export`` can trace it only when the class is registered with torch's pytree; transformers ships that
registration (``transformers.integrations.executorch.register_dynamic_cache_export_support``: a cache flattens to
``{"key_cache": [...], "value_cache": [...]}`` and the sliding window of each layer). It is registered

- by torch2ir before it exports a model, when transformers' cache module is already imported (the model is a
  transformers model: nothing is imported for any other), and
- by :func:`common.treespec.load_spec` when a spec of a file names an allow-listed cache class: the file naming
  the class is what imports transformers, and only for the names of :data:`CACHE_TYPES`.

Other cache kinds (``StaticCache``, quantized or offloaded caches, ...) have no registration: a model taking or
returning one is refused by export. ``ir2torch.generation`` takes a ``StaticCache`` of :data:`STATIC_LAYERS` in
its wrapper (copied to and from the ``DynamicCache`` the rebuild takes; :func:`static_cache_length` checks it) and
refuses every other kind by name (:class:`UnsupportedCacheError`). The registration is transformers' own, process-wide and idempotent, as
transformers' export helpers make it.
"""

from __future__ import annotations

import importlib
import sys

from .errors import IRError

#: Serialized pytree name of each cache class a spec may name -> (module, function registering it).
CACHE_TYPES: dict[str, tuple[str, str]] = {
    "transformers.cache_utils.DynamicCache": ("transformers.integrations.executorch",
                                             "register_dynamic_cache_export_support"),
}
#: The layer classes of a ``DynamicCache`` its pytree form holds exactly (keys and values; the sliding window).
DYNAMIC_LAYERS = ("DynamicLayer", "DynamicSlidingWindowLayer")


#: The layer classes of a ``StaticCache`` whose tokens ``ir2torch.generation`` copies exactly (a sliding-window
#: layer only while it holds every token it has seen).
STATIC_LAYERS = ("StaticLayer", "StaticSlidingWindowLayer")


class UnsupportedCacheError(IRError):
    """A key/value cache kind (or cache layer kind) a rebuilt model cannot take or return."""


def register_cache_type(name: str) -> bool:
    """Register the allow-listed cache class serialized as ``name`` with torch's pytree (importing its module).

    Returns:
        whether ``name`` is allow-listed (and is now registered).
    """
    from torch.utils import _pytree as pytree

    entry = CACHE_TYPES.get(name)
    if entry is None:
        return False
    if name in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
        return True  # registered already (by an earlier call, or by the user with transformers' function)
    module, function = entry
    getattr(importlib.import_module(module), function)()
    return True


def register_loaded_caches() -> None:
    """Register the allow-listed cache classes whose library is already imported (nothing is imported else).

    Called before an export: a transformers model has imported ``transformers.cache_utils``.
    """
    for name in CACHE_TYPES:
        if name.rpartition(".")[0] in sys.modules:
            register_cache_type(name)


def check_dynamic_cache(cache: object) -> None:
    """Refuse a ``DynamicCache`` whose pytree form would not hold all of it: offloaded, or with layers other than
    :data:`DYNAMIC_LAYERS` (quantized, indexed), or a sliding-window layer that already dropped tokens.

    Raises:
        UnsupportedCacheError: naming the cache or layer class and why.
    """
    kind = type(cache).__name__
    if getattr(cache, "offloading", False):
        raise UnsupportedCacheError(f"an offloaded {kind} cannot be passed to a rebuilt model",
                                    hint="generate with the default DynamicCache (no offloading)")
    for i, layer in enumerate(getattr(cache, "layers", ())):
        layer_kind = type(layer).__name__
        if layer_kind not in DYNAMIC_LAYERS:
            raise UnsupportedCacheError(f"layer {i} of the {kind} is a {layer_kind}; a rebuilt model takes only "
                                        f"{', '.join(DYNAMIC_LAYERS)} layers")
        keys = getattr(layer, "keys", None)
        cumulative = getattr(layer, "cumulative_length", None)
        if keys is not None and isinstance(cumulative, int) and keys.shape[-2] != cumulative:
            raise UnsupportedCacheError(
                f"layer {i} of the {kind} ({layer_kind}) has seen {cumulative} tokens but holds "
                f"{keys.shape[-2]}: past its sliding window, the cache's pytree form (what a rebuilt model takes "
                "and returns) loses the position", hint="generate fewer tokens than the sliding window")


def static_cache_length(cache: object, new_tokens: int, batch: int) -> int:
    """The number of tokens a ``StaticCache`` holds, checked for a step adding ``new_tokens`` for ``batch`` rows:
    not offloaded, its layers all :data:`STATIC_LAYERS` (exact classes), all at the same length, of ``batch`` rows
    once allocated, and with room for the new tokens (a sliding-window layer: within its window, where it holds
    every token; a full layer: within its ``max_cache_len``, past which transformers' own update fails).

    Raises:
        UnsupportedCacheError: naming the cache or layer class and why.
    """
    kind = type(cache).__name__
    if getattr(cache, "offloading", False):
        raise UnsupportedCacheError(f"an offloaded {kind} cannot be passed to a rebuilt model",
                                    hint="generate without offloading the cache")
    lengths = set()
    for i, layer in enumerate(getattr(cache, "layers", ())):
        layer_kind = type(layer).__name__
        if layer_kind not in STATIC_LAYERS:
            raise UnsupportedCacheError(f"layer {i} of the {kind} is a {layer_kind}; a rebuilt model takes only "
                                        f"{', '.join(STATIC_LAYERS)} layers in a {kind}")
        initialized = bool(getattr(layer, "is_initialized", False))
        if layer_kind == "StaticSlidingWindowLayer":
            seen = int(layer.cumulative_length_int)
        else:
            seen = int(layer.cumulative_length) if initialized else 0
        if initialized and (layer.keys.shape[0] != batch or layer.values.shape[0] != batch):
            raise UnsupportedCacheError(f"layer {i} of the {kind} holds {layer.keys.shape[0]} rows, the step has "
                                        f"{batch}")
        room = int(layer.max_cache_len)
        if seen + new_tokens > room:
            why = ("past its sliding window the layer drops tokens, which the rebuilt model's cache (what it takes "
                   "and returns) does not carry" if layer_kind == "StaticSlidingWindowLayer" else
                   "the cache has no room for them")
            raise UnsupportedCacheError(
                f"layer {i} of the {kind} ({layer_kind}) holds {seen} of at most {room} tokens and the step adds "
                f"{new_tokens}: {why}", hint="generate fewer tokens (or a larger max_cache_len)")
        lengths.add(seen)
    if len(lengths) > 1:
        raise UnsupportedCacheError(f"the layers of the {kind} hold different numbers of tokens "
                                    f"({sorted(lengths)}): it was not filled by one model's steps")
    return lengths.pop() if lengths else 0


__all__ = ["CACHE_TYPES", "DYNAMIC_LAYERS", "STATIC_LAYERS", "UnsupportedCacheError", "check_dynamic_cache",
           "register_cache_type", "register_loaded_caches", "static_cache_length"]
