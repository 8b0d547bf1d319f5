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
refuses every other kind by name (:class:`UnsupportedCacheError`). The registration is transformers' own,
process-wide and idempotent, as transformers' export helpers make it.

A ``DynamicCache`` node read from a file is checked (:func:`cache_context_problem`); the graph of a decoding step
and a rebuilt module's output build the cache without copying its tensors (:func:`output_unflatten`,
:func:`caches_unflattened_without_copies`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator
from itertools import zip_longest
from typing import Any

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


#: What a transformers decoder's key/value cache is called as a ``forward`` argument and an output field:
#: ``cache`` from transformers 5.24, ``past_key_values`` before (5.24 still reads that name, with a warning).
CACHE_NAMES = ("cache", "past_key_values")


def cache_name(names: Iterable[str]) -> str | None:
    """The first of :data:`CACHE_NAMES` among ``names`` (a ``forward``'s parameters, an output's fields, the
    keyword arguments of a call), or ``None``."""
    present = set(names)
    return next((name for name in CACHE_NAMES if name in present), None)


def forward_cache_name(module: object) -> str | None:
    """The name ``module``'s ``forward`` takes the cache by (:func:`cache_name` of its parameters): a transformers
    decoder's, or a rebuild's (its forward has the converted call's argument names)."""
    import inspect

    return cache_name(inspect.signature(module.forward).parameters)  # type: ignore[attr-defined]


def output_cache_field(output: object) -> str:
    """The field of a transformers output (``CausalLMOutputWithPast``) holding its cache: ``cache`` where the class
    declares it (5.24), else ``past_key_values`` (5.23; 5.24 keeps that name as a read-only alias)."""
    fields = getattr(output, "__dataclass_fields__", None)
    return "cache" if isinstance(fields, dict) and "cache" in fields else "past_key_values"


def cache_context_problem(name: str, context: Any, children: list[Any]) -> str | None:
    """What is wrong with the pytree node of the cache class ``name`` a file holds (``context`` read as JSON,
    ``children`` its child nodes as read), or ``None``: a ``DynamicCache`` node is ``[["key_cache", "value_cache"],
    layout]``, ``layout`` one entry per layer (``null``, or a sliding window: an int >= 1), with two list children
    of the same length, at most one per layer (what transformers' flatten writes and its unflatten reads)."""
    if name != "transformers.cache_utils.DynamicCache":
        return None
    if not (isinstance(context, list) and len(context) == 2 and context[0] == ["key_cache", "value_cache"]
            and isinstance(context[1], list)):
        return f"has a {name} context that is not [['key_cache', 'value_cache'], [window or null per layer]]"
    layout = context[1]
    bad = next((w for w in layout if w is not None and (type(w) is not int or w < 1)), None)
    if bad is not None:
        return f"has a {name} layer whose sliding window is {str(bad)[:40]!r}, not null or an int >= 1"
    counts = [len(c["children_spec"]) if isinstance(c, dict) and c.get("type") == "builtins.list" and
              isinstance(c.get("children_spec"), list) else None for c in children]
    if len(counts) != 2 or None in counts or counts[0] != counts[1] or counts[0] > len(layout):
        return (f"has a {name} node whose children are not two lists of as many key and value tensors, at most "
                f"one per layer of its layout ({len(layout)})")
    return None


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


def _not_offloaded(cache: object, hint: str) -> str:
    """The cache's class name, once it is known not to be offloaded (a rebuilt model takes its tensors in place).

    Raises:
        UnsupportedCacheError: an offloaded cache, with ``hint``.
    """
    kind = type(cache).__name__
    if getattr(cache, "offloading", False):
        raise UnsupportedCacheError(f"an offloaded {kind} cannot be passed to a rebuilt model", hint=hint)
    return kind


def check_dynamic_cache(cache: object) -> None:
    """Refuse a ``DynamicCache`` whose pytree form would not hold all of it: offloaded, or with layers other than
    :data:`DYNAMIC_LAYERS` (quantized, indexed), or a sliding-window layer that already dropped tokens.

    Raises:
        UnsupportedCacheError: naming the cache or layer class and why.
    """
    kind = _not_offloaded(cache, "generate with the default DynamicCache (no offloading)")
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
    kind = _not_offloaded(cache, "generate without offloading the cache")
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


def output_unflatten(node_type: type) -> Callable[[list[Any], Any], Any]:
    """The function a rebuilt module's generated code builds an output node of ``node_type`` with: the pytree
    registration's ``unflatten_fn``, except for transformers' ``DynamicCache``, whose registered function (transformers'
    ``_unflatten_dynamic_cache``) copies every key and value tensor onto an empty one (``DynamicLayer.update``'s
    ``torch.cat``): :func:`_dynamic_cache_unflatten` makes the same cache holding the tensors themselves. It is used
    only when it gives the same layers as the registered function on a sample (:func:`_same_as_registered`), so a
    transformers version that builds its caches differently gets its own function."""
    from torch.utils import _pytree as pytree

    registered = pytree.SUPPORTED_NODES[node_type].unflatten_fn
    if _is_dynamic_cache(node_type) and _same_as_registered(node_type, registered):
        return functools.partial(_dynamic_cache_unflatten, node_type)
    return registered


@contextlib.contextmanager
def caches_unflattened_without_copies() -> Iterator[None]:
    """While it is open, transformers' ``DynamicCache`` (when registered) is unflattened by
    :func:`_dynamic_cache_unflatten` (:func:`output_unflatten`) instead of its registered function.

    ``torch.export`` rebuilds the cache a model takes from its leaves by calling the registered unflatten inside
    the traced function: with transformers' own, the graph starts with ``torch.cat`` of an empty tensor and each
    past key and value tensor, a copy of the whole cache at every decoding step. The registration is put back on
    exit (it is process-wide; nothing else should export in another thread meanwhile)."""
    from torch.utils import _pytree as pytree

    register_loaded_caches()
    cache_type = next((t for t in pytree.SUPPORTED_NODES if _is_dynamic_cache(t)), None)
    if cache_type is None:
        yield
        return
    node = pytree.SUPPORTED_NODES[cache_type]
    fast = output_unflatten(cache_type)
    if fast is node.unflatten_fn:
        yield
        return
    pytree.SUPPORTED_NODES[cache_type] = node._replace(unflatten_fn=fast)
    try:
        yield
    finally:
        pytree.SUPPORTED_NODES[cache_type] = node


def _is_dynamic_cache(node_type: type) -> bool:
    return f"{node_type.__module__}.{node_type.__qualname__}" == "transformers.cache_utils.DynamicCache"


def _dynamic_cache_unflatten(cache_type: type, values: list[Any], context: Any) -> Any:
    """A ``DynamicCache`` from its pytree leaves and context, as transformers' registered unflatten makes it, holding
    the leaves (no copy); a sliding-window layer holds the last ``sliding_window - 1`` tokens, as its ``update``."""
    module = sys.modules[cache_type.__module__]
    names, layout = context
    tree = dict(zip(names, values, strict=True))
    layers = []
    for keys, values_, window in zip_longest(tree["key_cache"], tree["value_cache"], layout):
        layer = module.DynamicLayer() if window is None else module.DynamicSlidingWindowLayer(sliding_window=window)
        if keys is not None and values_ is not None:
            if "dtype" in _initialized(type(layer)):  # transformers 5.23 records it, 5.24 does not
                layer.dtype = keys.dtype
            layer.device = keys.device
            layer.is_initialized = True
            if window is None:
                layer.keys, layer.values = keys, values_
            else:
                if layer._sliding_window_tensor.device != layer.device:  # (``to`` returns the tensor itself else)
                    layer._sliding_window_tensor = layer._sliding_window_tensor.to(layer.device)
                layer.cumulative_length += keys.shape[-2]
                layer.keys, layer.values = _last(keys, window), _last(values_, window)
        layers.append(layer)
    if not layers:
        return cache_type()
    cache = cache_type.__new__(cache_type)
    module.Cache.__init__(cache, layers=layers, offloading=False, offload_only_non_sliding=False)
    return cache


@functools.cache
def _initialized(layer_type: type) -> frozenset[str]:
    """The attributes ``layer_type.lazy_initialization`` sets on a plain layer (run once, outside any trace, on an
    empty sample): what :func:`_dynamic_cache_unflatten` sets as it does."""
    import inspect

    import torch

    sliding = "sliding_window" in inspect.signature(layer_type).parameters
    layer = layer_type(sliding_window=2) if sliding else layer_type()
    before = set(vars(layer))
    sample = torch.zeros(1, 1, 0, 1)
    layer.lazy_initialization(sample, sample)
    return frozenset(set(vars(layer)) - before | {k for k in before if k in ("dtype", "device")})


def _last(tensor: Any, window: int) -> Any:
    """``tensor[:, :, -window + 1:, :]`` (what a sliding-window layer keeps), or ``tensor`` itself where that view
    would hold all of it (its sizes, strides and storage offset: the same elements); a decoding step's cache is
    shorter than its window."""
    if type(tensor) is _tensor_type() and tensor.dim() == 4 and (window == 1 or tensor.shape[2] <= window - 1):
        return tensor  # (``-0:`` keeps every token: a window of 1 too)
    return tensor[:, :, -window + 1:, :]


@functools.cache
def _tensor_type() -> type:
    import torch

    return torch.Tensor


@functools.cache
def _same_as_registered(cache_type: type, registered: Callable[[list[Any], Any], Any]) -> bool:
    """Whether :func:`_dynamic_cache_unflatten` gives what ``registered`` gives on a sample of a plain and a
    sliding-window layer of 3 tokens (window 3: the layer drops one) and a layer without tensors: the same
    classes, attributes and tensor values (the cache's own attributes compared by ``repr``)."""
    import torch

    def state(cache: Any) -> list[Any]:
        out = [type(cache), sorted((k, repr(v)) for k, v in vars(cache).items() if k != "layers")]
        for layer in cache.layers:
            items = sorted(vars(layer).items())
            out.append((type(layer), [(k, (v.dtype, v.shape, v.tolist()) if isinstance(v, torch.Tensor) else v)
                                      for k, v in items]))
        return out

    k0, k1, v0, v1 = (torch.arange(24.0).reshape(1, 2, 3, 4) + i for i in range(4))
    context = (["key_cache", "value_cache"], [None, 3, None])
    try:
        return state(_dynamic_cache_unflatten(cache_type, [[k0, k1], [v0, v1]], context)) == \
            state(registered([[k0, k1], [v0, v1]], context))
    except Exception:  # noqa: BLE001 - another transformers version: its own function is used
        return False


__all__ = ["CACHE_NAMES", "CACHE_TYPES", "DYNAMIC_LAYERS", "STATIC_LAYERS", "UnsupportedCacheError",
           "cache_context_problem", "cache_name", "caches_unflattened_without_copies", "check_dynamic_cache",
           "forward_cache_name", "output_cache_field",
           "output_unflatten", "register_cache_type", "register_loaded_caches", "static_cache_length"]
