"""Slots of a container that hold ``None`` (``nn.ModuleList([conv, None])``, ``add_module("1", None)``).

``nn.Module`` keeps such a slot in ``_modules``: iterating the container yields ``None`` there, and code that zips
two containers (transformers' Informer encoder: ``zip(self.layers, self.conv_layers)``, its last conv slot
``None``) runs one step per slot. A rebuild that left the slot out would stop a step early, silently. So a
container's implementation records them in ``meta``:

- ``"none_children"``: the names of the slots holding ``None``;
- ``"children"``: every slot's name in order (the order a rebuild puts them back in, as for aliases).

The rebuild registers each as ``None`` again (:func:`attach_none_slots`) before putting the children in order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from .errors import BuildError, IRFormatError

MAX_SLOTS = 10**5


def none_slots(module: nn.Module, meta: dict[str, Any]) -> None:
    """Record ``module``'s ``None`` slots and the order of all its slots in ``meta`` (nothing when it has none)."""
    names = [name for name, child in module._modules.items() if child is None]
    if names:
        meta["none_children"] = names
        meta["children"] = list(module._modules)


def check_none_slots(meta: Mapping[str, Any], key: str) -> None:
    """``meta["none_children"]``: unique child names (no ``.``, printable, at most 300 characters), each listed in
    ``meta["children"]``."""
    names = meta.get("none_children")
    if names is None:
        return
    order = meta.get("children")
    if (not isinstance(names, list) or not names or len(names) > MAX_SLOTS or len(set(map(str, names))) != len(names)
            or not all(isinstance(n, str) and n and "." not in n and n.isprintable() and len(n) <= 300 for n in names)
            or not isinstance(order, list) or not set(names) <= set(order)):
        raise IRFormatError("meta.none_children must list names of the module's child slots that hold None, once "
                            "each, every one also in meta.children", implementation=key,
                            hint="it records a container's None slots; the file is corrupt or hostile")


def attach_none_slots(module: nn.Module, meta: Mapping[str, Any], key: str) -> None:
    """Register each recorded ``None`` slot of ``module`` (a name already taken by a child or an attribute is a
    :class:`BuildError`)."""
    for name in meta.get("none_children") or ():
        if name in module._modules or hasattr(module, name):
            raise BuildError(f"the None slot {name!r} of {key!r} is also a child or an attribute", implementation=key,
                             hint="the file is corrupt or hostile")
        module.register_module(name, None)


__all__ = ["attach_none_slots", "check_none_slots", "none_slots"]
