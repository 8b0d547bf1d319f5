"""Comparing two outputs of any pytree: flattened with key paths (types registered without ``flatten_with_keys_fn``
too), their structures told apart in words, and leaves compared within a tolerance, absolute or relative to the
output's largest magnitude. Used by :func:`common.verify.verify` and :mod:`common.flat_verify`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree


def _snapshot(tree: Any) -> Any:
    """``tree`` with every tensor leaf detached and cloned, so later in-place ops cannot change it."""
    return pytree.tree_map(lambda x: x.detach().clone() if isinstance(x, torch.Tensor) else x, tree)


def _node(tree: Any) -> tuple[type, Any, list[Any], list[pytree.KeyEntry]] | None:
    """``(node type, context, children, child keys)`` of a pytree container; ``None`` for a leaf.

    Keys come from the type's ``flatten_with_keys_fn``. A type registered without one (diffusers'
    ``BaseOutput``, a plain registered dataclass) names a child by the mapping item or dataclass field that
    *is* that child (checked by identity, never guessed), else by its index.
    """
    if pytree.tree_is_leaf(tree):
        return None
    typ = pytree._get_node_type(tree)
    handler = pytree.SUPPORTED_NODES[typ]
    children, context = handler.flatten_fn(tree)
    children = list(children)
    keys: list[pytree.KeyEntry] | None = None
    if handler.flatten_with_keys_fn is not None:
        keys = [key for key, _ in handler.flatten_with_keys_fn(tree)[0]]
    if keys is None or len(keys) != len(children):
        keys = _fallback_keys(tree, children)
    return typ, context, children, keys


def _fallback_keys(tree: Any, children: list[Any]) -> list[pytree.KeyEntry]:
    """Keys of a node whose type has no key function: its items or fields if they are its children, else indices."""
    if isinstance(tree, Mapping):
        items = list(tree.items())
        if len(items) == len(children) and all(value is child for (_, value), child in zip(items, children)):
            return [pytree.MappingKey(key) for key, _ in items]
    if dataclasses.is_dataclass(tree):
        names = [f.name for f in dataclasses.fields(tree)]
        if len(names) == len(children) and all(getattr(tree, n) is child for n, child in zip(names, children)):
            return [pytree.GetAttrKey(n) for n in names]
    return [pytree.SequenceKey(i) for i in range(len(children))]


def flatten(tree: Any) -> tuple[list[str], list[Any]]:
    """Leaf paths (``keystr``) and leaves of ``tree``, in ``tree_leaves`` order."""
    paths: list[str] = []
    leaves: list[Any] = []

    def walk(node: Any, path: tuple[pytree.KeyEntry, ...]) -> None:
        parts = _node(node)
        if parts is None:
            paths.append(pytree.keystr(path))
            leaves.append(node)
            return
        for key, child in zip(parts[3], parts[2]):
            walk(child, (*path, key))

    walk(tree, ())
    return paths, leaves


def structure_difference(a: Any, b: Any, path: tuple[pytree.KeyEntry, ...] = ()) -> str | None:
    """Where the pytree structures of ``a`` and ``b`` first differ (``"at output['x']: ..."``), or ``None``."""
    node_a, node_b = _node(a), _node(b)
    if node_a is None and node_b is None:
        return None
    same = (
        node_a is not None and node_b is not None and node_a[0] is node_b[0]
        and len(node_a[2]) == len(node_b[2]) and _equal(node_a[1], node_b[1])
    )
    if not same:
        desc_a, desc_b = _describe(a, node_a), _describe(b, node_b)
        if desc_a == desc_b:  # same type and children: the contexts differ
            desc_a, desc_b = f"{desc_a} (context {node_a[1]!r:.80})", f"{desc_b} (context {node_b[1]!r:.80})"
        return f"at output{pytree.keystr(path)}: the original has {desc_a}, the rebuilt model {desc_b}"
    for key, x, y in zip(node_a[3], node_a[2], node_b[2]):
        found = structure_difference(x, y, (*path, key))
        if found is not None:
            return found
    return None


def _describe(tree: Any, node: tuple[type, Any, list[Any], list[pytree.KeyEntry]] | None) -> str:
    if node is None:
        return f"a {kind(tree)} leaf"
    n, keys = len(node[2]), [pytree.keystr((k,)) for k in node[3]]
    return f"{type(tree).__name__} with {n} {'child' if n == 1 else 'children'} {short(keys)}"


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # e.g. arrays whose == is elementwise
        return a is b


def short(items: list[str], most: int = 12) -> str:
    """``(a, b, ...)``: at most ``most`` items, then how many more."""
    return "(" + ", ".join(items[:most]) + (f", ... {len(items) - most} more)" if len(items) > most else ")")


def kind(leaf: Any) -> str:
    """The tensor dtype of a leaf, or the Python type name of a non-tensor leaf."""
    return str(leaf.dtype) if isinstance(leaf, torch.Tensor) else type(leaf).__name__


def compare_leaves(xs: list[Any], ys: list[Any], atol: float, rtol: float,
                    scale: bool = False) -> tuple[bool, float]:
    """Whether two equally long lists of leaves match pairwise, and their largest max abs diff."""
    ok, worst = True, 0.0
    for x, y in zip(xs, ys):
        leaf_ok, diff = compare_leaf(x, y, atol, rtol, scale)
        ok, worst = ok and leaf_ok, max(worst, diff)
    return ok, worst


def compare_leaf(a: Any, b: Any, atol: float, rtol: float, scale: bool = False) -> tuple[bool, float]:
    """Whether two leaves match and their max abs diff (0.0 for equal non-tensors, inf for differing kinds/types)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return False, math.inf
        b = b.to(a.device)
        diff = _max_abs_diff(a, b)
        if a.dtype != b.dtype:
            return False, diff
        if scale:
            atol = atol * max(1.0, _magnitude(a))
        return bool(torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True)), diff
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor) or type(a) is not type(b):
        return False, math.inf
    if isinstance(a, float) and math.isnan(a) and math.isnan(b):
        return True, 0.0
    try:
        equal = bool(a == b)
    except (TypeError, ValueError, RuntimeError):  # e.g. arrays whose == is elementwise
        equal = False
    return equal, 0.0 if equal else math.inf


def _magnitude(a: torch.Tensor) -> float:
    """The largest finite ``|a|`` (0 for an empty or non-floating tensor)."""
    if a.numel() == 0 or not (a.is_floating_point() or a.is_complex()):
        return 0.0
    values = a.detach().abs().double()
    finite = values[torch.isfinite(values)]
    return float(finite.max()) if finite.numel() else 0.0


def _max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest ``|a - b|``; equal entries (including matching NaNs and infs) count 0, other NaNs inf."""
    if a.numel() == 0:
        return 0.0
    wide = torch.complex128 if a.is_complex() or b.is_complex() else torch.float64
    x, y = a.to(wide), b.to(wide)
    diff = (x - y).abs()
    same = (x == y) | (torch.isnan(x) & torch.isnan(y))
    diff = torch.where(same, torch.zeros_like(diff), torch.nan_to_num(diff, nan=math.inf))
    return float(diff.max())


def _shapes(tree: Any) -> list[tuple[int, ...]]:
    """Shapes of the tensor leaves of ``tree``."""
    return [tuple(x.shape) for x in pytree.tree_leaves(tree) if isinstance(x, torch.Tensor)]
