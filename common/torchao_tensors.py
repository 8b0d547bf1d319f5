"""torchao's quantized weight tensors in ``.safetensors`` files, as data.

``torchao.quantization.quantize_`` replaces a ``Linear``'s weight with a tensor subclass holding integer (or
float8) data and scales. safetensors stores plain tensors only, so such a weight is stored as its inner tensors
(``__tensor_flatten__``'s), each under ``<key>:<inner name>``, and a JSON record per weight in the file's
metadata (:data:`SUBCLASS_KEY`)::

    {"fc.weight": {"class": "torchao.quantization.Int8Tensor", "tensors": ["qdata", "scale", "zero_point"],
                   "attributes": {"block_size": [1, 64], "dtype": "float32", "act_quant_kwargs": null,
                                  "reduce_range": false}}}

Only the classes of :data:`CLASSES` are carried, each with a closed schema of attributes (:data:`_ATTRIBUTES`):
every attribute is plain data (a dtype or enum by name, a granularity as ``{"kind": "PerRow", "dim": -1}``)
checked field by field, and the inner tensors are checked against each other (dtypes, ``block_size`` dividing the
shape, one scale and zero point per block, finite positive scales, integers inside the target range) before
torchao is imported and the tensor is made with the class's ``__tensor_unflatten__``. Anything else is a
:class:`~common.errors.StateDictError` naming the key. torchao is imported only to load a file holding such a
record (by the fixed module names below, never a name read from a file).
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from .errors import StateDictError

SUBCLASS_KEY = "torch2ir.subclasses"
_INT8 = "torchao.quantization.Int8Tensor"
_FLOAT8 = "torchao.quantization.Float8Tensor"
_INTX = "torchao.quantization.IntxUnpackedToInt8Tensor"
#: The torchao weight subclasses carried, by qualified name: ``{name: (required inner tensors, optional ones)}``.
CLASSES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    _INT8: (("qdata", "scale"), ("zero_point",)),
    _FLOAT8: (("qdata", "scale"), ()),
    _INTX: (("qdata", "scale", "zero_point"), ()),
}
#: Attributes of each class's record, in ``__tensor_flatten__``'s order.
_ATTRIBUTES: dict[str, tuple[str, ...]] = {
    _INT8: ("block_size", "dtype", "act_quant_kwargs", "reduce_range"),
    _FLOAT8: ("block_size", "mm_config", "act_quant_kwargs", "kernel_preference", "dtype"),
    _INTX: ("target_dtype", "block_size", "dtype", "activation_quantization"),
}
_FLOATS = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_FLOAT8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
_TARGETS = {f"int{b}": getattr(torch, f"int{b}") for b in range(1, 9)}
_MAPPINGS = ("SYMMETRIC", "SYMMETRIC_NO_CLIPPING_ERR", "ASYMMETRIC")
_KERNELS = ("auto", "torch", "mslk", "emulated", "triton")
_MM_FIELDS = ("emulate", "use_fast_accum", "pad_inner_dim")
_ACTIVATION_QUANTIZATIONS = ("int8_asym_per_token",)
_MAX_DIM = 8


def class_name(tensor: Any) -> str | None:
    """The qualified class name of a torchao tensor subclass (carried or not), or None for any other value."""
    cls = type(tensor)
    if not isinstance(tensor, torch.Tensor) or not cls.__module__.startswith("torchao"):
        return None
    return f"{cls.__module__}.{cls.__qualname__}"


def _bad(key: str, why: str, source: str) -> StateDictError:
    return StateDictError(f"{source}: the torchao record of {key!r} {why}", key=key,
                          hint="re-save the state with common.save_safetensors from the quantized model")


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- a tensor to data ---------------------------------------------------------------------------------------------
def _granularity_data(value: Any) -> dict[str, Any]:
    kind = type(value).__name__
    if kind == "PerTensor" and type(value).__module__.startswith("torchao"):
        return {"kind": "PerTensor"}
    if kind == "PerRow" and type(value).__module__.startswith("torchao") and _int(value.dim):
        return {"kind": "PerRow", "dim": value.dim}
    raise ValueError(f"granularity {value!r} (PerRow or PerTensor are carried)")


def _attribute_data(name: str, value: Any) -> Any:
    """``value`` of attribute ``name`` as JSON data; ``ValueError`` for one the schema does not carry."""
    if name in ("dtype",):
        found = next((n for n, d in _FLOATS.items() if d == value), None)
        if found is None:
            raise ValueError(f"dtype {value!r}")
        return found
    if name == "target_dtype":
        found = next((n for n, d in _TARGETS.items() if d == value), None)
        if found is None:
            raise ValueError(f"target dtype {value!r}")
        return found
    if name == "block_size":
        if isinstance(value, (list, tuple)) and all(_int(v) for v in value):
            return list(value)
        raise ValueError(f"block size {value!r}")
    if name == "reduce_range":
        if isinstance(value, bool):
            return value
        raise ValueError(f"reduce_range {value!r}")
    if name == "mm_config":
        if value is None:
            return None
        if type(value).__name__ == "Float8MMConfig" and all(isinstance(getattr(value, f), bool) for f in _MM_FIELDS):
            return {f: getattr(value, f) for f in _MM_FIELDS}
        raise ValueError(f"mm_config {value!r}")
    if name == "kernel_preference":
        if type(value).__name__ == "KernelPreference" and value.value in _KERNELS:
            return value.value
        raise ValueError(f"kernel preference {value!r}")
    if name == "activation_quantization":
        value = getattr(value, "value", value)  # the enum, or its string
        if value is None or (isinstance(value, str) and value in _ACTIVATION_QUANTIZATIONS):
            return value
        raise ValueError(f"activation quantization {value!r}")
    if name == "act_quant_kwargs":
        if value is None:
            return None
        if type(value).__name__ == "QuantizeTensorToInt8Kwargs" and getattr(value.mapping_type, "name", None) in \
                _MAPPINGS and isinstance(value.reduce_range, bool):
            return {"granularity": _granularity_data(value.granularity), "mapping_type": value.mapping_type.name,
                    "reduce_range": value.reduce_range}
        raise ValueError(f"activation quantization arguments {value!r} (Int8Tensor's are carried)")
    raise ValueError(f"attribute {name!r}")


def to_stored(key: str, tensor: torch.Tensor, source: str = "saving") -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The inner tensors (``{stored key: tensor}``) and the metadata record of a torchao weight ``tensor``.

    Raises:
        StateDictError: a class outside :data:`CLASSES`, or an attribute, layout or inner tensor the record does
            not carry (the same checks as :func:`from_stored`, so that what is saved loads).
    """
    name = class_name(tensor)
    if name not in CLASSES:
        raise StateDictError(f"{key!r} is a {name or type(tensor).__name__}, which a weights file does not carry",
                             key=key, hint=f"the torchao tensors carried are {', '.join(CLASSES)}")
    names, context = tensor.__tensor_flatten__()
    attributes: dict[str, Any] = {}
    try:
        if set(context) != set(_ATTRIBUTES[name]):
            raise ValueError(f"attributes {sorted(context)}")
        for attr in _ATTRIBUTES[name]:
            attributes[attr] = _attribute_data(attr, context[attr])
        if name == _FLOAT8 and attributes["act_quant_kwargs"] is not None:
            raise ValueError("activation quantization arguments (float8 dynamic activations)")
    except ValueError as exc:
        raise StateDictError(f"{key!r} ({name}) has {exc}, which a weights file does not carry", key=key,
                             hint="quantize with the torchao configurations of docs/extending.md") from None
    inner = {n: getattr(tensor, n) for n in names}
    if not tensor.is_contiguous() or tuple(tensor.shape) != tuple(inner["qdata"].shape):
        raise StateDictError(f"{key!r} ({name}) is not laid out as its qdata", key=key,
                             hint="save the weights of a freshly quantized model")
    record = {"class": name, "tensors": list(names), "attributes": attributes}
    stored = {f"{key}:{n}": t.contiguous() for n, t in inner.items()}
    _check(key, record, {n: inner[n] for n in names}, source)
    return stored, record


# -- data to a tensor ----------------------------------------------------------------------------------------------
def _check_attributes(key: str, name: str, attributes: Any, source: str) -> None:
    if not isinstance(attributes, dict) or set(attributes) != set(_ATTRIBUTES[name]):
        raise _bad(key, f"has attributes {sorted(attributes) if isinstance(attributes, dict) else attributes!r} "
                   f"(a {name} has exactly {sorted(_ATTRIBUTES[name])})", source)
    checks = {
        "dtype": lambda v: isinstance(v, str) and v in _FLOATS,
        "target_dtype": lambda v: isinstance(v, str) and v in _TARGETS,
        "block_size": lambda v: isinstance(v, list) and 0 < len(v) <= _MAX_DIM and all(_int(b) and b > 0 for b in v),
        "reduce_range": lambda v: isinstance(v, bool),
        "mm_config": lambda v: v is None or (isinstance(v, dict) and set(v) == set(_MM_FIELDS) and
                                             all(isinstance(b, bool) for b in v.values())),
        "kernel_preference": lambda v: isinstance(v, str) and v in _KERNELS,
        "activation_quantization": lambda v: v is None or (isinstance(v, str) and v in _ACTIVATION_QUANTIZATIONS),
        "act_quant_kwargs": lambda v: v is None if name != _INT8 else _int8_kwargs_ok(v),
    }
    for attr, value in attributes.items():
        if not checks[attr](value):
            raise _bad(key, f"has attribute {attr} = {value!r}, which a {name} cannot have", source)


def _int8_kwargs_ok(value: Any) -> bool:
    if value is None:
        return True
    if not isinstance(value, dict) or set(value) != {"granularity", "mapping_type", "reduce_range"}:
        return False
    granularity = value["granularity"]
    ok = granularity == {"kind": "PerTensor"} or (
        isinstance(granularity, dict) and set(granularity) == {"kind", "dim"} and granularity["kind"] == "PerRow"
        and _int(granularity["dim"]) and -_MAX_DIM <= granularity["dim"] < _MAX_DIM)
    return ok and value["mapping_type"] in _MAPPINGS and isinstance(value["reduce_range"], bool)


def _check(key: str, record: Any, inner: dict[str, torch.Tensor], source: str) -> None:
    """Check ``record`` and its ``inner`` tensors (by inner name) against each other; see the module docstring."""
    name = record.get("class") if isinstance(record, dict) else None
    if not isinstance(name, str) or name not in CLASSES:
        raise _bad(key, f"names class {name!r} (one of {', '.join(CLASSES)})", source)
    if set(record) != {"class", "tensors", "attributes"}:
        raise _bad(key, f"has fields {sorted(record)} (exactly ['attributes', 'class', 'tensors'])", source)
    required, optional = CLASSES[name]
    names = record["tensors"]
    if not isinstance(names, list) or names[: len(required)] != list(required) or \
            not set(names[len(required):]) <= set(optional) or len(set(names)) != len(names):
        raise _bad(key, f"has inner tensors {names!r} (a {name} has {list(required)}, then any of {list(optional)})",
                   source)
    _check_attributes(key, name, record["attributes"], source)
    attributes = record["attributes"]
    qdata, scale = inner["qdata"], inner["scale"]
    want = (torch.int8,) if name != _FLOAT8 else _FLOAT8_DTYPES
    if qdata.dtype not in want or qdata.dim() != 2:
        raise _bad(key, f"has a qdata of {qdata.dtype} and {qdata.dim()} dimensions (a 2-d {want[0]} weight)", source)
    block = attributes["block_size"]
    if len(block) != qdata.dim() or any(s % b for s, b in zip(qdata.shape, block)):
        raise _bad(key, f"has block size {block} for a qdata of shape {tuple(qdata.shape)} (one block size per "
                   "dimension, dividing it)", source)
    blocks = tuple(s // b for s, b in zip(qdata.shape, block))
    if not scale.is_floating_point() or tuple(scale.shape) != blocks or \
            not bool(torch.isfinite(scale).all() and (scale > 0).all()):
        raise _bad(key, f"needs a floating scale of shape {blocks}, finite and positive", source)
    if name == _INTX:
        bits = int(attributes["target_dtype"].removeprefix("int"))
        low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1
        if qdata.numel() and not bool(((qdata >= low) & (qdata <= high)).all()):
            raise _bad(key, f"has qdata outside [{low}, {high}] for target dtype {attributes['target_dtype']}", source)
    if "zero_point" in inner:
        zero = inner["zero_point"]
        ok = tuple(zero.shape) == blocks and (zero.dtype == torch.int8 or (
            name == _INTX and zero.is_floating_point() and bool(torch.isfinite(zero).all())))
        if not ok:
            raise _bad(key, f"needs an int8 zero point of shape {blocks}", source)


def _attribute_values(name: str, attributes: dict[str, Any]) -> dict[str, Any]:
    """The checked ``attributes`` as the objects ``__tensor_unflatten__`` takes (torchao imported here)."""
    from torchao.float8.inference import Float8MMConfig
    from torchao.quantization.granularity import PerRow, PerTensor
    from torchao.quantization.quant_primitives import MappingType
    from torchao.quantization.quantize_.common import KernelPreference
    from torchao.quantization.quantize_.workflows.int8.int8_tensor import QuantizeTensorToInt8Kwargs
    from torchao.quantization.quantize_.workflows.intx.intx_unpacked_to_int8_tensor import (
        IntxUnpackedToInt8TensorActivationQuantization,
    )

    out: dict[str, Any] = {}
    for attr, value in attributes.items():
        if attr == "dtype":
            out[attr] = _FLOATS[value]
        elif attr == "target_dtype":
            out[attr] = _TARGETS[value]
        elif attr == "block_size":
            out[attr] = tuple(value) if name == _INTX else list(value)
        elif attr == "mm_config":
            out[attr] = None if value is None else Float8MMConfig(**value)
        elif attr == "kernel_preference":
            out[attr] = KernelPreference(value)
        elif attr == "activation_quantization":
            out[attr] = None if value is None else IntxUnpackedToInt8TensorActivationQuantization(value)
        elif attr == "act_quant_kwargs" and value is not None:
            granularity = value["granularity"]
            out[attr] = QuantizeTensorToInt8Kwargs(
                granularity=PerTensor() if granularity["kind"] == "PerTensor" else PerRow(dim=granularity["dim"]),
                mapping_type=MappingType[value["mapping_type"]], reduce_range=value["reduce_range"])
        else:
            out[attr] = value
    return out


def from_stored(key: str, stored: dict[str, torch.Tensor], record: Any, source: str) -> torch.Tensor:
    """The torchao tensor ``record`` describes, made of the file's tensors ``stored`` (``{stored key: tensor}``,
    each ``<key>:<inner name>``), once every field and tensor is checked.

    Raises:
        StateDictError: a field missing, of the wrong type or out of range, an inner tensor absent or not fitting.
    """
    names = record.get("tensors") if isinstance(record, dict) else None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise _bad(key, f"has inner tensors {names!r} (a list of names)", source)
    inner = {}
    for name in names:
        if f"{key}:{name}" not in stored:
            raise _bad(key, f"names inner tensor {name!r}, but the file stores no {key + ':' + name!r}", source)
        inner[name] = stored[f"{key}:{name}"]
    if not {"qdata", "scale"} <= set(inner):
        raise _bad(key, "has no qdata and scale", source)
    _check(key, record, inner, source)
    name = record["class"]
    module, _, attr = name.rpartition(".")
    cls = getattr(importlib.import_module(module), attr)  # one of CLASSES (checked above): a fixed name
    outer = inner["qdata"].shape
    return cls.__tensor_unflatten__(inner, _attribute_values(name, record["attributes"]), outer,
                                    torch.empty(outer, device="meta").stride())


__all__ = ["CLASSES", "SUBCLASS_KEY", "class_name", "from_stored", "to_stored"]
