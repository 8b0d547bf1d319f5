"""Assemble the rebuilt module tree: one module per implementation, attached at its key
and at every alias, with tied tensors re-tied, recorded dtypes restored, and the values
of non-persistent buffers / constants the IR carries put back.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from common.errors import IRFormatError, StateDictError, listing
from common.ir import IR, parent_key
from common.none_slots import attach_none_slots
from common.state_dict import in_state_dict, record_mismatch
from ir2torch.rebuild.paths import relative_path, set_submodule


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
    for key in [*keys, "root"]:
        if "none_children" in ir[key].meta:  # a container's None slots (common.none_slots)
            attach_none_slots(modules[key], ir[key].meta, key)
        if ir[key].meta.get("children") is not None:  # null: absent, as validation reads it
            _reorder(modules[key], ir[key].meta["children"])
    return root


def _reorder(module: nn.Module, order: list[str]) -> None:
    """Put ``module``'s children named in ``order`` (``meta["children"]``) in that order, in the places they hold
    (aliases are attached last, and an ``nn.Sequential`` runs its children in their order). A child the list does
    not name (a rewrite inserted it) keeps its place; a name of no child (a rewrite removed it) is passed over."""
    names = list(module._modules)
    listed = set(order)
    slots = [i for i, name in enumerate(names) if name in listed]
    present = set(names)
    for slot, name in zip(slots, [n for n in order if n in present], strict=True):
        names[slot] = name
    module._modules = {name: module._modules[name] for name in names}


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
    """Recorded dtypes and ``requires_grad`` flags (a builder makes every parameter trainable; a frozen one of
    the original stays frozen), then ties (a tied entry becomes the very tensor it is tied to)."""
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
            wanted = rec.get("requires_grad")
            if rec["kind"] == "parameter" and isinstance(wanted, bool) and isinstance(table.get(name), nn.Parameter) \
                    and table[name].requires_grad != wanted:
                table[name].requires_grad_(wanted)
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


_MODULE_TRAIN = nn.Module.train


def restore_modes(ir: IR, modules: Mapping[str, nn.Module]) -> None:
    """Each module gets the ``training`` flag the original had (eval unless recorded otherwise)."""
    root = modules["root"]
    tree = list(root.modules())
    if all(type(m).train is _MODULE_TRAIN for m in tree):
        # ``nn.Module.train`` everywhere: ``root.train(False)`` reaches every module (each implementation's is attached
        # below the root), and calling it again on each implementation, as below, would change nothing. It sets
        # ``training`` on each; a module whose class keeps ``nn.Module``'s attribute setting gets it written in its
        # dictionary, where that setting puts a plain value (ten times faster, at 10**5 modules a second)
        plain: dict[type, bool] = {}
        for module in tree:
            cls = type(module)
            if plain.get(cls) is None:
                plain[cls] = _plain_flag(cls)
            if plain[cls]:
                module.__dict__["training"] = False
            else:
                module.training = False
    else:  # a class with its own ``train`` sees each call it always saw
        for key in ir:
            modules[key].train(False)
    for key, impl in ir.items():
        flag = impl.meta.get("training")
        if isinstance(flag, bool) and modules[key].training is not flag:
            modules[key].training = flag


def _plain_flag(cls: type) -> bool:
    """Whether ``obj.training = flag`` on an instance of ``cls`` only stores the flag in its dictionary: the class
    keeps ``nn.Module.__setattr__`` and defines nothing named ``training`` (a descriptor would be called)."""
    return cls.__setattr__ is nn.Module.__setattr__ and not any("training" in vars(c) for c in cls.__mro__)


def _unsaved(rec: dict) -> bool:
    """A record whose value is in no state dict: a non-persistent buffer or a constant, not tied."""
    return not in_state_dict(rec) and "tie" not in rec


def _put(owner: nn.Module, name: str, value: torch.Tensor, path: str) -> None:
    """Set a buffer or plain tensor attribute ``name`` of ``owner``, never shadowing anything else."""
    if name in owner._buffers:
        owner._buffers[name] = value
        return
    if owner._parameters.get(name) is not None:  # a parameter its module leaves out of its state dict
        owner._parameters[name] = nn.Parameter(value, requires_grad=owner._parameters[name].requires_grad)
        return
    current = vars(owner).get(name)
    if not isinstance(current, torch.Tensor) and (
        hasattr(type(owner), name) or name in owner._modules or name in owner._parameters or current is not None
    ):
        raise IRFormatError(f"state {path!r} would replace the attribute {name!r} of its module, not a tensor",
                            key=path, hint="rename the state entry: it must not collide with a method or submodule")
    setattr(owner, name, value)


def restore_tensors(ir: IR, modules: Mapping[str, nn.Module], device: torch.device | str | None) -> None:
    """Put back the values the IR carries (``ir.tensors``) for state no state dict holds.

    Each value must be that of a recorded non-persistent buffer or constant (not tied) at
    ``<implementation key>.<name>``, of the recorded shape and dtype; all are checked before any is set.

    Raises:
        IRFormatError: a value names no such record, or does not fit it; every problem listed.
    """
    records = {("" if key == "root" else key + ".") + name: rec
               for key, impl in ir.items() for name, rec in impl.state.items()}
    problems = []
    for path, value in ir.tensors.items():
        rec = records.get(path)
        if rec is None:
            problems.append(f"{path}: no recorded state entry has this path")
        elif not _unsaved(rec):
            what = f"tied to {rec['tie']!r}" if "tie" in rec else \
                "a parameter" if rec["kind"] == "parameter" else "a persistent buffer"
            problems.append(f"{path}: the entry is {what}; its value comes from the state dict")
        elif (why := record_mismatch(rec, value)) is not None:
            problems.append(f"{path}: {why}")
    if problems:
        raise IRFormatError(
            f"the IR's tensors (ir.tensors, the .safetensors beside the JSON) do not fit its state records "
            f"({len(problems)} problems):\n  " + listing(problems),
            key=problems[0].split(":", 1)[0],
            hint="ir.tensors holds only values of recorded non-persistent buffers and constants, "
                 "of the recorded shape and dtype; re-save the IR from the model",
        )
    root = modules["root"]
    for path, value in ir.tensors.items():
        owner, name = _owner_module(root, ir, modules, path)
        _put(owner, name, value if device is None else value.to(device), path)


def restore_unsaved(ir: IR, modules: Mapping[str, nn.Module], state: Mapping[str, torch.Tensor]) -> None:
    """Values of non-persistent buffers and constants that the IR could not keep (converted on ``meta``).

    They are in no state dict, so they are taken from ``state`` under their original path (pass
    ``{**model.state_dict(), **dict(model.named_buffers())}``).

    Each value must have its record's shape and dtype; only recorded entries are set.

    Raises:
        StateDictError: such a value is in neither the IR nor ``state``, or does not fit its
            record; lists every one.
    """
    root, missing, wrong = modules["root"], [], []
    found: list[tuple[str, torch.Tensor]] = []
    for key, impl in ir.items():
        prefix = "" if key == "root" else key + "."
        source = impl.meta.get("source", key)
        source = source if isinstance(source, str) else key
        source_prefix = "" if source in ("", "root") else source + "."
        for name, rec in impl.state.items():
            if in_state_dict(rec) or "tie" in rec or prefix + name in ir.tensors:
                continue
            value = state.get(source_prefix + name, state.get(prefix + name))
            if value is None:
                missing.append(prefix + name)
                continue
            why = record_mismatch(rec, value)
            if why is not None:
                wrong.append(f"{prefix + name}: {why}")
                continue
            found.append((prefix + name, value))
    if wrong:
        raise StateDictError(
            f"{len(wrong)} tensor(s) outside the state dict do not fit their records:\n  " + listing(wrong),
            key=wrong[0].split(":", 1)[0], hint="pass the original model's buffers",
        )
    for path, value in found:
        owner, attr = _owner_module(root, ir, modules, path)
        _put(owner, attr, value, path)
    if missing:
        raise StateDictError(
            f"no value for {len(missing)} tensor(s) outside the state dict: {listing(missing, sep=', ')} "
            "(non-persistent buffers or constants of a model converted on the meta device)",
            key=missing[0],
            hint="pass them with the weights: {**model.state_dict(), **dict(model.named_buffers())} (and "
                 "**dict(model.named_parameters()) for parameters a module leaves out of its state dict), or convert "
                 "a model whose buffers hold real values",
        )
