"""Groups of alike module instances for tracing each distinct block once (:mod:`torch2ir.trace_once.trace`).

Two modules are alike when they have the same class, the same attributes (plain values by value, as spelled:
``-0.0`` is not ``0.0``; other objects by identity), the same parameter and buffer shapes, dtypes and flags, and
alike children, and no hooks. Integer attributes holding a different value in every member (an index such as
``layer_idx``) are left out of the comparison and watched while a member runs (:mod:`torch2ir.trace_once.watch`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from torch2ir.trace_once.watch import varying_indices

__all__ = ["Group", "alike_groups", "scalar_key"]

#: ``nn.Module.__dict__`` entries that are bookkeeping, not a module's own attributes.
_BOOKKEEPING = frozenset({
    "_parameters", "_buffers", "_modules", "_non_persistent_buffers_set", "_forward_hooks",
    "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks", "_state_dict_hooks",
    "_state_dict_pre_hooks", "_load_state_dict_pre_hooks", "_load_state_dict_post_hooks",
    "_is_full_backward_hook", "_compiled_call_impl",
})
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_PLAIN = (bool, int, float, str, type(None), torch.dtype, torch.device)


@dataclass
class Group:
    """Alike module instances (paths in ``named_modules()`` order). Each distinct input key runs for real once
    (the first block of a stack is often called with an input that does not require grad, the others with one
    that does); a later call with a recorded key gets a stand-in."""

    paths: list[str]
    modules: list[nn.Module]
    enabled: bool = True
    records: dict[Any, tuple[int, Any]] = field(default_factory=dict)  # input key -> (member that ran, outputs)
    #: input key -> the traced member's output tensors and their versions when it returned (written in place by
    #: the caller since: its stand-ins' outputs must be writable too)
    returned: dict[Any, list[tuple[torch.Tensor, int]]] = field(default_factory=dict)
    stood_in: dict[int, int] = field(default_factory=dict)  # member that returned a stand-in -> member that ran
    failure: str | None = None
    #: int attributes (path in a member, name) whose value differs in every member: watched while one runs
    watched: list[tuple[str, str]] = field(default_factory=list)
    #: the watched attributes the first traced call read: part of every member's input key from then on, so a
    #: member stands in only for one with the same values (Swin's ``shift_size``: 0, w/2, 0, w/2 makes two)
    keyed: tuple[tuple[str, str], ...] = ()
    #: input keys whose traced call a stand-in cannot repeat, found after stand-ins were given for other keys:
    #: every member called with one runs for real (the stand-ins given stay valid) -> why
    unfit: dict[Any, str] = field(default_factory=dict)

    def keyed_values(self, index: int) -> tuple[Any, ...]:
        """The values of the :attr:`keyed` attributes in member ``index`` (read from its instance dictionaries)."""
        module = self.modules[index]
        return tuple(vars(module.get_submodule(path)).get(name) for path, name in self.keyed)

def scalar_key(value: Any) -> tuple[str, Any]:
    """A plain value's comparable form: its type and value, a float by its ``repr`` (``-0.0`` is not ``0.0``,
    and ``nan`` is itself)."""
    return (type(value).__name__, repr(value) if isinstance(value, (float, complex)) else value)


def _plain(value: Any, depth: int = 0) -> Any:
    """A comparable form of an attribute value: by value for plain values (and containers of them), else by
    identity."""
    if isinstance(value, _PLAIN):
        return scalar_key(value)
    if depth < 4 and isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_plain(v, depth + 1) for v in value))
    if depth < 4 and isinstance(value, dict):
        return ("dict", tuple((_plain(k, depth + 1), _plain(v, depth + 1)) for k, v in value.items()))
    return ("id", id(value))


def _fingerprint(module: nn.Module, ignored: Collection[str], ints: bool = True,
                 memo: dict[int, Any] | None = None) -> Any:
    """What two alike modules share (``None``: never grouped, e.g. a module with hooks); ``ints=False``: the
    values of plain ``int`` attributes left out (their names stay). ``memo``: fingerprints computed already, by
    module id (one pass over a model computes each module's once)."""
    if memo is not None and id(module) in memo:
        return memo[id(module)]
    fp = _computed_fingerprint(module, ignored, ints, memo)
    if memo is not None:
        memo[id(module)] = fp
    return fp


def _computed_fingerprint(module: nn.Module, ignored: Collection[str], ints: bool, memo: dict[int, Any] | None
                          ) -> Any:
    if any(getattr(module, h, None) for h in _HOOKS):
        return None
    attrs = tuple(sorted((k, ("int",) if not ints and type(v) is int else _plain(v))
                         for k, v in module.__dict__.items() if k not in _BOOKKEEPING and k not in ignored))
    state = tuple((n, tuple(t.shape), t.dtype, t.requires_grad, isinstance(t, nn.Parameter))
                  for n, t in (*module._parameters.items(), *module._buffers.items()) if t is not None)
    children = []
    for name, child in module._modules.items():
        if child is None:
            children.append((name, None))
            continue
        sub = _fingerprint(child, ignored, ints, memo)
        if sub is None:
            return None
        children.append((name, sub))
    return (type(module), attrs, state, tuple(children))


def alike_groups(model: nn.Module, ignored: Collection[str] = (),
                 is_leaf: Callable[[nn.Module], bool] = lambda m: False) -> list[Group]:
    """Groups of two or more alike module instances (see the module docstring), ``ignored``: attribute
    names whose values may differ between members (the caller vouches that the traced computation does not read
    them). Members may also differ in int attributes that hold a different value in each (``layer_idx``) of
    modules ``is_leaf`` does not handle: those are watched while a member runs (:mod:`torch2ir.trace_once.watch`).
    The root, aliased modules, modules whose tensors are shared with other modules, and global hooks exclude a
    module. Groups nest (a stack of layers, and the feed-forward blocks inside them): a block inside a member
    that runs for real is stood in for (a layer traced in full because its attention lifts constants still has
    its feed-forward block traced once), never inside a call being recorded for stand-ins
    (:class:`StandIns`)."""
    if (nn.modules.module._global_forward_hooks or nn.modules.module._global_forward_pre_hooks
            or nn.modules.module._global_backward_hooks):
        return []
    paths: dict[int, list[str]] = {}
    for path, module in model.named_modules(remove_duplicate=False):
        paths.setdefault(id(module), []).append(path)
    tensor_uses: dict[int, int] = {}
    for _, t in (*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)):
        tensor_uses[id(t)] = tensor_uses.get(id(t), 0) + 1
    shared: dict[int, bool] = {}  # module id -> it, or a module or tensor below it, is reached by two paths

    def is_shared(module: nn.Module) -> bool:
        if id(module) not in shared:
            shared[id(module)] = len(paths[id(module)]) > 1 or any(
                tensor_uses[id(t)] > 1 for t in (*module._parameters.values(), *module._buffers.values())
                if t is not None) or any(is_shared(c) for c in module._modules.values() if c is not None)
        return shared[id(module)]

    by_print: dict[Any, Group] = {}
    memo: dict[int, Any] = {}
    for path, module in model.named_modules():
        if not path:
            continue
        if "forward" in module.__dict__ or is_shared(module):
            continue
        fp = _fingerprint(module, ignored, ints=False, memo=memo)
        if fp is None:
            continue
        try:
            hash(fp)
        except TypeError:
            continue
        group = by_print.setdefault(fp, Group([], []))
        group.paths.append(path)
        group.modules.append(module)
    candidates = []
    for loose in by_print.values():
        if is_leaf(loose.modules[0]):
            continue  # a handled leaf is never stood in for (its IR is its data)
        varying = varying_indices(loose.modules, ignored, is_leaf) if len(loose.paths) > 1 else []
        if varying is not None:
            candidates.append(Group(loose.paths, loose.modules, watched=varying))
            continue
        strict: dict[Any, Group] = {}  # int attributes differing between some members only: alike when equal
        for path, module in zip(loose.paths, loose.modules, strict=True):
            group = strict.setdefault(_fingerprint(module, ignored), Group([], []))
            group.paths.append(path)
            group.modules.append(module)
        candidates.extend(strict.values())
    return [g for g in candidates if len(g.paths) > 1]
