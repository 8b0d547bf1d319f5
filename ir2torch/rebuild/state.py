"""Loading state into a rebuilt model: remap, override state maps, checks, assignment.

A state dict (or a ``.safetensors`` path, memory-mapped) is turned into the rebuild's
keys by :func:`common.state_dict.remap_state_dict`; implementations built by an override
that declared a ``state_map`` then get their slice rewritten by it (a ``QuantLinear``
turning ``weight`` into ``weight_q`` and ``scale``). Every mismatch is reported at once.
On a model rebuilt on ``meta`` the tensors are *assigned* (never copied), then ties are
re-made.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from common.errors import StateDictError, listing
from common.ir import IR
from common.state_dict import check_state_dict, load_safetensors, packed_entries, remap_state_dict, unpack_int8
from common.torchao_tensors import class_name

StateMap = Callable[[Any, dict[str, torch.Tensor]], dict[str, torch.Tensor]]


def read_state(state_dict: Mapping[str, torch.Tensor] | str | os.PathLike) -> Mapping[str, torch.Tensor]:
    """A mapping as is; a path is loaded as ``.safetensors`` (memory-mapped, aliases restored)."""
    if isinstance(state_dict, (str, os.PathLike)):
        return load_safetensors(state_dict)
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"state_dict must be a mapping or a .safetensors path, not {type(state_dict).__name__}")
    return state_dict


def apply_state_maps(ir: IR, state: dict[str, torch.Tensor], maps: Mapping[str, StateMap]) -> dict[str, Any]:
    """Rewrite each implementation's slice of ``state`` with its builder's state map."""
    for key, fn in maps.items():
        impl = ir[key]
        for path in (key, *impl.aliases):
            prefix = "" if path == "root" else path + "."
            names = [n for n in impl.state if prefix + n in state]
            chunk = {n: state.pop(prefix + n) for n in names}
            try:
                new = fn(impl, chunk)
            except Exception as exc:
                raise StateDictError(f"state_map of the override failed: {type(exc).__name__}: {exc}",
                                     implementation=key, hint="fix the state_map passed to register_override") from exc
            if not isinstance(new, Mapping):
                raise StateDictError("state_map must return a dict of tensors", implementation=key)
            state.update({prefix + n: t for n, t in new.items()})
    return state


def _versioned(state: dict[str, Any], versions: dict[str, Any], packed: set[str]) -> OrderedDict[str, Any]:
    """``state`` with the rebuilt modules' state-dict versions (``_metadata``), as ``model.state_dict()`` has them.

    Without them, ``load_state_dict`` takes every module's entries for a first-version checkpoint's, and some
    classes rewrite what they load: an observer (``torch.ao``) resets its ``eps`` buffer to float32's epsilon,
    losing a qconfig's own (``eps=2**-12``). The modules of an int8 ``Linear``'s unpacked entries (``packed``) keep
    no version: their first-version form is the unpacked one (``weight``, ``bias``).
    """
    out: OrderedDict[str, Any] = OrderedDict(state)
    for key in packed:
        prefix = key.rpartition(".")[0]
        versions.pop(prefix, None)
        versions.pop(f"{prefix}._packed_params" if prefix else "_packed_params", None)
    out._metadata = versions  # type: ignore[attr-defined]  # what torch's load_state_dict reads
    return out


def load_into(model: nn.Module, ir: IR, state_dict: Mapping[str, torch.Tensor] | str | os.PathLike,
              maps: Mapping[str, StateMap], *, strict: bool, retie: Callable[[], None]) -> None:
    """Load ``state_dict`` (original keys) into ``model`` rebuilt from ``ir``.

    Only recorded state entries of ``ir`` are taken, each checked against its record's shape and
    dtype. ``strict``: every entry must be present and every key of ``state_dict`` must be a
    recorded entry (:func:`common.state_dict.known_keys`); not ``strict``: missing entries keep
    their uninitialised values and unknown keys are ignored (never set on the model).

    Raises:
        StateDictError: the state does not fit; every problem listed at once.
    """
    state = remap_state_dict(read_state(state_dict), ir, strict=strict, refuse_unknown=True)
    state = apply_state_maps(ir, state, maps)
    saved = model.state_dict(keep_vars=True)
    versions = dict(getattr(saved, "_metadata", {}))
    # an int8 Linear's packed weight and bias: its load_state_dict packs them anew, whatever the rebuilt one holds
    # (remap_state_dict checked them against the IR's records)
    packed = packed_entries(saved)
    saved = unpack_int8(saved, keep_none=True)
    expected = {k: t for k, t in saved.items() if t is not None and k not in packed}
    check_state_dict(expected, {k: t for k, t in state.items() if k not in packed}, strict=strict)
    for key, tensor in saved.items():  # an absent bias of an int8 module, which its load_state_dict reads
        if key.endswith("bias") and key not in state and key[: -len("bias")] + "weight" in state and \
                (tensor is None or key in packed):
            state[key] = None
    on_meta = any(t.is_meta for t in expected.values())
    # torchao weights (their class checked against the IR's records) are put in place as copies of their own class:
    # copying one into the rebuilt float parameter would not make it one
    assigned = {k: state.pop(k).detach().clone() for k in [k for k, t in state.items() if class_name(t) is not None]}
    # the keys were checked above against the model's own state_dict(); a module whose loading asks for more
    # than its state_dict() gives (brevitas' runtime-statistics scale before statistics are collected) keeps that
    # entry's value from the IR, as its original does
    result = model.load_state_dict(_versioned(state, versions, packed), strict=False, assign=on_meta)
    wrong = [k for k in result.missing_keys if k in expected and k not in assigned] + list(result.unexpected_keys)
    if strict and wrong:
        raise StateDictError(f"loading the state dict left {len(wrong)} entries unset or unused: {listing(wrong)}",
                             key=wrong[0], hint="the rebuilt model's modules load otherwise than they save")
    if assigned:
        model.load_state_dict(assigned, strict=False, assign=True)
    if on_meta or assigned:
        retie()
