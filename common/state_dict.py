"""State dicts between an original model and its rebuild.

- :func:`remap_state_dict` turns the original model's state dict into the keys of the
  model an IR rebuilds. Each implementation records its original module path
  (``meta["source"]``) and its state entries, so renamed or removed submodules and
  dropped aliases of a *rewritten* IR still find their tensors.
- :func:`save_safetensors` / :func:`load_safetensors` handle tied tensors, which
  ``safetensors.torch.save_file`` refuses: each tensor is stored once, the other names are
  kept in the file's metadata and restored (as the same tensor) on load. Loading memory-maps. Quantized
  tensors (an int8 model's weights) are stored as integers and quantization records
  (:mod:`common.quantized_tensors`).
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

from .errors import SHOWN, IRFormatError, StateDictError, listing
from .ir import IR
from .json_files import loads_json
from .quantized_tensors import QUANTIZED_KEY, from_stored, read_records, to_stored
from .tensor_files import write_tensors_atomic
from .torchao_tensors import SUBCLASS_KEY, class_name
from .torchao_tensors import from_stored as subclass_from_stored
from .torchao_tensors import to_stored as subclass_to_stored

ALIASES_KEY = "torch2ir.aliases"


def _prefix(path: str) -> str:
    return "" if path in ("", "root") else path + "."


def in_state_dict(rec: Mapping[str, Any]) -> bool:
    """Whether a state record's value is in the model's state dict: parameters and buffers, unless recorded
    ``"persistent": false`` (a non-persistent buffer, or a parameter its module leaves out of its state dict, as
    brevitas' runtime-statistics scale does until statistics are collected); never a constant."""
    return rec["kind"] in ("parameter", "buffer") and bool(rec.get("persistent", True))


def state_entries(ir: IR) -> dict[str, tuple[str, str]]:
    """``{rebuilt state-dict key: (implementation key, state name)}`` for every entry a
    state dict of the rebuilt model holds (parameters and persistent buffers, at the
    implementation's key and at each of its aliases)."""
    out: dict[str, tuple[str, str]] = {}
    for key, impl in ir.items():
        for name, rec in impl.state.items():
            if not in_state_dict(rec):
                continue
            for path in (key, *impl.aliases):
                out[_prefix(path) + name] = (key, name)
    return out


def _source(impl: Any, key: str) -> str:
    source = impl.meta.get("source", key)
    return source if isinstance(source, str) else key


def known_keys(ir: IR) -> set[str]:
    """Every key under which a state dict given for ``ir`` can hold a value: each recorded state
    entry (parameters, buffers, constants) at its original path (``meta["source"]``), at its
    implementation's key and at each alias. Any other key is *unknown* to the IR."""
    out: set[str] = set()
    for key, impl in ir.items():
        paths = (_source(impl, key), key, *impl.aliases)
        out.update(_prefix(path) + name for name in impl.state for path in paths)
    return out


def record_mismatch(rec: Mapping[str, Any], tensor: Any) -> str | None:
    """Why ``tensor`` cannot be the value of state record ``rec`` (shape, dtype), or None if it fits.

    A symbolic dimension (a string) of the record matches any size.
    """
    if not isinstance(tensor, torch.Tensor):
        return f"expected a tensor, found {type(tensor).__name__}"
    want = rec["shape"]
    if len(want) != tensor.dim() or any(isinstance(w, int) and w != n for w, n in zip(want, tensor.shape)):
        return f"expected shape {tuple(want)}, found {tuple(tensor.shape)}"
    if tensor.dtype != rec["dtype"]:
        return f"expected dtype {rec['dtype']}, found {tensor.dtype}"
    if rec.get("subclass") != class_name(tensor):  # a torchao weight, of its class only
        return f"expected {rec.get('subclass') or 'a plain tensor'}, found {class_name(tensor) or 'a plain tensor'}"
    return None


_PACKED = "_packed_params._packed_params"
_PACKED_DTYPE = "_packed_params.dtype"


def unpack_int8(state_dict: Mapping[str, Any], *, keep_none: bool = False) -> Mapping[str, Any]:
    """``state_dict`` with the packed entries of eager int8 modules in the form an IR records them.

    An int8 ``Linear`` (``torch.ao.nn.quantized``) saves its weight and bias as one tuple under
    ``<path>._packed_params._packed_params`` and its packing dtype under ``<path>._packed_params.dtype``; an int8
    convolution saves ``<path>.weight`` and ``<path>.bias``, the bias ``None`` when it has none. Here the tuple
    becomes ``<path>.weight`` and ``<path>.bias``, the ``qint8`` packing dtype is dropped (it is the only one an IR
    carries) and an absent bias (``None`` next to a quantized weight) is left out, unless ``keep_none``. Every
    other entry is kept as it is; a mapping without packed entries is returned as it is.
    """
    if not any(k.endswith((_PACKED, _PACKED_DTYPE)) or v is None for k, v in state_dict.items()):
        return state_dict
    out: dict[str, Any] = {}
    for key, value in state_dict.items():
        prefix = key[: -len(_PACKED)]
        if key.endswith(_PACKED) and prefix in ("", prefix.rstrip(".") + ".") and isinstance(value, tuple) \
                and len(value) == 2:
            out[prefix + "weight"], out[prefix + "bias"] = value
        elif key.endswith(_PACKED_DTYPE) and value is torch.qint8:
            continue
        else:
            out[key] = value
    if keep_none:
        return out
    for key in [k for k, v in out.items() if v is None and k.endswith("bias")]:
        weight = out.get(key[: -len("bias")] + "weight")
        if isinstance(weight, torch.Tensor) and weight.is_quantized:
            del out[key]
    return out


def packed_entries(state_dict: Mapping[str, Any]) -> set[str]:
    """The keys :func:`unpack_int8` makes of the packed entries of ``state_dict`` (``<path>.weight``, ``<path>.bias``
    of each int8 ``Linear``)."""
    return {key[: -len(_PACKED)] + name for key in state_dict if key.endswith(_PACKED) for name in ("weight", "bias")}


def remap_state_dict(
    state_dict: Mapping[str, torch.Tensor], ir: IR, *, strict: bool = True, refuse_unknown: bool = False
) -> dict[str, Any]:
    """The original model's ``state_dict`` under the keys of the model ``ir`` rebuilds.

    Entries the IR no longer has (removed modules, dropped aliases) are left out, unless
    ``refuse_unknown``; a tied entry takes the tensor of the entry it is tied to when its own
    key is absent. Every tensor taken must have the shape and dtype its state record declares.
    An IR that records no state at all (a hand-written one) keeps the keys as they are.

    Args:
        state_dict: the original model's state dict.
        ir: the IR the state is for.
        strict: refuse entries of the IR found nowhere in ``state_dict``.
        refuse_unknown: (with ``strict``) also refuse keys of ``state_dict`` that are no
            recorded state entry of the IR (see :func:`known_keys`).

    Raises:
        StateDictError: tensors of the wrong shape or dtype (always), and with ``strict``
            entries missing (each listed with the keys that were tried) or unknown keys;
            every problem is listed in one error. Always: the state dict holds entries of
            modules a rewrite replaced (the state before the rewrite, :mod:`common.provenance`).
    """
    state_dict = unpack_int8(state_dict)
    if not any(impl.state for impl in ir.values()):
        return dict(state_dict)
    _refuse_consumed(state_dict, ir)
    out: dict[str, Any] = {}
    missing: list[str] = []
    problems: list[str] = []
    for new_key, (key, name) in state_entries(ir).items():
        impl = ir[key]
        rec = impl.state[name]
        candidates = [_prefix(_source(impl, key)) + name, new_key, *(_prefix(a) + name for a in impl.aliases)]
        if isinstance(rec.get("tie"), str):
            candidates.append(rec["tie"])
        found = next((c for c in candidates if c in state_dict), None)
        if found is None:
            missing.append(f"{new_key}: not in the state dict (tried {', '.join(dict.fromkeys(candidates))})")
            continue
        why = record_mismatch(rec, state_dict[found])
        if why is not None:
            problems.append(f"{found}: {why}")
            continue
        out[new_key] = state_dict[found]
    unknown: list[str] = []
    if strict and refuse_unknown:
        known = known_keys(ir)
        unknown = [f"{k}: unexpected key (no recorded state entry of the IR)" for k in state_dict if k not in known]
    if not strict:
        missing = []
    listed = missing + unknown + problems
    if listed:
        counts = [f"{len(lines)} {what}" for lines, what in (
            (missing, "entries of the IR are missing from the state dict"),
            (unknown, "keys of the state dict are no recorded state entry"),
            (problems, "tensors do not fit their records")) if lines]
        raise StateDictError(
            "; ".join(counts) + ":\n  " + "\n  ".join(
                listing(lines, SHOWN // 2) for lines in (missing, unknown, problems) if lines),
            key=listed[0].split(":", 1)[0],
            hint="pass the original model's state dict (for an IR you rewrote: remap_state_dict(state_dict, ir), "
                 "which keeps only the IR's entries), or strict=False to leave missing entries uninitialised "
                 "and ignore unknown keys",
        )
    return out


def _refuse_consumed(state_dict: Mapping[str, Any], ir: IR) -> None:
    """Refuse a state dict holding entries of modules a rewrite replaced (see :mod:`common.provenance`).

    Raises:
        StateDictError: it is the state of the IR before the rewrite: its unfused tensors would load silently.
    """
    from .provenance import consumed_sources

    consumed = consumed_sources(ir)
    if not consumed:
        return
    known = known_keys(ir)
    stale = [k for k in state_dict if k not in known
             and any(".".join(k.split(".")[:i]) in consumed for i in range(1, k.count(".") + 1))]
    if stale:
        raise StateDictError(
            f"the state dict holds {len(stale)} entries of modules a rewrite replaced ({', '.join(stale[:5])}"
            f"{', ...' if len(stale) > 5 else ''}): it is the state of the IR before the rewrite",
            key=stale[0], hint="pass the state the rewrite returned with the IR (new_ir, new_state = ...)")


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
            f"the state dict does not fit the rebuilt model ({len(problems)} problems):\n  " + listing(problems),
            hint="remap it with common.remap_state_dict(state_dict, ir), declare a state_map on your override, "
            "or pass strict=False",
        )


def _subclass_identity(tensor: torch.Tensor) -> tuple:
    """What makes two torchao wrappers one tensor: their class and the memory of each inner tensor."""
    names, _ = tensor.__tensor_flatten__()
    inner = [getattr(tensor, n) for n in names]
    if any(t.is_meta or t.untyped_storage().data_ptr() == 0 for t in inner):
        return ("object", id(tensor))
    return (class_name(tensor), tuple((n, t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
                                       tuple(t.stride()), t.dtype) for n, t in zip(names, inner)))


def save_safetensors(state_dict: Mapping[str, torch.Tensor], path: str | os.PathLike) -> Path:
    """Save a state dict to ``.safetensors``, storing each shared tensor once (atomic write); an int8 model's packed
    entries are stored unpacked (:func:`unpack_int8`), quantized tensors as integers and quantization records,
    torchao's weight tensors as their inner tensors and records (:mod:`common.torchao_tensors`)."""
    state_dict = unpack_int8(state_dict)
    kept: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    first: dict[tuple, str] = {}
    inner: dict[str, torch.Tensor] = {}  # the inner tensors of torchao weights, never aliased
    subclasses: dict[str, Any] = {}
    for key, tensor in state_dict.items():
        if class_name(tensor) is not None:  # a torchao weight: its inner tensors and a record
            ident = _subclass_identity(tensor)  # state_dict() gives a tied weight's two names two wrappers
            if ident in first:
                aliases[key] = first[ident]
                continue
            first[ident] = key
            stored, subclasses[key] = subclass_to_stored(key, tensor)
            inner.update(stored)
            continue
        ident = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape),
                 tuple(tensor.stride()), tensor.dtype) if not tensor.is_meta else (id(tensor),)
        if ident in first and ident[0] != 0:
            aliases[key] = first[ident]
            continue
        first[ident] = key
        kept[key] = tensor
    metadata = {ALIASES_KEY: json.dumps(aliases, sort_keys=True)}
    quantized = {}
    for key, tensor in kept.items():
        if tensor.is_quantized:  # its integers, and its scales and zero points in the metadata
            kept[key], quantized[key] = to_stored(tensor)
    if quantized:
        metadata[QUANTIZED_KEY] = json.dumps(quantized, sort_keys=True)
    if subclasses:
        clashes = sorted(set(inner) & set(kept))
        if clashes:
            raise StateDictError(f"the stored key {clashes[0]!r} of a torchao weight's inner tensor is also a key of "
                                 "the state dict", key=clashes[0], hint="rename that entry")
        kept.update(inner)
        metadata[SUBCLASS_KEY] = json.dumps(subclasses, sort_keys=True)
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
    for key, record in read_records(metadata.get(QUANTIZED_KEY, "{}"), os.fspath(path)).items():
        if key not in out:
            raise StateDictError(f"{os.fspath(path)}: the quantization record {key!r} names no stored tensor", key=key,
                                 hint="each record of the metadata belongs to a stored tensor")
        out[key] = from_stored(key, out[key], record, os.fspath(path))
    _load_subclasses(out, metadata, os.fspath(path))
    for alias, kept in _read_aliases(metadata.get(ALIASES_KEY, "{}"), os.fspath(path)).items():
        if kept not in out:
            raise StateDictError(f"{os.fspath(path)}: alias {alias!r} points to missing key {kept!r}", key=alias)
        if alias in out:
            raise StateDictError(f"{os.fspath(path)}: alias {alias!r} is also a stored tensor", key=alias,
                                 hint="an alias names a key the file does not store")
        out[alias] = out[kept]
    return out


def _load_subclasses(out: dict[str, torch.Tensor], metadata: Mapping[str, Any], source: str) -> None:
    """Replace the inner tensors of each torchao weight of ``out`` by the weight its record describes.

    Raises:
        StateDictError: a record that is malformed, names a stored tensor, or an inner tensor that does not fit.
    """
    if SUBCLASS_KEY not in metadata:
        return
    records = read_records(metadata[SUBCLASS_KEY], source, SUBCLASS_KEY)
    made = {}
    for key, record in records.items():
        if key in out:
            raise StateDictError(f"{source}: the torchao record {key!r} names a stored tensor", key=key,
                                 hint="a torchao weight is stored as its inner tensors only")
        made[key] = subclass_from_stored(key, out, record, source)
    for key, record in records.items():
        for name in record["tensors"]:
            out.pop(f"{key}:{name}", None)
    out.update(made)


def _read_aliases(text: Any, source: str) -> dict[str, str]:
    """The ``{alias: stored key}`` table of a weights file's metadata, checked to be exactly that.

    Raises:
        StateDictError: the metadata is not a JSON object of strings to strings.
    """
    hint = f"{ALIASES_KEY} must be a JSON object mapping each alias key to a stored key (strings)"
    try:  # bounded: a weights file's metadata is read like any document (nesting, size)
        aliases = loads_json(text, source=f"{source} {ALIASES_KEY}") if isinstance(text, str) else None
    except IRFormatError:
        aliases = None
    if not isinstance(aliases, dict):
        raise StateDictError(f"{source}: malformed {ALIASES_KEY} metadata", key=ALIASES_KEY, hint=hint)
    for alias, kept in aliases.items():
        if not isinstance(kept, str) or not alias:
            raise StateDictError(f"{source}: malformed {ALIASES_KEY} entry {alias!r}: {kept!r}",
                                 key=ALIASES_KEY, hint=hint)
    return aliases
