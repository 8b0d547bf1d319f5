"""The state that travels with a rewrite: reading the input state, recording new tensors, the output state.

A rewrite takes the state dict of the IR it is given (the original model's ``state_dict()``, or the
state an earlier rewrite produced) and returns the state dict of the IR it makes, keyed by that IR's
keys: ``ir2torch.convert(new_ir, new_state)`` loads it with ``strict=True``. A *state transform*
``fn(original) -> {name: tensor}`` reads any tensor of the input state by its path in the input IR
(``original["layer1.0.bn1.running_var"]``) and returns the tensors of the new implementation by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from common.errors import StateDictError, listing
from common.ir import IR
from common.state_dict import record_mismatch, remap_state_dict, state_entries

StateTransform = Callable[[Mapping[str, torch.Tensor]], Mapping[str, torch.Tensor]]


class MissingStateError(StateDictError, KeyError):
    """A state transform read a path the input state does not hold (also a ``KeyError``: ``view.get`` works)."""


class StateView(Mapping[str, torch.Tensor]):
    """Read-only view of the input state by path; a missing path raises :class:`StateDictError` naming it."""

    def __init__(self, state: Mapping[str, torch.Tensor]) -> None:
        self._state = state

    def __getitem__(self, key: str) -> torch.Tensor:
        try:
            return self._state[key]
        except KeyError:
            raise MissingStateError(f"the state transform reads {key!r}, which the input state does not hold", key=key,
                                 hint="read tensors by their path in the IR given to the rewrite "
                                 "('<implementation key>.<name>')") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)


def input_state(ir: IR, state: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor] | None:
    """The given state under the keys of ``ir`` (original paths resolved), every entry checked.

    Raises:
        StateDictError: an entry of ``ir`` is missing or does not fit its record.
    """
    if state is None:
        return None
    return remap_state_dict(state, ir, strict=True)


def records_for(tensors: Mapping[str, torch.Tensor], like: Mapping[str, Mapping[str, Any]],
                key: str) -> dict[str, dict[str, Any]]:
    """State records of new tensors: kind and flags from the record of the same name in ``like``, else a
    parameter (floating point) or a persistent buffer (any other dtype).

    Raises:
        StateDictError: a value is not a tensor or its name is no string.
    """
    out: dict[str, dict[str, Any]] = {}
    for name, tensor in tensors.items():
        if not isinstance(name, str) or not isinstance(tensor, torch.Tensor):
            raise StateDictError(f"the state transform returned {name!r}: {type(tensor).__name__}, not a tensor",
                                 implementation=key, hint="return {state name: tensor}")
        rec: dict[str, Any] = {"kind": "parameter", "shape": list(tensor.shape), "dtype": tensor.dtype}
        old = like.get(name)
        if old is not None and old["kind"] != "constant":
            rec["kind"] = old["kind"]
        elif not (tensor.dtype.is_floating_point or tensor.dtype.is_complex):
            rec["kind"] = "buffer"
        if rec["kind"] == "parameter":
            rec["requires_grad"] = bool(old.get("requires_grad", True)) if old else True
        else:
            rec["persistent"] = bool(old.get("persistent", True)) if old else True
        out[name] = rec
    return out


def run_transform(fn: StateTransform, state: Mapping[str, torch.Tensor], key: str) -> dict[str, torch.Tensor]:
    """``fn(view of state)`` as a dict; any failure of ``fn`` becomes a :class:`StateDictError`.

    Raises:
        StateDictError: ``fn`` raised or returned something other than a mapping.
    """
    try:
        out = fn(StateView(state))
    except StateDictError:
        raise
    except Exception as exc:
        raise StateDictError(f"the state transform failed: {type(exc).__name__}: {exc}", implementation=key,
                             hint="fix the state transform passed to the rewrite") from exc
    if not isinstance(out, Mapping):
        raise StateDictError(f"the state transform returned {type(out).__name__}, not a dict of tensors",
                             implementation=key, hint="return {state name: tensor}")
    return {name: tensor.detach() if isinstance(tensor, torch.Tensor) else tensor for name, tensor in out.items()}


def output_state(ir: IR, state: dict[str, torch.Tensor] | None, new: Mapping[str, torch.Tensor]) -> (
        dict[str, torch.Tensor] | None):
    """The state dict of the rewritten ``ir``: its entries taken from ``new`` (tensors the rewrite made,
    by full path) or else ``state``, each checked against its record.

    Raises:
        StateDictError: an entry has no value or does not fit its record (every problem listed).
    """
    if state is None:
        return None
    out: dict[str, torch.Tensor] = {}
    problems: list[str] = []
    for path, (key, name) in state_entries(ir).items():
        primary = ("" if key == "root" else key + ".") + name
        value = new.get(primary, state.get(path, state.get(primary)))
        if value is None:
            problems.append(f"{path}: no value (neither made by the rewrite nor in the input state)")
            continue
        why = record_mismatch(ir[key].state[name], value)
        if why is not None:
            problems.append(f"{path}: {why}")
            continue
        out[path] = value
    if problems:
        raise StateDictError(f"the rewritten state does not fit the rewritten IR ({len(problems)} problems):\n  "
                             + listing(problems), key=problems[0].split(":", 1)[0],
                             hint="the state transform must return every state entry of the new implementation")
    return out


__all__ = ["MissingStateError", "StateTransform", "StateView", "input_state", "output_state", "records_for",
           "run_transform"]
