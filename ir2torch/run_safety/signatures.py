"""What a rebuilt module's call is read as by its forward budget (:mod:`ir2torch.run_safety.forward_budget`): its
signature (what decides its sizes and aliasing: a probe covers the calls of one signature) and the storages of the
tensors it was given (which no node may write: :mod:`ir2torch.run_safety.writes`), each read in one walk against the
structure of an earlier call where the call has exactly that structure."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from common.treespec import exact_leaves
from ir2torch.run_safety.op_modes import storage_key

_TENSOR, _STRIDED = torch.Tensor, torch.strided
#: Leaf types a signature describes by value (anything else by identity).
_VALUES = (int, float, bool, str, type(None), torch.dtype, torch.device)


def signature(args: tuple, kwargs: dict[str, Any], known: pytree.TreeSpec | None = None) -> Any:
    """What decides a call's sizes and aliasing: its structure (``TreeSpec``), each tensor's shape, strides, dtype
    and device; every other leaf's value. The strides count: ``contiguous()`` or ``reshape`` of a contiguous input
    returns the input itself, of a transposed one a copy, so a probe of one does not tell whether an in-place op of
    the graph writes the other. ``known``: the structure of an earlier call; when the call has exactly that
    structure and only tensors and such values as leaves, its leaves are read in one walk against it
    (:func:`~common.treespec.exact_leaves`: the leaves ``tree_flatten`` gives for the same spec) instead of
    flattening the call again (a decoder's cache: 35 us a step)."""
    if known is not None:
        leaves = exact_leaves((args, kwargs), known)
        if leaves is not None:
            parts = described(leaves, exact=True)
            if parts is not None:
                return (known, *parts)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    return (spec, *described(leaves, exact=False))  # type: ignore[misc]


def described(leaves: list[Any], exact: bool) -> list[Any] | None:
    """Each leaf's part of a signature; with ``exact``, ``None`` when a leaf is neither a tensor nor a value of
    :data:`_VALUES` (read against a known spec, such a leaf may be a container ``tree_flatten`` would open)."""
    out: list[Any] = []
    append = out.append
    for leaf in leaves:
        if type(leaf) is _TENSOR or isinstance(leaf, _TENSOR):  # its device itself (type and index): a finer key
            layout = leaf.layout  # than its type, read about 5 times faster (``Size`` hashes and compares as a tuple)
            append((leaf.shape, leaf.stride() if layout is _STRIDED else None, leaf.dtype, leaf.device, layout))
        elif isinstance(leaf, _VALUES):
            append((type(leaf), leaf))
        elif exact:
            return None
        else:
            append(id(leaf))  # unhashable or opaque: its identity (a new object is probed again)
    return out


def call_storages(tree: Any, known: pytree.TreeSpec | None) -> tuple[set[Any], pytree.TreeSpec]:
    """``(storages, structure)``: the storage keys of the tensors in ``tree`` (what
    :func:`~ir2torch.run_safety.op_modes.storages` gives) and ``tree``'s structure. ``known``: the structure of an
    earlier call; when ``tree`` has exactly it and only tensors and values of :data:`_VALUES` as leaves, its leaves
    are read in one walk against it (:func:`~common.treespec.exact_leaves`, the leaves ``tree_flatten`` gives for
    the same structure: a decoder's cache flattened in 4 us instead of 8) and ``known`` is returned; else ``tree`` is
    flattened (a leaf of another type may be a container ``tree_flatten`` would open, holding tensors)."""
    if known is not None:
        leaves = exact_leaves(tree, known)
        if leaves is not None:
            found = set()
            for leaf in leaves:
                if type(leaf) is _TENSOR or isinstance(leaf, _TENSOR):
                    found.add(storage_key(leaf))
                elif not isinstance(leaf, _VALUES):
                    break
            else:
                return found, known
    leaves, spec = pytree.tree_flatten(tree)
    return {storage_key(t) for t in leaves if isinstance(t, _TENSOR)}, spec


__all__ = ["call_storages", "described", "signature"]
