"""Shared helper of the default handlers: read constructor arguments back from a module.

A family module declares a table ``{module class: constructor argument names}``; each
name is read with ``getattr(module, name)`` unless a *rule* derives it (``bias`` is
``module.bias is not None`` everywhere; families add their own rules). Values are copied
into plain IR values (``torch.Size`` becomes a tuple, lists and tuples are copied).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from torch import nn

if TYPE_CHECKING:
    from torch2ir.converter import Handler, Torch2Ir

Rule = Callable[[nn.Module], Any]

#: Rules shared by every family: arguments stored as the presence of a parameter.
RULES: dict[str, Rule] = {"bias": lambda module: module.bias is not None}


def plain(value: Any) -> Any:
    """A copy of ``value`` as a plain IR value (tuples, including ``torch.Size``, stay tuples)."""
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def attribute_handler(names: Sequence[str], rules: Mapping[str, Rule]) -> Handler:
    """A handler returning ``{name: value}`` for ``names``, in order, derived by ``rules`` or read."""
    own = {name: rules[name] for name in names if name in rules}

    def handler(module: nn.Module) -> dict[str, Any]:
        return {name: plain(own[name](module) if name in own else getattr(module, name)) for name in names}

    return handler


def register_table(
    converter: Torch2Ir,
    table: Mapping[type[nn.Module], Sequence[str]],
    rules: Mapping[str, Rule] | None = None,
) -> None:
    """Register an :func:`attribute_handler` for every class of ``table`` (``rules`` extend :data:`RULES`)."""
    merged = {**RULES, **(rules or {})}
    for cls, names in table.items():
        converter.register(cls, attribute_handler(names, merged))
