"""State dicts between an original model and its rebuild.

- :func:`remap_state_dict` turns the original model's state dict into the keys of the
  model an IR rebuilds. Each implementation records its original module path
  (``meta["source"]``) and its state entries, so renamed or removed submodules and
  dropped aliases of a *rewritten* IR still find their tensors.
- :func:`save_safetensors` / :func:`load_safetensors` handle tied tensors, which
  ``safetensors.torch.save_file`` refuses: each tensor is stored once, the other names are
  kept in the file's metadata and restored (as the same tensor) on load. Loading memory-maps.
- :func:`check_state_dict` lists every missing, unexpected, mis-shaped or mis-typed key in
  one :class:`~common.errors.StateDictError`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .errors import StateDictError
from .ir import IR
from .serialize import write_tensors_atomic

ALIASES_KEY = "torch2ir.aliases"


def _prefix(path: str) -> str:
    return "" if path in ("", "root") else path + "."


def state_entries(ir: IR) -> dict[str, tuple[str, str]]:
    """``{rebuilt state-dict key: (implementation key, state name)}`` for every entry a
    state dict of the rebuilt model holds (parameters and persistent buffers, at the
    implementation's key and at each of its aliases)."""
    out: dict[str, tuple[str, str]] = {}
    for key, impl in ir.items():
        for name, rec in impl.state.items():
            if rec["kind"] == "constant" or (rec["kind"] == "buffer" and not rec.get("persistent", True)):
                continue
            for path in (key, *impl.aliases):
                out[_prefix(path) + name] = (key, name)
    return out


def remap_state_dict(state_dict: Mapping[str, torch.Tensor], ir: IR, *, strict: bool = True) -> dict[str, Any]:
    """The original model's ``state_dict`` under the keys of the model ``ir`` rebuilds.

    Entries the IR no longer has (removed modules, dropped aliases) are left out; a tied
    entry takes the tensor of the entry it is tied to when its own key is absent. An IR
    that records no state at all (a hand-written one) keeps the keys as they are.

    Raises:
        StateDictError: (``strict``) entries of the IR found nowhere in ``state_dict``,
            each listed with the keys that were tried.
    """
    if not any(impl.state for impl in ir.values()):
        return dict(state_dict)
    out: dict[str, Any] = {}
    missing: list[str] = []
    for new_key, (key, name) in state_entries(ir).items():
        impl = ir[key]
        rec = impl.state[name]
        source = impl.meta.get("source", key)
        candidates = [_prefix(source) + name, new_key, *(_prefix(a) + name for a in impl.aliases)]
        if isinstance(rec.get("tie"), str):
            candidates.append(rec["tie"])
        found = next((c for c in candidates if c in state_dict), None)
        if found is None:
            missing.append(f"{new_key}: not in the state dict (tried {', '.join(dict.fromkeys(candidates))})")
            continue
        out[new_key] = state_dict[found]
    if missing and strict:
        raise StateDictError(
            f"{len(missing)} entries of the IR are missing from the state dict:\n  " + "\n  ".join(missing),
            hint="pass the original model's state dict, or strict=False to leave them uninitialised",
        )
    return out


def check_state_dict(expected: Mapping[str, torch.Tensor], given: Mapping[str, Any], *, strict: bool = True) -> None:
    """Raise one :class:`StateDictError` listing every key of ``given`` that does not fit ``expected``."""
    problems = []
    for key, tensor in given.items():
        if key not in expected:
            if strict:
                problems.append(f"{key}: unexpected key (the rebuilt model has no such entry)")
            continue
        want = expected[key]
        if tuple(want.shape) != tuple(tensor.shape):
            problems.append(f"{key}: expected shape {tuple(want.shape)}, found {tuple(tensor.shape)}")
        elif want.dtype != tensor.dtype:
            problems.append(f"{key}: expected dtype {want.dtype}, found {tensor.dtype}")
    if strict:
        problems += [f"{k}: missing from the state dict" for k in expected if k not in given]
    if problems:
        raise StateDictError(
            f"the state dict does not fit the rebuilt model ({len(problems)} problems):\n  " + "\n  ".join(problems),
            hint="remap it with common.remap_state_dict(state_dict, ir), declare a state_map on your override, "
            "or pass strict=False",
        )


def save_safetensors(state_dict: Mapping[str, torch.Tensor], path: str | os.PathLike) -> Path:
    """Save a state dict to ``.safetensors``, storing each shared tensor once (atomic write)."""
    kept: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    first: dict[tuple, str] = {}
    for key, tensor in state_dict.items():
        ident = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
                 tuple(tensor.stride()), tensor.dtype) if not tensor.is_meta else (id(tensor),)
        if ident in first and ident[0] != 0:
            aliases[key] = first[ident]
            continue
        first[ident] = key
        kept[key] = tensor
    metadata = {ALIASES_KEY: json.dumps(aliases, sort_keys=True)}
    return write_tensors_atomic(path, kept, metadata)


def load_safetensors(path: str | os.PathLike, *, device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Load a ``.safetensors`` state dict by memory map, restoring aliases as the same tensor.

    Raises:
        StateDictError: the file is missing or not a safetensors file.
    """
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device=str(device)) as fh:
            out = {key: fh.get_tensor(key) for key in fh.keys()}  # noqa: SIM118 - safe_open has no __iter__
            metadata = fh.metadata() or {}
    except FileNotFoundError:
        raise StateDictError(f"no such state file: {os.fspath(path)}", key=os.fspath(path)) from None
    except (SafetensorError, OSError) as exc:
        raise StateDictError(f"cannot read {os.fspath(path)} as safetensors: {exc}", key=os.fspath(path)) from None
    try:
        aliases = json.loads(metadata.get(ALIASES_KEY, "{}"))
    except ValueError:
        raise StateDictError(f"{os.fspath(path)}: malformed {ALIASES_KEY} metadata", key=ALIASES_KEY) from None
    for alias, kept in aliases.items():
        if kept not in out:
            raise StateDictError(f"{os.fspath(path)}: alias {alias!r} points to missing key {kept!r}", key=alias)
        out[alias] = out[kept]
    return out
