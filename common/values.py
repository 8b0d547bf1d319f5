"""Values that may appear in an IR, and their JSON encoding.

In memory an IR holds ordinary Python values: numbers, strings, lists, tuples, dicts,
``torch.dtype``/``torch.device``/``torch.memory_format``/``torch.layout``, slices,
``Ellipsis``, complex numbers, and :class:`Ref` placeholders for the arguments that
edges fill. JSON has no tuples, dtypes or infinities, so :func:`encode` tags them::

    (3, 3)            -> {"$tuple": [3, 3]}
    torch.Size([2, 3]) -> {"$size": [2, 3]}
    torch.float16     -> {"$dtype": "float16"}
    float("inf")      -> {"$float": "inf"}
    Ref("x", 0)       -> {"$ref": "x", "index": 0}
    OrderedDict(a=1)  -> {"$ordered_dict": [["a", 1]]}   (a plain dict of str keys stays a JSON object)

:func:`decode` reverses it and only ever looks names up in fixed tables: it never
imports a module or calls a user-supplied name. Tensors are never inlined.
"""

from __future__ import annotations

import collections
import functools
import math
from dataclasses import dataclass
from typing import Any

import torch
from torch.fx.immutable_collections import immutable_dict

from .errors import IRFormatError, IRSerializationError

JSONValue = Any  # a value of the JSON data model (dict/list/str/int/float/bool/None)


@dataclass(frozen=True)
class Ref:
    """Placeholder, inside a node's ``args``/``kwargs``, for a value an edge delivers.

    Args:
        node: name of the source node.
        index: output index taken from the source (``None``: its whole output).
    """

    node: str
    index: int | None = None


class _Training:
    """The ``training`` flag of the module whose graph is running (read at call time).

    A functional dropout traced in eval mode records ``train=False``; torch2ir replaces it
    by this marker so the rebuilt module drops out exactly when it is in train mode.
    """

    _instance: _Training | None = None

    def __new__(cls) -> _Training:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "TRAINING"

    def __reduce__(self) -> str:
        return "TRAINING"


TRAINING = _Training()


@dataclass(eq=False)
class Subgraph:
    """A graph passed as an argument (the body of a higher-order op such as
    ``wrap_with_set_grad_enabled``); holds a graph-only :class:`~common.ir.Implementation`."""

    impl: Any

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Subgraph) and self.impl == other.impl

    def __repr__(self) -> str:
        return f"Subgraph({self.impl!r})"


def _names_of(kind: type) -> dict[str, Any]:
    return {name: value for name, value in vars(torch).items() if isinstance(value, kind)}


_DTYPES: dict[str, torch.dtype] = {}
for _name, _value in _names_of(torch.dtype).items():
    # canonical name first (float32 rather than float)
    _DTYPES.setdefault(str(_value).removeprefix("torch."), _value)
_MEMORY_FORMATS = _names_of(torch.memory_format)
_LAYOUTS = _names_of(torch.layout)
_FLOATS = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

TAGS = (
    "$tuple", "$dict", "$dtype", "$device", "$memory_format", "$layout",
    "$float", "$complex", "$slice", "$ellipsis", "$ref", "$graph", "$training", "$size", "$ordered_dict",
)  # fmt: skip


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str, *, where: str = "value") -> torch.dtype:
    """``"float32"`` -> ``torch.float32``; unknown names raise :class:`IRFormatError`."""
    try:
        return _DTYPES[name]
    except (KeyError, TypeError):
        raise IRFormatError(
            f"unknown dtype {name!r}",
            key=where,
            hint=f"use one of {', '.join(sorted(_DTYPES))}",
        ) from None


def _float_out(value: float) -> JSONValue:
    if math.isfinite(value):
        return value
    return {"$float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}


def encode(value: Any, where: str = "value") -> JSONValue:
    """Encode an in-memory IR value as a JSON value (see the module docstring).

    Raises:
        IRSerializationError: for a tensor or any object outside the IR's value domain.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float_out(float(value))
    if isinstance(value, Ref):
        out: dict[str, Any] = {"$ref": value.node}
        if value.index is not None:
            out["index"] = value.index
        return out
    if isinstance(value, Subgraph):
        return {"$graph": value.impl.to_dict(value_fn=encode, edge_list=True)}
    if value is TRAINING:
        return {"$training": True}
    if isinstance(value, list):
        return [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, torch.Size):
        return {"$size": [int(v) for v in value]}
    if isinstance(value, tuple):  # includes named tuples
        return {"$tuple": [encode(v, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict):
        kind = type(value)
        if kind is collections.OrderedDict:  # a module may be given one: its type is part of the call's structure
            return {"$ordered_dict": [[encode(k, where), encode(v, f"{where}[{k!r}]")] for k, v in value.items()]}
        if kind is not dict and kind is not immutable_dict:  # fx's read-only dict is a plain dict
            raise IRSerializationError(
                f"a dict of type {kind.__qualname__} cannot be stored in the IR (it would be read back as a plain "
                "dict)", key=where, hint="IR values hold plain dicts and OrderedDicts only")
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: encode(v, f"{where}.{k}") for k, v in value.items()}
        return {"$dict": [[encode(k, where), encode(v, f"{where}[{k!r}]")] for k, v in value.items()]}
    if isinstance(value, torch.dtype):
        return {"$dtype": dtype_name(value)}
    if isinstance(value, torch.device):
        return {"$device": str(value)}
    if isinstance(value, torch.memory_format):
        return {"$memory_format": str(value).removeprefix("torch.")}
    if isinstance(value, torch.layout):
        return {"$layout": str(value).removeprefix("torch.")}
    if isinstance(value, complex):
        return {"$complex": [_float_out(value.real), _float_out(value.imag)]}
    if isinstance(value, slice):
        return {"$slice": [encode(value.start, where), encode(value.stop, where), encode(value.step, where)]}
    if value is Ellipsis:
        return {"$ellipsis": True}
    if isinstance(value, torch.Tensor):
        raise IRSerializationError(
            f"a tensor of shape {tuple(value.shape)} cannot be stored inline in the IR",
            key=where,
            hint="record tensors as parameters/buffers (their values go to a .safetensors file)",
        )
    raise IRSerializationError(
        f"value of type {type(value).__qualname__} cannot be stored in the IR",
        key=where,
        hint="IR values are JSON scalars, lists, tuples, dicts, dtypes, devices, slices and Ref",
    )


def _decode_float(raw: Any, where: str) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise IRFormatError(f"expected a number, got {type(raw).__name__}", key=where)
    if isinstance(raw, str):
        if raw not in _FLOATS:
            raise IRFormatError(f"unknown float constant {raw!r}", key=where, hint="use 'inf', '-inf' or 'nan'")
        return _FLOATS[raw]
    try:
        return float(raw)
    except OverflowError:
        raise IRFormatError(f"number {str(raw)[:20]}... does not fit a float", key=where,
                            hint='write {"$float": "inf"} for an infinite value') from None


#: Deepest nesting of lists, tuples and dicts a value may have (a real model's arguments nest a few
#: levels; deeper values would exhaust the recursion limit of the generated code's compiler).
MAX_DEPTH = 32


def _tagged(value: dict[str, Any], tag: str, where: str, depth: int) -> Any:
    """Decode ``value``, whose one tag (key starting with ``$``) is ``tag``."""
    raw = value[tag]
    if len(value) > 1 and (extra := set(value) - {tag} - ({"index"} if tag == "$ref" else set())):
        raise IRFormatError(f"tagged value {tag} has unexpected keys {sorted(extra)}", key=where)
    # the most frequent tags first (every node's arguments and dtypes)
    if tag == "$ref":
        index = value.get("index")
        if not isinstance(raw, str) or not (index is None or (isinstance(index, int) and not isinstance(index, bool))):
            raise IRFormatError("$ref takes a node name and an optional integer index", key=where)
        return Ref(raw, index)
    if tag == "$dtype":
        return dtype_from_name(raw, where=where)
    if tag == "$tuple":
        if not isinstance(raw, list):
            raise IRFormatError("$tuple takes a list", key=where)
        if depth < MAX_DEPTH:  # plain leaves kept without a call, as in decode's lists
            return tuple([v if type(v) in _KEPT else decode(v, f"{where}[{i}]", _depth=depth + 1)
                          for i, v in enumerate(raw)])
        return tuple(decode(v, f"{where}[{i}]", _depth=depth + 1) for i, v in enumerate(raw))
    if tag in ("$dict", "$ordered_dict"):
        if not isinstance(raw, list) or not all(isinstance(p, list) and len(p) == 2 for p in raw):
            raise IRFormatError(f"{tag} takes a list of [key, value] pairs", key=where)
        out = {} if tag == "$dict" else collections.OrderedDict()
        for i, (k, v) in enumerate(raw):
            key = decode(k, f"{where}[{i}]", _depth=depth + 1)
            try:
                out[key] = decode(v, f"{where}[{i}]", _depth=depth + 1)
            except TypeError:
                raise IRFormatError(f"{tag} key is not hashable", key=f"{where}[{i}]") from None
        return out
    if tag == "$device":
        if not isinstance(raw, str):
            raise IRFormatError("$device takes a string", key=where)
        try:
            return torch.device(raw)
        except (RuntimeError, ValueError) as exc:
            raise IRFormatError(f"bad device {raw!r}: {exc}", key=where) from None
    if tag in ("$memory_format", "$layout"):
        table = _MEMORY_FORMATS if tag == "$memory_format" else _LAYOUTS
        if not isinstance(raw, str) or raw not in table:
            raise IRFormatError(f"unknown {tag[1:]} {raw!r}", key=where, hint=f"use one of {sorted(table)}")
        return table[raw]
    if tag == "$float":
        if not isinstance(raw, str):
            raise IRFormatError("$float takes 'inf', '-inf' or 'nan'", key=where)
        return _decode_float(raw, where)
    if tag == "$complex":
        if not isinstance(raw, list) or len(raw) != 2:
            raise IRFormatError("$complex takes [real, imag]", key=where)
        return complex(_decode_float(_untag_float(raw[0]), where), _decode_float(_untag_float(raw[1]), where))
    if tag == "$slice":
        if not isinstance(raw, list) or len(raw) != 3:
            raise IRFormatError("$slice takes [start, stop, step]", key=where)
        parts = [decode(v, where, _depth=depth + 1) for v in raw]
        if not all(p is None or (isinstance(p, int) and not isinstance(p, bool)) for p in parts):
            raise IRFormatError("$slice bounds must be integers or null", key=where)
        return slice(*parts)
    if tag == "$ellipsis":
        return Ellipsis
    if tag == "$size":
        if not isinstance(raw, list) or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**63
                                                 for v in raw):
            raise IRFormatError("$size takes a list of non-negative 64-bit integers", key=where)
        return torch.Size(raw)
    if tag == "$training":
        return TRAINING
    if tag == "$graph":
        from .ir import Implementation

        name = raw.get("name") if isinstance(raw, dict) else None
        if not isinstance(name, str):
            raise IRFormatError("$graph takes an implementation dict with a name", key=where)
        return Subgraph(Implementation.from_dict(name, raw, value_fn=functools.partial(decode, _depth=depth + 1)))
    raise IRFormatError(f"unknown tag {tag!r}", key=where, hint=f"known tags: {', '.join(TAGS)}")


def _untag_float(raw: Any) -> Any:
    return raw["$float"] if isinstance(raw, dict) and set(raw) == {"$float"} else raw


#: JSON values :func:`decode` returns unchanged (exact types: a subclass goes through :func:`decode`).
_KEPT = frozenset({str, int, bool, type(None)})


def decode(value: JSONValue, where: str = "value", *, _depth: int = 0) -> Any:
    """Decode a JSON value produced by :func:`encode`.

    Raises:
        IRFormatError: for an unknown tag, a malformed tagged value, or nesting deeper than
            :data:`MAX_DEPTH`.
    """
    if _depth > MAX_DEPTH:
        raise IRFormatError(f"value nested more than {MAX_DEPTH} levels deep", key=where,
                            hint="IR values are shallow (arguments, attributes); is the file corrupt?")
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise IRFormatError("non-finite number in JSON", key=where, hint='write {"$float": "inf"}')
        return value
    # below: strings, integers, booleans and None one level down are kept as they are without a call (and without
    # spelling their place), as decode would keep them; only at the deepest level does each go through the depth check
    if isinstance(value, list):
        if _depth < MAX_DEPTH:
            return [v if type(v) in _KEPT else decode(v, f"{where}[{i}]", _depth=_depth + 1)
                    for i, v in enumerate(value)]
        return [decode(v, f"{where}[{i}]", _depth=_depth + 1) for i, v in enumerate(value)]
    if isinstance(value, dict):
        tags = [k for k in value if isinstance(k, str) and k.startswith("$")]
        if len(tags) > 1:
            raise IRFormatError(f"a value has several tags {tags}", key=where)
        if tags:
            return _tagged(value, tags[0], where, _depth)
        if _depth < MAX_DEPTH:
            return {k: v if type(v) in _KEPT else decode(v, f"{where}.{k}", _depth=_depth + 1)
                    for k, v in value.items()}
        return {k: decode(v, f"{where}.{k}", _depth=_depth + 1) for k, v in value.items()}
    raise IRFormatError(f"unexpected {type(value).__name__} in document", key=where)


def iter_refs(value: Any, path: tuple = ()) -> list[tuple[tuple, Ref]]:
    """``(path, Ref)`` for every :class:`Ref` inside a nested args/kwargs value."""
    return [(p, v) for p, v in iter_values(value, path) if isinstance(v, Ref)]


def iter_values(value: Any, path: tuple = ()) -> list[tuple[tuple, Any]]:
    """``(path, leaf)`` for every leaf inside a nested args/kwargs value, in order (one list, no generator
    frames: this runs over every argument of every node when an IR is validated)."""
    out: list[tuple[tuple, Any]] = []
    _collect(value, path, out)
    return out


def _collect(value: Any, path: tuple, out: list[tuple[tuple, Any]]) -> None:
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if isinstance(v, (list, tuple, dict)):
                _collect(v, (*path, i), out)
            else:
                out.append(((*path, i), v))
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (list, tuple, dict)):
                _collect(v, (*path, k), out)
            else:
                out.append(((*path, k), v))
    else:
        out.append((path, value))


def collect_refs(value: Any, path: tuple, refs: list[tuple[tuple, Ref]], subgraphs: list[Subgraph]) -> None:
    """Append ``(path, Ref)`` for every :class:`Ref` inside a nested args/kwargs ``value`` to ``refs`` and every
    :class:`Subgraph` to ``subgraphs``: what :func:`iter_refs` and a scan of :func:`iter_values` for subgraphs give,
    in one walk that builds a path only for a container or a reference (validation runs this over every argument
    of every node)."""
    if isinstance(value, (list, tuple)):
        items: Any = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    else:
        if isinstance(value, Ref):
            refs.append((path, value))
        elif isinstance(value, Subgraph):
            subgraphs.append(value)
        return
    for key, item in items:
        if isinstance(item, (list, tuple, dict)):
            collect_refs(item, (*path, key), refs, subgraphs)
        elif isinstance(item, Ref):
            refs.append(((*path, key), item))
        elif isinstance(item, Subgraph):
            subgraphs.append(item)


def values_equal(a: Any, b: Any) -> bool:
    """Equality that treats NaN as equal to NaN and keeps tuple/list and int/float apart."""
    if type(a) is not type(b) and not (isinstance(a, tuple) and isinstance(b, tuple)):
        return False
    if isinstance(a, float):
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    if isinstance(a, complex):
        return values_equal(a.real, b.real) and values_equal(a.imag, b.imag)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, Subgraph):
        return a == b
    if isinstance(a, dict):  # insertion order is meaningful (pytree flattening follows it)
        return list(a) == list(b) and all(values_equal(a[k], b[k]) for k in a)
    return a == b
