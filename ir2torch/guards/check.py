"""Input guards: a rebuilt root or an executed FlatIR checks its inputs against what it was converted for.

A graph traced by ``torch.export`` is valid for the input shapes, dtypes and structure of its trace only
(plus the ranges of the dims declared dynamic). Called with anything else it fails deep inside generated
code, or, where a reshape absorbs a wrong size, returns a silently wrong result. :class:`InputGuard` holds
the recorded specs as plain data and refuses a call that does not fit with
:class:`~common.errors.InputMismatchError` naming the input, what was expected and what was given:

- **structure**, checked before ``forward`` binds its arguments (:meth:`InputGuard.check_call`, run by the rebuilt
  module's call wrapper, not a forward hook):
  missing or unexpected arguments, and nested arguments (tuples, dicts, ``None``) whose pytree structure
  differs from the recorded ``in_spec``;
- **leaves**, checked by one ``call_function`` node right after the graph's placeholders
  (:meth:`InputGuard.__call__`): each tensor's rank, fixed sizes and dtype; symbolic sizes (``"s0"``) bound
  on first use, equal wherever the same symbol appears again (the batch dim of ``input_ids`` and
  ``attention_mask``), within their recorded ``range_constraints``; derived sizes (``"s0 + 1"``) evaluated
  by a small arithmetic reader (no ``eval``); Python constants the trace specialised on (``flag=True``)
  equal to their recorded value.

Only data from the IR is used: the guard's node calls this object, whose fixed ``__name__`` is what the
generated code spells. ``ir2torch.convert(..., guard_inputs=False)`` rebuilds without it.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import fx, nn
from torch.utils import _pytree as pytree

from common.errors import InputMismatchError
from common.names import GENERATED_CALL_MODULE, GENERATED_CALLS
from common.treespec import describe_spec, exact_leaves, spec_difference
from ir2torch.guards.specs import DimExpr, LeafSpec, is_call_spec, parse_bound

_DYNAMIC_HINT = ("convert again with dynamic_shapes= for a dim that should vary (torch.export.Dim('batch', "
                 "min=..., max=...)), or call with the converted {what}")


@dataclass(frozen=True)
class _Dynamic:
    """Precomputed checks of one tensor input with symbolic sizes."""

    index: int
    rank: int
    dtype: torch.dtype
    fixed: tuple[tuple[int, int], ...]  # (dim, size)
    symbols: tuple[tuple[int, str], ...]  # (dim, symbol)
    derived: tuple[tuple[int, DimExpr], ...]  # (dim, expression)


class InputGuard:
    """The recorded input specs of one model and the checks run on every call.

    Args:
        leaves: one :class:`LeafSpec` per flat input (graph placeholder), in order.
        ranges: ``{symbol or expression: [min, max]}`` of the dynamic sizes (``"int_oo"``: unbounded).
        arg_names: the forward's argument names (what Python binds), or ``()`` to skip the binding check.
        in_spec: the pytree spec ``((args...), {kwargs...})`` of a call, or ``None``.

    Raises:
        IRFormatError: a range is not ``[int, int | "int_oo"]``.
    """

    def __init__(self, leaves: list[LeafSpec], ranges: dict[str, Any], arg_names: list[str],
                 in_spec: pytree.TreeSpec | None, implementation: str | None = None,
                 module_class: str | None = None) -> None:
        # fx spells a call_function target ``<__module__>.<__name__>`` in generated code: fixed, safe names
        self.__name__ = self.__qualname__ = GENERATED_CALLS["input_guard"]
        self.__module__ = GENERATED_CALL_MODULE
        self.leaves = list(leaves)
        #: a module traced on its own below an opaque leaf: its key and class, named by its errors
        self.implementation, self.module_class = implementation, module_class
        self.ranges = {k: (parse_bound(v, k, 0), parse_bound(v, k, 1)) for k, v in ranges.items()}
        self.arg_names = list(arg_names)
        self._index = {name: i for i, name in enumerate(self.arg_names)}
        self._nested = _nested_args(in_spec, self.arg_names)
        self._static: tuple[tuple[int, tuple[int, ...], torch.dtype], ...] = tuple(
            (i, tuple(leaf.shape), leaf.dtype) for i, leaf in enumerate(self.leaves)  # type: ignore[arg-type]
            if leaf.kind == "tensor" and all(isinstance(s, int) for s in leaf.shape or ()))
        self._dynamic = tuple(_dynamic(i, leaf) for i, leaf in enumerate(self.leaves)
                              if leaf.kind == "tensor" and not all(isinstance(s, int) for s in leaf.shape or ()))
        self._constants = tuple((i, leaf.value) for i, leaf in enumerate(self.leaves) if leaf.kind == "constant")
        self._scalars = tuple((i, leaf.sym) for i, leaf in enumerate(self.leaves) if leaf.kind == "symbol")
        bound = {s for d in self._dynamic for _, s in d.symbols} | {s for _, s in self._scalars}
        self._symbol_ranges = tuple((s, *self.ranges[s]) for s in sorted(bound) if s in self.ranges)

    # -- wiring --------------------------------------------------------------------------------------------
    def insert(self, graph: fx.Graph) -> fx.Node | None:
        """Add the call of this guard right after ``graph``'s placeholders (none: nothing to check)."""
        placeholders = list(graph.find_nodes(op="placeholder"))
        if not placeholders:
            return None
        with graph.inserting_after(placeholders[-1]):
            return graph.call_function(self, tuple(placeholders))

    def attach(self, module: nn.Module) -> None:
        """Keep the guard in ``module.meta["input_guard"]``. The call's structure is checked by
        :meth:`check_call`, which :func:`ir2torch.codegen.module_call.report_errors` runs before ``forward`` binds the
        arguments (no forward hook: the rebuilt model carries no hook the original did not have)."""
        if isinstance(getattr(module, "meta", None), dict):
            module.meta["input_guard"] = self

    # -- structure (checked before the call binds) ---------------------------------------------------------
    def check_call(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        """Refuse a call whose arguments do not bind to the converted forward's, or whose nested structure differs.

        Raises:
            InputMismatchError: names the missing, unexpected or mis-structured argument.
        """
        try:  # (what :meth:`_named` does, without a generator's context manager at every call)
            self._check_call(args, kwargs)
        except InputMismatchError as error:
            self._name(error)
            raise

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """An error of a module traced on its own names it, and how to keep every call of it exact."""
        try:
            yield
        except InputMismatchError as error:
            self._name(error)
            raise

    def _name(self, error: InputMismatchError) -> None:
        """:meth:`_named`'s naming of ``error`` (an error naming an implementation already is kept)."""
        if self.implementation is None or error.implementation is not None:
            return
        error.implementation = self.implementation
        keep = (f'opaque=["auto", "{self.module_class}"]' if self.module_class else 'opaque=["auto", its class]')
        error.hint = (f"{error.hint}; " if error.hint else "") + (
            "this module was traced on its own, for the call its opaque caller made while converting: convert "
            f"with {keep} to keep it opaque, exact for every call")

    def _check_call(self, args: tuple, kwargs: dict[str, Any]) -> None:
        names, given = self.arg_names, len(args)
        if given > len(names):
            raise InputMismatchError(
                f"{given} positional arguments given; the converted forward takes {len(names)} "
                f"({', '.join(names)})", key=f"args[{len(names)}]",
                hint="drop the extra argument, or convert again with the call you want to make")
        for key in kwargs:
            where = self._index.get(key)
            if where is None or where < given:
                problem = "an unexpected keyword argument" if where is None else "given both by position and by name"
                raise InputMismatchError(
                    f"{key!r} is {problem}; the converted forward takes ({', '.join(names)})", key=key,
                    hint="call the model with the arguments it was converted with, or convert again with this call")
        if given + len(kwargs) != len(names):
            missing = [n for i, n in enumerate(names) if i >= given and n not in kwargs]
            raise InputMismatchError(
                f"missing argument(s) {', '.join(map(repr, missing))}: the model was converted with them given",
                key=missing[0], hint="pass them as in the conversion call, or convert again without them")
        for index, name, spec in self._nested:
            value = args[index] if index < given else kwargs[name]
            check_structure(name, value, spec)

    # -- leaves (graph node) -------------------------------------------------------------------------------
    def __call__(self, *values: Any) -> None:
        """Check the flat inputs; returns ``None`` (the node has no users).

        Raises:
            InputMismatchError: an input's shape, dtype or value differs from what was converted.
        """
        try:
            if self._fast(values):
                return None
        except Exception:  # noqa: BLE001 - anything odd (a non-tensor, a tracer's proxy) is diagnosed below
            pass
        with self._named():
            self._diagnose(values)
        return None

    def _fast(self, values: tuple) -> bool:
        for i, shape, dtype in self._static:
            value = values[i]
            if value.shape != shape or value.dtype is not dtype:
                return False
        for i, constant in self._constants:
            if type(values[i]) is not type(constant) or values[i] != constant:
                return False
        if not (self._dynamic or self._scalars):
            return True
        env: dict[str, int] = {}
        for d in self._dynamic:
            value = values[d.index]
            shape = value.shape
            if len(shape) != d.rank or value.dtype is not d.dtype:
                return False
            for dim, size in d.fixed:
                if shape[dim] != size:
                    return False
            for dim, sym in d.symbols:
                if env.setdefault(sym, shape[dim]) != shape[dim]:
                    return False
        for i, sym in self._scalars:
            if type(values[i]) is not int or env.setdefault(sym, values[i]) != values[i]:
                return False
        for sym, low, high in self._symbol_ranges:
            if sym in env and not low <= env[sym] <= high:
                return False
        for d in self._dynamic:
            for dim, expr in d.derived:
                if not self._derived_ok(values[d.index].shape[dim], expr, env):
                    return False
        return True

    def _derived_ok(self, size: int, expr: DimExpr, env: dict[str, int]) -> bool:
        expected = expr.evaluate(env)
        if expected is not None and size != expected:
            return False
        low, high = self.ranges.get(expr.text, (-math.inf, math.inf))
        return low <= size <= high

    def _diagnose(self, values: tuple) -> None:
        """Find the first input that does not fit and raise its error (nothing when tracing with fx proxies)."""
        if any(isinstance(v, fx.Proxy) for v in values):
            return
        env: dict[str, tuple[int, str]] = {}  # symbol -> (size, where it was bound)
        for leaf, value in zip(self.leaves, values):
            if leaf.kind == "tensor":
                self._diagnose_tensor(leaf, value, env)
            elif leaf.kind == "constant" and (type(value) is not type(leaf.value) or value != leaf.value):
                raise InputMismatchError(
                    f"input is {_describe(value)}, but the model was converted with the constant {leaf.value!r} "
                    "(the trace took the branch this value chose)", key=leaf.path,
                    hint=f"pass {leaf.value!r}, or convert again with this value")
            elif leaf.kind == "symbol":
                if type(value) is not int:
                    raise InputMismatchError(f"input is {type(value).__name__}, but the model was converted with "
                                             f"an int (symbol {leaf.sym})", key=leaf.path, hint="pass an int")
                self._bind(leaf.sym, value, leaf.path, None, env)  # type: ignore[arg-type]
        for leaf, value in zip(self.leaves, values):
            for dim, raw in enumerate(leaf.shape or ()) if leaf.kind == "tensor" else ():
                if isinstance(raw, str) and not raw.isidentifier():
                    self._diagnose_derived(leaf, dim, value.shape[dim], DimExpr(raw), env)

    def _diagnose_tensor(self, leaf: LeafSpec, value: Any, env: dict[str, tuple[int, str]]) -> None:
        expected = tuple(leaf.shape or ())
        shown = _shape_text(expected)
        if not isinstance(value, torch.Tensor):
            raise InputMismatchError(
                f"input is {type(value).__name__}, but the model was converted with a tensor of shape {shown} "
                f"and dtype {leaf.dtype}", key=leaf.path, hint="pass a tensor as in the conversion call")
        given = tuple(value.shape)
        if len(given) != len(expected):
            raise InputMismatchError(
                f"input has shape {_shape_text(given)} ({len(given)} dims), but the model was converted for "
                f"shape {shown} ({len(expected)} dims)", key=leaf.path,
                hint=f"call with a {len(expected)}-dim tensor as in the conversion call")
        for dim, (want, size) in enumerate(zip(expected, given)):
            if isinstance(want, int) and size != want:
                raise InputMismatchError(
                    f"input has shape {_shape_text(given)}, but the model was converted for shape {shown}: "
                    f"dim {dim} is {size}, not {want}", key=leaf.path,
                    hint=_DYNAMIC_HINT.format(what=f"shape {shown}"))
            if isinstance(want, str) and want.isidentifier():
                self._bind(want, size, leaf.path, dim, env)
        if value.dtype is not leaf.dtype:
            raise InputMismatchError(
                f"input has dtype {value.dtype}, but the model was converted for {leaf.dtype}", key=leaf.path,
                hint=f"cast it with .to({leaf.dtype}), or convert again with an input of dtype {value.dtype}")

    def _bind(self, sym: str, size: int, path: str, dim: int | None, env: dict[str, tuple[int, str]]) -> None:
        where = f"dim {dim} of {path!r}" if dim is not None else repr(path)
        if sym in env and env[sym][0] != size:
            first, at = env[sym]
            raise InputMismatchError(
                f"{where} is {size}, but {at} is {first}: both are the dynamic size {sym} in the IR, so they "
                "must be equal", key=path,
                hint="give inputs that share a dim the same size, or convert again with separate Dims for them")
        env.setdefault(sym, (size, where))
        low, high = self.ranges.get(sym, (-math.inf, math.inf))
        if not low <= size <= high:
            raise InputMismatchError(
                f"{where} is {size}, outside the range [{low}, {high}] of the dynamic size {sym} recorded at "
                "conversion", key=path,
                hint=f"call with a size in [{low}, {high}], or convert again with a Dim whose min/max cover {size}")

    def _diagnose_derived(self, leaf: LeafSpec, dim: int, size: int, expr: DimExpr,
                          env: dict[str, tuple[int, str]]) -> None:
        expected = expr.evaluate({sym: bound[0] for sym, bound in env.items()})
        low, high = self.ranges.get(expr.text, (-math.inf, math.inf))
        if (expected is not None and size != expected) or not low <= size <= high:
            wanted = f"{expr.text} = {expected}" if expected is not None else expr.text
            raise InputMismatchError(
                f"dim {dim} is {size}, but the model was converted with it as {wanted} (range [{low}, {high}])",
                key=leaf.path, hint="give sizes that keep the relation recorded at conversion")


def _dynamic(index: int, leaf: LeafSpec) -> _Dynamic:
    shape = list(leaf.shape or ())
    return _Dynamic(
        index, len(shape), leaf.dtype,  # type: ignore[arg-type]
        tuple((d, s) for d, s in enumerate(shape) if isinstance(s, int)),
        tuple((d, s) for d, s in enumerate(shape) if isinstance(s, str) and s.isidentifier()),
        tuple((d, DimExpr(s)) for d, s in enumerate(shape) if isinstance(s, str) and not s.isidentifier()),
    )


def _nested_args(in_spec: pytree.TreeSpec | None, names: list[str]) -> tuple[tuple[int, str, Any], ...]:
    """``(position, name, spec)`` of the forward arguments that are not single leaves."""
    if in_spec is None or not names or not is_call_spec(in_spec):
        return ()
    children = [in_spec.child(0).child(i) for i in range(in_spec.child(0).num_children)]
    children += [in_spec.child(1).child(i) for i in range(in_spec.child(1).num_children)]
    return tuple((i, name, spec) for i, (name, spec) in enumerate(zip(names, children)) if not spec.is_leaf())


def fits(given: Any, spec: Any, *, ordered: bool = True) -> bool:
    """Whether a value of structure ``given`` flattens to the leaves ``spec`` names, and to no more: a list, a tuple
    or a ``torch.Size`` for another is accepted (the flattening reads them alike); a leaf of ``spec`` takes anything
    (the graph's guard checks it). A dict's keys must come in the converted order: a forward that iterates the dict
    (``torch.cat(list(d.values()))``) computed in that order, and the graph cannot tell whether it did;
    ``ordered=False`` accepts any order (only to tell that case apart in the error message)."""
    if spec.is_leaf():
        return True
    if given.is_leaf() or given.num_children != spec.num_children:
        return False
    if spec.type is dict:
        if given.type is not dict or set(given.context) != set(spec.context):
            return False
        if ordered and list(given.context) != list(spec.context):
            return False
        position = {key: i for i, key in enumerate(given.context)}
        return all(fits(given.child(position[key]), spec.child(i), ordered=ordered)
                   for i, key in enumerate(spec.context))
    if not (given.type is spec.type and given.context == spec.context) and not (
            given.type in _SEQUENCES and spec.type in _SEQUENCES):
        return False
    return all(fits(given.child(i), spec.child(i), ordered=ordered) for i in range(spec.num_children))


#: Sequences one argument may be given as for another (a ``torch.Size`` is a tuple; pytree's maps make it one).
_SEQUENCES = (list, tuple, torch.Size)


def check_structure(name: str, value: Any, spec: Any) -> None:
    """Raise :class:`InputMismatchError` naming argument ``name`` when ``value``'s pytree structure does not fit
    ``spec`` (:func:`fits`): the one check of a nested argument, for the input guard and the generated code."""
    if exact_leaves(value, spec) is not None:
        return  # the converted structure itself (one walk; the rule below accepts it too)
    found = pytree.tree_structure(value)
    if not fits(found, spec) and fits(found, spec, ordered=False):
        raise InputMismatchError(
            f"argument has a dict whose keys come in another order than in the conversion call "
            f"({describe_spec(found)}, converted with {describe_spec(spec)}); the forward may depend on the order "
            "(iterating the dict), and the graph computes in the converted one", key=name,
            hint="build the dict with its keys in the converted order, or convert again with this order")
    if not fits(found, spec):
        given, converted = describe_spec(found), describe_spec(spec)
        difference = spec_difference(found, spec) if given == converted else None
        raise InputMismatchError(
            f"argument has pytree structure {given}, but the module was converted with {converted}"
            + (f" ({difference})" if difference else ""), key=name,
            hint="pass the same nesting (tuple/list length, dict type and keys, None) as in the conversion call, "
                 "or convert again with this structure")


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {_shape_text(tuple(value.shape))}"
    text = repr(value)
    return text if len(text) <= 60 else f"a {type(value).__name__}"


def _shape_text(shape: tuple) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


