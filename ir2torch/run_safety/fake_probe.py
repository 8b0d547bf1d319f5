"""The context of a forward's probe on fake tensors (:mod:`ir2torch.run_safety.forward_budget`): the module's
tensors replaced by fakes and its hooks off (the fake-tensor logger is quieted by
:func:`~ir2torch.run_safety.op_modes.quiet_fake_tensors`)."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module

from ir2torch.run_safety.op_modes import storage_key

_HOOK_DICTS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks")


@contextlib.contextmanager
def hooks_off(root: nn.Module) -> Iterator[None]:
    """No module hook (of ``root``'s modules, or global) runs during a probe: hooks see real calls only."""
    saved = [(m, name, m.__dict__[name]) for m in root.modules() for name in _HOOK_DICTS
             if m.__dict__.get(name)]
    saved_globals = [(name, getattr(_module, name)) for name in _GLOBAL_HOOKS if getattr(_module, name)]
    for m, name, _ in saved:
        m.__dict__[name] = OrderedDict()
    for name, _ in saved_globals:
        setattr(_module, name, OrderedDict())
    try:
        yield
    finally:
        for m, name, hooks in saved:
            m.__dict__[name] = hooks
        for name, hooks in saved_globals:
            setattr(_module, name, hooks)


@contextlib.contextmanager
def fake_state(root: nn.Module, mode: Any) -> Iterator[set[Any]]:
    """``root``'s parameters, buffers and tensor attributes replaced by fake tensors for a probe (restored after):
    nothing the probe runs reads or writes a real tensor (a real tensor reaching the fake mode makes it fail).
    Yields the storage keys of those fakes (they exist before the call: not allocated by it)."""
    saved: list[tuple[dict, str, Any]] = []
    external: set[Any] = set()
    try:
        for m in root.modules():
            for table in (m._parameters, m._buffers, m.__dict__):
                for name, value in list(table.items()):
                    if isinstance(value, torch.Tensor):
                        saved.append((table, name, value))
                        table[name] = fake = mode.from_tensor(value, static_shapes=True)  # sizes fixed
                        external.add(storage_key(fake))
        yield external
    finally:
        for table, name, value in reversed(saved):
            table[name] = value


def state_storages(root: nn.Module) -> set[Any]:
    """The storage keys of ``root``'s parameters, buffers and tensor attributes (memory a call did not create)."""
    return {storage_key(value) for m in root.modules() for table in (m._parameters, m._buffers, m.__dict__)
            for value in table.values() if isinstance(value, torch.Tensor)}


__all__ = ["fake_state", "hooks_off", "state_storages"]
