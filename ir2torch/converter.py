"""``Ir2Torch``: rebuild ``nn.Module``s from an IR through overridable builders."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from common.errors import HandlerNotFoundError, IRFormatError, StateDictError
from common.ir import IR, Implementation
from common.registry import Registry, Where
from common.safety import Allowlist
from common.validate import validate

from .assemble import attach_children, restore_modes, restore_state_layout, restore_tensors
from .rebuild import graph_module

Builder = Callable[[Implementation], nn.Module]


class Ir2Torch:
    """Rebuilds an ``nn.Module`` tree from an IR.

    Implementations whose ``type`` has a builder are built by it (``builder(impl)``
    returns the module); any other implementation with a graph becomes a
    ``torch.fx.GraphModule`` running that graph. Each converter has its own registry and
    allow-list: registering on one never changes another.
    """

    def __init__(self) -> None:
        self.builders: Registry[str, Builder] = Registry("IR type")
        self.allowlist = Allowlist()

    def register(self, type: str, builder: Builder | None = None) -> Any:
        """Add the builder of IR ``type`` (decorator or direct call); refuses a duplicate."""
        return self.builders.register(type, builder)

    def register_override(self, type: str, builder: Builder | None = None, *, where: Where = None) -> Any:
        """Replace the builder of ``type``, everywhere or only for paths matching ``where``."""
        return self.builders.register_override(type, builder, where=where)

    def copy(self) -> Ir2Torch:
        """An independent converter with the same builders and allow-list."""
        new = type(self)()
        new.builders = self.builders.copy()
        new.allowlist = self.allowlist.copy()
        return new

    def convert(
        self,
        ir: IR | Mapping[str, Any] | str | os.PathLike,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        *,
        device: torch.device | str | None = None,
        strict: bool = True,
    ) -> nn.Module:
        """Rebuild the model described by ``ir``.

        Args:
            ir: an :class:`~common.ir.IR`, its plain dict form, or a saved JSON file's path.
            state_dict: weights to load into the rebuilt model.
            device: where parameters are created (``"meta"`` allocates nothing).
            strict: passed to ``load_state_dict``.

        Raises:
            IRError: the IR is malformed or unsafe, a type has no builder, or the state
                dict does not fit.
        """
        ir = self._as_ir(ir)
        validate(ir, allowlist=self.allowlist)
        if "root" not in ir:
            raise IRFormatError("the IR has no 'root' implementation", hint="the top-level module's key is 'root'")
        modules = {key: self._build_one(impl, device) for key, impl in ir.items()}
        root = attach_children(ir, modules)
        restore_state_layout(ir, modules)
        restore_tensors(ir, modules, device)
        restore_modes(ir, modules)
        if state_dict is not None:
            load_state(root, state_dict, strict=strict)
        return root

    def _as_ir(self, ir: Any) -> IR:
        if isinstance(ir, IR):
            return ir
        if isinstance(ir, (str, os.PathLike)):
            from common.serialize import load_ir

            return load_ir(ir, validate=False)
        if isinstance(ir, Mapping):
            return IR.from_dict(ir)
        raise TypeError(f"ir must be an IR, a dict or a file path, not {type(ir).__name__}")

    def _build_one(self, impl: Implementation, device: torch.device | str | None) -> nn.Module:
        if impl.type in self.builders:
            builder = self.builders.get(impl.type, impl.name)
            with torch.device(device) if device is not None else _nullcontext():
                module = builder(impl)
            if not isinstance(module, nn.Module):
                raise TypeError(f"builder for {impl.type!r} returned {type(module).__name__}, not an nn.Module")
            return module
        if impl.graph.number_of_nodes() or impl.type == "module":
            # a "module" never called has no graph: it only holds its state and children
            return graph_module(impl, self.allowlist, device=device)
        raise HandlerNotFoundError(
            f"no builder for type {impl.type!r} and no graph to rebuild it from",
            implementation=impl.name,
            hint=f"register one: converter.register({impl.type!r})(lambda impl: MyModule(**impl.data))",
        )


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def load_state(module: nn.Module, state_dict: Mapping[str, torch.Tensor], *, strict: bool = True) -> None:
    """``module.load_state_dict`` with every mismatch reported as one :class:`StateDictError`."""
    own = module.state_dict()
    problems = []
    for key, tensor in state_dict.items():
        if key in own and tuple(own[key].shape) != tuple(tensor.shape):
            problems.append(f"{key}: expected shape {tuple(own[key].shape)}, found {tuple(tensor.shape)}")
    if strict:
        problems += [f"{k}: missing from the state dict" for k in own if k not in state_dict]
        problems += [f"{k}: unexpected key (the model has no such entry)" for k in state_dict if k not in own]
    if problems:
        raise StateDictError(
            f"the state dict does not fit the rebuilt model ({len(problems)} problems):\n  " + "\n  ".join(problems),
            hint="use common.remap_state_dict for rewritten IRs, or pass strict=False",
        )
    module.load_state_dict(state_dict, strict=strict)


def get_default_converter() -> Ir2Torch:
    """A fresh converter with the default builders (registering on it changes only it)."""
    from .handlers import register_defaults

    converter = Ir2Torch()
    register_defaults(converter)
    return converter


def convert(
    ir: IR | Mapping[str, Any] | str | os.PathLike,
    state_dict: Mapping[str, torch.Tensor] | None = None,
    *,
    device: torch.device | str | None = None,
    strict: bool = True,
) -> nn.Module:
    """Rebuild ``ir`` with a default converter (see :meth:`Ir2Torch.convert`)."""
    return get_default_converter().convert(ir, state_dict, device=device, strict=strict)
