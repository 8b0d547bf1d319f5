"""Assemble the rebuilt module tree: one module per implementation, attached at its key
and at every alias, with tied tensors re-tied, recorded dtypes restored, and the values
of non-persistent buffers / constants the IR carries put back.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from common.errors import IRFormatError, StateDictError
from common.ir import IR, parent_key

from .rebuild import relative_path, set_submodule


def attach_children(ir: IR, modules: Mapping[str, nn.Module]) -> nn.Module:
    """Attach every implementation's module under its parent, then at its aliases."""
    keys = [k for k in ir if k != "root"]  # IR order is named_modules() order: containers fill in index order
    for key in sorted(keys, key=lambda k: k.count(".")):
        parent = parent_key(key, ir)
        set_submodule(modules[parent], relative_path(parent, key), modules[key])
    root = modules["root"]
    for key in [*keys, "root"]:
        for alias in ir[key].aliases:
            set_submodule(root, alias, modules[key])
    return root


def _split(path: str) -> tuple[str, str]:
    owner, _, name = path.rpartition(".")
    return owner, name


def _owner_module(root: nn.Module, ir: IR, modules: Mapping[str, nn.Module], path: str) -> tuple[nn.Module, str]:
    owner, name = _split(path)
    key = owner or "root"
    if key in modules:
        return modules[key], name
    try:
        return root.get_submodule(owner), name
    except AttributeError:
        raise IRFormatError(f"state path {path!r} names no module of the IR", key=path,
                            hint="state ties and tensors use '<module path>.<name>'") from None


def restore_state_layout(ir: IR, modules: Mapping[str, nn.Module]) -> None:
    """Recorded dtypes, then ties (a tied entry becomes the very tensor it is tied to)."""
    root = modules["root"]
    for key, impl in ir.items():
        module = modules[key]
        for name, rec in impl.state.items():
            table = module._parameters if rec["kind"] == "parameter" else module._buffers
            tensor = table.get(name)
            if isinstance(tensor, torch.Tensor) and tensor.dtype != rec["dtype"]:
                converted = tensor.detach().to(rec["dtype"])
                table[name] = nn.Parameter(converted, tensor.requires_grad) if rec["kind"] == "parameter" \
                    else converted
    for key, impl in ir.items():
        module = modules[key]
        for name, rec in impl.state.items():
            tie = rec.get("tie")
            if not isinstance(tie, str):
                continue
            owner, attr = _owner_module(root, ir, modules, tie)
            table = owner._parameters if rec["kind"] == "parameter" else owner._buffers
            if attr not in table:
                raise IRFormatError(f"state {name!r} is tied to {tie!r}, which does not exist",
                                    implementation=key, hint="tie to an existing parameter/buffer path")
            if rec["kind"] == "parameter":
                module._parameters[name] = table[attr]
            else:
                module._buffers[name] = table[attr]


def restore_modes(ir: IR, modules: Mapping[str, nn.Module]) -> None:
    """Each module gets the ``training`` flag the original had (eval unless recorded otherwise)."""
    for key in ir:
        modules[key].train(False)
    for key, impl in ir.items():
        flag = impl.meta.get("training")
        if isinstance(flag, bool):
            modules[key].training = flag


def restore_tensors(ir: IR, modules: Mapping[str, nn.Module], device: torch.device | str | None) -> None:
    """Put back the values the IR carries for state no state dict holds."""
    root = modules["root"]
    for path, value in ir.tensors.items():
        owner, name = _owner_module(root, ir, modules, path)
        value = value if device is None else value.to(device)
        if name in owner._buffers:
            owner._buffers[name] = value
        elif name in owner._parameters:
            raise IRFormatError(f"ir.tensors holds parameter {path!r}", key=path,
                                hint="parameters come from the state dict, not from the IR")
        else:
            setattr(owner, name, value)


def restore_unsaved(ir: IR, modules: Mapping[str, nn.Module], state: Mapping[str, torch.Tensor]) -> None:
    """Values of non-persistent buffers and constants that the IR could not keep (converted on ``meta``).

    They are in no state dict, so they are taken from ``state`` under their original path (pass
    ``{**model.state_dict(), **dict(model.named_buffers())}``).

    Raises:
        StateDictError: such a value is in neither the IR nor ``state``; lists every one.
    """
    root, missing = modules["root"], []
    for key, impl in ir.items():
        prefix = "" if key == "root" else key + "."
        source = impl.meta.get("source", key)
        source_prefix = "" if source in ("", "root") else source + "."
        for name, rec in impl.state.items():
            persistent = rec["kind"] == "parameter" or (rec["kind"] == "buffer" and rec.get("persistent", True))
            if persistent or "tie" in rec or prefix + name in ir.tensors:
                continue
            value = state.get(source_prefix + name, state.get(prefix + name))
            if value is None:
                missing.append(prefix + name)
                continue
            owner, attr = _owner_module(root, ir, modules, prefix + name)
            if attr in owner._buffers:
                owner._buffers[attr] = value
            else:
                setattr(owner, attr, value)
    if missing:
        raise StateDictError(
            f"no value for {len(missing)} tensor(s) outside the state dict: {', '.join(missing)} "
            "(non-persistent buffers or constants of a model converted on the meta device)",
            key=missing[0],
            hint="pass them with the weights: {**model.state_dict(), **dict(model.named_buffers())}, "
                 "or convert a model whose buffers hold real values",
        )
