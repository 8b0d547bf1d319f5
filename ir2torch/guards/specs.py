"""What an input guard checks, read from an IR root or a FlatIR as plain data (see :mod:`ir2torch.guards.check`).

The module-level IR records each root ``input`` node's ``meta`` (``{"shape", "dtype"}`` for a tensor, the
value of a Python constant, ``{"sym": "s0"}`` for a symbolic int) and, in the root's ``meta``, ``in_spec``,
``forward_arg_names`` and ``range_constraints``; a FlatIR has the same in ``graph_inputs`` and its own
fields. An input node without ``meta`` (a file written without it, a hand-built IR) is not checked.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from common.errors import IRFormatError
from common.flat import FlatIR
from common.ir import Implementation
from common.opaque import is_class_name
from common.values import dtype_from_name

#: Leaf kinds: a tensor (shape, dtype), a symbolic int (sym), a Python constant (value), or nothing recorded.
LEAF_KINDS = ("tensor", "symbol", "constant", "unchecked")
_INFINITE = {"int_oo": math.inf, "oo": math.inf, "-int_oo": -math.inf, "-oo": -math.inf}
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_]\w*)|(//|[-+*()]))")


@dataclass(frozen=True)
class LeafSpec:
    """The recorded spec of one flat input.

    Args:
        path: the input as the user spells it: its forward argument name and pytree path (``"pair[1]"``).
        kind: one of :data:`LEAF_KINDS`.
        shape: (tensor) sizes; symbolic sizes as strings (``"s0"``, ``"s0 + 1"``).
        dtype: (tensor) the dtype.
        sym: (symbol) the symbol of a symbolic int input.
        value: (constant) the value the trace specialised on.
    """

    path: str
    kind: str
    shape: tuple[int | str, ...] | None = None
    dtype: torch.dtype | None = None
    sym: str | None = None
    value: Any = None


class DimExpr:
    """A derived size (``"s0 + 1"``, ``"2*s0"``) read by a small parser: integers, symbols, ``+ - * //`` and
    parentheses. Nothing is evaluated as Python; an expression outside this grammar evaluates to ``None``."""

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            tokens = _tokens(text)
            tree, rest = _sum(tokens)
            self.tree = tree if not rest else None
        except (ValueError, IndexError):
            self.tree = None

    def evaluate(self, env: dict[str, int]) -> int | None:
        """The size for the bound symbols in ``env``, or ``None`` (unparsed, or a symbol not bound)."""
        return _evaluate(self.tree, env) if self.tree is not None else None


def _tokens(text: str) -> list[str]:
    out, position = [], 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None:
            raise ValueError(text)
        out.append(match.group(match.lastindex or 0))
        position = match.end()
    return out


def _sum(tokens: list[str]) -> tuple[Any, list[str]]:
    left, tokens = _product(tokens)
    while tokens and tokens[0] in "+-":
        right, rest = _product(tokens[1:])
        left, tokens = (tokens[0], left, right), rest
    return left, tokens


def _product(tokens: list[str]) -> tuple[Any, list[str]]:
    left, tokens = _atom(tokens)
    while tokens and tokens[0] in ("*", "//"):
        right, rest = _atom(tokens[1:])
        left, tokens = (tokens[0], left, right), rest
    return left, tokens


def _atom(tokens: list[str]) -> tuple[Any, list[str]]:
    head = tokens[0]
    if head == "(":
        inner, rest = _sum(tokens[1:])
        if not rest or rest[0] != ")":
            raise ValueError("unbalanced")
        return inner, rest[1:]
    if head == "-":
        inner, rest = _atom(tokens[1:])
        return ("-", 0, inner), rest
    if head.isdigit():
        return int(head), tokens[1:]
    if head.isidentifier():
        return head, tokens[1:]
    raise ValueError(head)


def _evaluate(tree: Any, env: dict[str, int]) -> int | None:
    if isinstance(tree, int):
        return tree
    if isinstance(tree, str):
        return env.get(tree)
    op, a, b = tree
    left, right = _evaluate(a, env), _evaluate(b, env)
    if left is None or right is None or (op == "//" and right == 0):
        return None
    return {"+": left + right, "-": left - right, "*": left * right}[op] if op != "//" else left // right


def parse_bound(pair: Any, key: str, index: int) -> float:
    """Bound ``index`` (0: min, 1: max) of a ``range_constraints`` entry; ``"int_oo"`` is infinite.

    Raises:
        IRFormatError: the entry is not ``[min, max]`` of ints or infinities.
    """
    if isinstance(pair, (list, tuple)) and len(pair) == 2:
        value = pair[index]
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and value in _INFINITE:
            return _INFINITE[value]
    raise IRFormatError(f"range_constraints[{key!r}] is {pair!r}, not [min, max]", key=f"range_constraints.{key}",
                        hint="each dynamic size's range is [int, int or 'int_oo']")


def is_call_spec(spec: pytree.TreeSpec) -> bool:
    """Whether ``spec`` is the ``((args...), {kwargs...})`` spec of a call."""
    return (spec.type is tuple and spec.num_children == 2 and spec.child(0).type is tuple
            and spec.child(1).type is dict)


def leaf_paths(spec: pytree.TreeSpec, names: list[str]) -> list[str]:
    """The path of every leaf of a call spec, starting from the forward argument's name (``"cache['k']"``)."""
    if is_call_spec(spec):
        tops = [spec.child(0).child(i) for i in range(spec.child(0).num_children)]
        tops += [spec.child(1).child(i) for i in range(spec.child(1).num_children)]
    else:
        tops = [spec]
    out: list[str] = []
    for i, top in enumerate(tops):
        _walk(top, names[i] if i < len(names) else f"arg_{i}", out)
    return out


def _walk(spec: pytree.TreeSpec, prefix: str, out: list[str]) -> None:
    if spec.is_leaf():
        out.append(prefix)
        return
    context = spec.context
    keys = context if spec.type is dict and isinstance(context, list) else range(spec.num_children)
    for i, key in enumerate(keys):
        _walk(spec.child(i), f"{prefix}[{key!r}]", out)


def _load_spec(raw: Any) -> pytree.TreeSpec | None:
    if not isinstance(raw, str):
        return None
    try:
        return pytree.treespec_loads(raw)
    except Exception:  # noqa: BLE001 - the calling convention reports an unreadable spec itself
        return None


def _ranges(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise IRFormatError(f"range_constraints is {type(raw).__name__}, not {{symbol: [min, max]}}",
                            implementation=where, hint="write range_constraints as {symbol: [min, max]}")
    return raw


def _names(in_spec: pytree.TreeSpec | None, recorded: Any) -> list[str]:
    if in_spec is None:
        return []
    names = [str(n) for n in recorded or []]
    return names or [f"arg_{i}" for i in range(in_spec.num_leaves)]


def _leaf(path: str, meta: Any, node: str) -> LeafSpec:
    """A :class:`LeafSpec` from an IR input node's ``meta``."""
    if isinstance(meta, dict) and "shape" in meta:
        shape, dtype = meta.get("shape"), meta.get("dtype")
        if isinstance(dtype, str):
            dtype = dtype_from_name(dtype, where=f"node {node} meta.dtype")
        if (not isinstance(shape, list) or not isinstance(dtype, torch.dtype)
                or not all(isinstance(s, (int, str)) and not isinstance(s, bool) for s in shape)):
            raise IRFormatError(f"input meta {meta!r} is not {{'shape': [int | str, ...], 'dtype': dtype}}",
                                implementation="root", node=node, hint="fix or remove the input node's meta")
        return LeafSpec(path, "tensor", tuple(shape), dtype)
    if isinstance(meta, dict) and isinstance(meta.get("sym"), str) and meta["sym"].isidentifier():
        return LeafSpec(path, "symbol", sym=meta["sym"])
    if meta is None or isinstance(meta, (bool, int, float, str)):
        return LeafSpec(path, "constant", value=meta)
    return LeafSpec(path, "unchecked")  # {"python": "str"}, an expression symbol: its value was not recorded


def root_guard(impl: Implementation) -> Any:
    """The :class:`~ir2torch.guards.check.InputGuard` of a root implementation, or ``None`` when nothing is recorded.

    Raises:
        IRFormatError: an input node's ``meta`` or ``range_constraints`` is malformed.
    """
    from ir2torch.guards.check import InputGuard

    inputs = [n for n in impl.nodes if impl.node(n)["type"] == "input"]
    if not any("meta" in impl.node(n) for n in inputs):
        return None
    in_spec = _load_spec(impl.meta.get("in_spec"))
    names = _names(in_spec, impl.meta.get("forward_arg_names"))
    paths = leaf_paths(in_spec, names) if in_spec is not None else []
    if len(paths) != len(inputs):
        paths = list(inputs)
    leaves = [_leaf(path, impl.node(n)["meta"], n) if "meta" in impl.node(n) else LeafSpec(path, "unchecked")
              for path, n in zip(paths, inputs)]
    cls = impl.meta.get("class")
    return InputGuard(leaves, _ranges(impl.meta.get("range_constraints"), impl.name), names, in_spec,
                      implementation=None if impl.name == "root" else impl.name,
                      module_class=cls if isinstance(cls, str) and is_class_name(cls) else None)


def flat_guard(flat: FlatIR) -> Any:
    """The :class:`~ir2torch.guards.check.InputGuard` of a FlatIR's ``graph_inputs`` (``None`` without any)."""
    from ir2torch.guards.check import InputGuard

    if not flat.graph_inputs:
        return None
    in_spec = _load_spec(flat.in_spec)
    names = _names(in_spec, flat.forward_arg_names)
    paths = leaf_paths(in_spec, names) if in_spec is not None else []
    if len(paths) != len(flat.graph_inputs):
        paths = [m.name for m in flat.graph_inputs]
    leaves = []
    for path, m in zip(paths, flat.graph_inputs):
        if m.kind == "tensor":
            leaves.append(LeafSpec(path, "tensor", tuple(m.shape or ()), dtype_from_name(str(m.dtype))))
        elif m.kind == "symbol" and isinstance(m.sym, str) and m.sym.isidentifier():
            leaves.append(LeafSpec(path, "symbol", sym=m.sym))
        elif m.kind == "constant":
            leaves.append(LeafSpec(path, "constant", value=m.value))
        else:
            leaves.append(LeafSpec(path, "unchecked"))
    return InputGuard(leaves, _ranges(flat.range_constraints, "FlatIR"), names, in_spec)
