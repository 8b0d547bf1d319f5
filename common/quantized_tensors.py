"""Quantized tensors in ``.safetensors`` files, as data.

safetensors stores plain dtypes only. A quantized tensor (the weight of an eager int8 convolution or linear) is
stored as its integer representation (``int_repr()``: ``int8`` for ``qint8``, ``uint8`` for ``quint8``, ``int32``
for ``qint32``) under its own key, and its quantization parameters as a JSON record in the file's metadata
(:data:`QUANTIZED_KEY`)::

    {"conv.weight": {"dtype": "qint8", "qscheme": "per_channel_affine", "axis": 0,
                     "scales": [0.012, ...], "zero_points": [0, ...]},
     "fc.weight": {"dtype": "qint8", "qscheme": "per_tensor_affine", "scale": 0.03, "zero_point": 0}}

Reading checks every field (the dtype against the stored one, finite positive scales, zero points inside the
dtype's range, one scale and zero point per slice along ``axis``) before a tensor is made; anything else is a
:class:`~common.errors.StateDictError` naming the key.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .errors import IRFormatError, StateDictError
from .json_files import loads_json

QUANTIZED_KEY = "torch2ir.quantized"

#: ``{quantized dtype name: (quantized dtype, stored integer dtype)}``.
DTYPES: dict[str, tuple[torch.dtype, torch.dtype]] = {
    "qint8": (torch.qint8, torch.int8), "quint8": (torch.quint8, torch.uint8), "qint32": (torch.qint32, torch.int32)}
_PER_TENSOR, _PER_CHANNEL = "per_tensor_affine", "per_channel_affine"


def to_stored(tensor: torch.Tensor) -> tuple[torch.Tensor, dict[str, Any]]:
    """The integer tensor stored for quantized ``tensor`` and its metadata record.

    Raises:
        StateDictError: a quantization scheme other than per-tensor or per-channel affine.
    """
    name = str(tensor.dtype).removeprefix("torch.")
    scheme = tensor.qscheme()
    record: dict[str, Any] = {"dtype": name}
    if scheme == torch.per_tensor_affine:
        record.update(qscheme=_PER_TENSOR, scale=float(tensor.q_scale()), zero_point=int(tensor.q_zero_point()))
    elif scheme == torch.per_channel_affine:
        record.update(qscheme=_PER_CHANNEL, axis=int(tensor.q_per_channel_axis()),
                      scales=[float(s) for s in tensor.q_per_channel_scales()],
                      zero_points=[int(z) for z in tensor.q_per_channel_zero_points()])
    else:
        raise StateDictError(f"a quantized tensor of scheme {scheme} cannot be stored",
                             hint="per-tensor and per-channel affine quantized tensors can")
    return tensor.int_repr().contiguous(), record


def read_records(text: Any, source: str, name: str = QUANTIZED_KEY) -> dict[str, dict[str, Any]]:
    """The ``{key: record}`` table of a file's ``name`` metadata (:data:`QUANTIZED_KEY` by default), checked to be
    JSON objects.

    Raises:
        StateDictError: the metadata is not a JSON object of objects.
    """
    try:  # bounded: a weights file's metadata is read like any document (nesting, size)
        records = loads_json(text, source=f"{source} {name}") if isinstance(text, str) else None
    except IRFormatError:
        records = None
    if not isinstance(records, dict) or not all(isinstance(r, dict) for r in records.values()):
        raise StateDictError(f"{source}: malformed {name} metadata", key=name,
                             hint=f"{name} maps each quantized tensor's key to its record")
    return records


def _number(value: Any, kind: type) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool) and (kind is int or math.isfinite(value))


def from_stored(key: str, stored: torch.Tensor, record: dict[str, Any], source: str) -> torch.Tensor:
    """The quantized tensor ``record`` describes, of integer values ``stored``.

    Raises:
        StateDictError: a field of ``record`` is missing, of the wrong type or out of range, or does not fit
            ``stored``.
    """
    def bad(why: str) -> StateDictError:
        return StateDictError(f"{source}: the quantization record of {key!r} {why}", key=key,
                              hint="re-save the state with common.save_safetensors")

    dtypes = DTYPES.get(record.get("dtype")) if isinstance(record.get("dtype"), str) else None
    if dtypes is None:
        raise bad(f"has dtype {record.get('dtype')!r} (one of {', '.join(DTYPES)})")
    if stored.dtype != dtypes[1]:
        raise bad(f"says {record['dtype']} where the stored tensor is {stored.dtype} (expected {dtypes[1]})")
    info = torch.iinfo(dtypes[1])
    scheme = record.get("qscheme")
    fields = {"dtype", "qscheme", *(("scale", "zero_point") if scheme == _PER_TENSOR else
                                    ("axis", "scales", "zero_points"))}
    if scheme not in (_PER_TENSOR, _PER_CHANNEL) or set(record) != fields:
        raise bad(f"has fields {sorted(record)} (a {scheme!r} record has exactly {sorted(fields)})")
    if scheme == _PER_TENSOR:
        scale, zero_point = record["scale"], record["zero_point"]
        if not (_number(scale, float) and scale > 0):
            raise bad(f"has scale {scale!r} (a finite positive number)")
        if not (_number(zero_point, int) and info.min <= zero_point <= info.max):
            raise bad(f"has zero point {zero_point!r} (an integer in [{info.min}, {info.max}])")
        return torch._make_per_tensor_quantized_tensor(stored, scale, zero_point)
    axis, scales, zero_points = record["axis"], record["scales"], record["zero_points"]
    if not (_number(axis, int) and 0 <= axis < stored.dim()):
        raise bad(f"has axis {axis!r} for a tensor of {stored.dim()} dimensions")
    count = stored.shape[axis]
    if not (isinstance(scales, list) and len(scales) == count and all(_number(s, float) and s > 0 for s in scales)):
        raise bad(f"needs {count} finite positive scales")
    if not (isinstance(zero_points, list) and len(zero_points) == count and
            all(_number(z, int) and info.min <= z <= info.max for z in zero_points)):
        raise bad(f"needs {count} zero points in [{info.min}, {info.max}]")
    return torch._make_per_channel_quantized_tensor(stored, torch.tensor(scales, dtype=torch.float64),
                                                    torch.tensor(zero_points, dtype=torch.int64), axis)


__all__ = ["DTYPES", "QUANTIZED_KEY", "from_stored", "read_records", "to_stored"]
