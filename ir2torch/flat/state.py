"""The weights of an executed FlatIR: looked up by state-dict key, checked, attached by path.

Each weight of a :class:`~common.flat.FlatIR` is found under ``weight_name_mapping[placeholder]`` in
the state given (a mapping, a ``.safetensors`` path read by memory map, or the original model), else
in ``flat.tensors``. Every missing or mis-shaped entry is reported at once. Tensors are attached at
their state-dict path, so the executed module's ``state_dict()`` has the original model's keys.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch import nn

from common.errors import StateDictError, listing
from common.flat import FlatIR, WeightMeta
from common.values import dtype_from_name, dtype_name
from ir2torch.rebuild.paths import owner_of
from ir2torch.rebuild.state import read_state
from ir2torch.run_safety.budget import AVAILABLE, Budget, check_budget, shape_bytes, target_device

StateSource = Mapping[str, torch.Tensor] | str | os.PathLike | nn.Module | None

_BUDGET: contextvars.ContextVar[Budget] = contextvars.ContextVar("ir2torch_flat_budget", default=AVAILABLE)

_MISSING_HINT = (
    "pass the original model's state dict (or its .safetensors file); non-persistent buffers and tensor "
    "constants are not in state_dict() and a model lowered on 'meta' has no values for them: add them, e.g. "
    "{**model.state_dict(), **dict(model.named_buffers())}, or pass the original model itself"
)


def module_state(model: nn.Module, keys: list[str]) -> dict[str, torch.Tensor]:
    """The tensors of ``model`` at ``keys``: parameters, buffers (persistent or not) and plain tensor attributes.

    Only ``_modules``, ``_parameters``, ``_buffers`` and instance dicts are read: no property or
    ``__getattr__`` of the model runs.
    """
    out: dict[str, torch.Tensor] = {}
    for key in keys:
        module: Any = model
        *prefix, last = key.split(".")
        for part in prefix:
            module = module._modules.get(part) if isinstance(module, nn.Module) else None
        if not isinstance(module, nn.Module):
            continue
        for table in (module._parameters, module._buffers, vars(module)):
            value = table.get(last)
            if isinstance(value, torch.Tensor):
                out[key] = value
                break
    return out


@contextlib.contextmanager
def weight_budget(budget: Budget) -> Iterator[None]:
    """Within the block, :func:`resolve_weights` checks against ``budget`` (bytes, ``"available"``, None)."""
    token = _BUDGET.set(budget)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def resolve_weights(
    flat: FlatIR, state: StateSource, *, device: torch.device | str | None, strict: bool
) -> dict[str, torch.Tensor]:
    """``{state key: tensor}`` for every weight of ``flat``.

    With no ``state``, weights without a value in ``flat.tensors`` are created uninitialised (on
    ``device``; ``"meta"`` allocates nothing). With a state, tensors are used as they are (no copy)
    unless ``device`` names another real device. A FlatIR keeps only the weights its graph reads, so the
    original model's state dict legitimately holds more (unused buffers such as ``num_batches_tracked``, the
    second name of tied parameters); lowering records those keys in ``meta["unread_state"]``, and with
    ``strict`` any key that is neither a weight's nor one of them is refused. Keys that are no weight's are
    never attached. (A FlatIR without ``unread_state``, written before it was recorded, cannot tell: its
    unknown keys are ignored.) Nothing is allocated before every check passed:
    the weights to create or copy must fit the memory budget (:func:`weight_budget`, by default the
    available memory; see :mod:`ir2torch.run_safety.budget`).

    Raises:
        StateDictError: weights of the wrong shape or dtype, and (``strict``) weights missing from the
            state or unknown keys in it; every problem listed at once.
        ResourceBudgetError: the weights to allocate exceed the budget (names the largest).
    """
    keys = [flat.weight_name_mapping[w.name] for w in flat.weights]
    given: Mapping[str, torch.Tensor] | None
    if state is None:
        given = None
    elif isinstance(state, nn.Module):
        given = module_state(state, keys)
    else:
        given = read_state(state)
    target = torch.device(device) if device is not None else None
    chosen: dict[str, torch.Tensor | None] = {}
    problems: list[str] = []
    unread = flat.meta.get("unread_state")
    if strict and given is not None and not isinstance(state, nn.Module) and isinstance(unread, list):
        known = {*keys, *unread, *flat.tensors}
        problems += [f"{key}: unexpected (no weight of the FlatIR and not a key the model had)"
                     for key in given if key not in known]
    for weight, key in zip(flat.weights, keys):
        tensor = given.get(key) if given is not None else None
        if tensor is None:
            tensor = flat.tensors.get(key)
        if tensor is None:
            if given is not None and strict:
                problems.append(f"{key}: missing (weight {weight.name!r}, {weight.kind})")
        elif not isinstance(tensor, torch.Tensor):
            problems.append(f"{key}: expected a tensor, found {type(tensor).__name__}")
        elif list(tensor.shape) != weight.shape or dtype_name(tensor.dtype) != weight.dtype:
            problems.append(f"{key}: expected {weight.dtype}{weight.shape}, found "
                            f"{dtype_name(tensor.dtype)}{list(tensor.shape)}")
        chosen[key] = tensor
    if problems:
        raise StateDictError(
            f"the state does not fit the FlatIR's weights ({len(problems)} problems):\n  " + listing(problems),
            key=problems[0].split(":", 1)[0], hint=_MISSING_HINT,
        )
    check_budget(_allocated(flat, chosen, target), _BUDGET.get(), target_device(device), what="weight")
    out: dict[str, torch.Tensor] = {}
    for weight, key in zip(flat.weights, keys):
        tensor = chosen[key]
        if tensor is None:
            tensor = _empty(weight, target)
        elif target is not None and target.type != "meta" and tensor.device != target:
            tensor = tensor.to(target)
        out[key] = tensor
    return out


def _allocated(flat: FlatIR, chosen: Mapping[str, torch.Tensor | None], target: torch.device | None) -> dict[str, int]:
    """Bytes by state key of the weights :func:`resolve_weights` creates, or copies to ``target``."""
    sizes: dict[str, int] = {}
    for weight in flat.weights:
        key = flat.weight_name_mapping[weight.name]
        tensor = chosen.get(key)
        if tensor is None:
            sizes[key] = shape_bytes(weight.shape, dtype_from_name(weight.dtype))
        elif target is not None and target.type != "meta" and tensor.device != target:
            sizes[key] = tensor.numel() * tensor.element_size()
    return sizes


def _empty(weight: WeightMeta, device: torch.device | None) -> torch.Tensor:
    if not all(isinstance(s, int) for s in weight.shape):
        raise StateDictError(f"weight {weight.name!r} has a symbolic shape {weight.shape} and no value",
                             key=weight.name, hint="pass its value in the state dict")
    return torch.empty(weight.shape, dtype=dtype_from_name(weight.dtype), device=device)


def attach_weights(root: nn.Module, flat: FlatIR, tensors: Mapping[str, torch.Tensor]) -> None:
    """Register each weight on ``root`` at its state-dict path (parameters, buffers, plain constants)."""
    for weight in flat.weights:
        key = flat.weight_name_mapping[weight.name]
        tensor = tensors[key]
        module, last = owner_of(root, key)
        try:
            if weight.kind == "parameter":
                grad = weight.requires_grad if weight.requires_grad is not None else tensor.is_floating_point()
                module.register_parameter(last, nn.Parameter(tensor.detach(), requires_grad=grad))
            elif weight.kind == "buffer":
                module.register_buffer(last, tensor, persistent=weight.persistent is not False)
            else:
                setattr(module, last, tensor)
        except (KeyError, TypeError, AttributeError) as exc:
            raise StateDictError(f"cannot attach weight {weight.name!r} at {key!r}: {exc}", key=key,
                                 hint="the state key collides with an attribute of the executed module") from None
