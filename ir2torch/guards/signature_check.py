"""The call check of a rebuilt submodule that keeps its original ``forward`` signature.

A submodule's graph was traced for one way of calling it: the arguments its parent gave (``in_spec``) and
the defaults of the parameters it left out. Its rebuilt ``forward`` shows the original signature, so a
caller may bind the arguments differently (by name instead of position): that is accepted. Leaving out an
argument the trace was given, or giving a parameter that was left at its default another value, would run
a graph traced for something else; :class:`SignatureCheck` refuses both with
:class:`~common.errors.InputMismatchError`. The parent's own call (the traced way) takes one comparison.
"""

from __future__ import annotations

import inspect
from typing import Any

from torch import nn
from torch.utils import _pytree as pytree

from common.errors import InputMismatchError
from common.parameters import NO_DEFAULT, Param
from common.values import values_equal

_HINT = "call the module as the converted model did, or convert again with this call"


class SignatureCheck:
    """Runs before a rebuilt submodule's ``forward`` binds its arguments
    (:func:`ir2torch.codegen.module_call.report_errors`)."""

    def __init__(self, parameters: list[Param], in_spec: pytree.TreeSpec,
                 constants: list[tuple[int, Any]] | None = None) -> None:
        args_kwargs = in_spec.type is tuple and in_spec.num_children == 2 and in_spec.child(1).type is dict
        self.count = in_spec.child(0).num_children if args_kwargs else in_spec.num_children
        self.keywords = frozenset(in_spec.child(1).context if args_kwargs else ())
        self.parameters = parameters
        self.signature = inspect.Signature([
            inspect.Parameter(p.name, p.kind, default=p.default) for p in parameters])
        # constants the trace specialised on, by flat leaf index: top-level ones are read directly
        self.constants = list(constants or [])
        tops = [*in_spec.child(0).children(), *in_spec.child(1).children()] if args_kwargs else in_spec.children()
        keys = [*range(self.count), *(in_spec.child(1).context if args_kwargs else [])]
        first, self._direct, self._nested = 0, [], False
        index = {}
        given_at = dict(self.constants)
        wholes, covered = [], set()
        for key, spec in zip(keys, tops):
            if spec.is_leaf():
                index[first] = key
            else:
                leaves = range(first, first + spec.num_leaves)
                if _whole_constant(spec, leaves, given_at):
                    values = [given_at[leaf] for leaf in leaves]
                    wholes.append((key, spec.type, spec.type(values), tuple(map(type, values))))
                    covered.update(leaves)
            first += spec.num_leaves
        for leaf, value in self.constants:
            if leaf in index:
                self._direct.append((index[leaf], value))
            else:
                self._nested = True
        self.in_spec = in_spec
        self.args_kwargs = args_kwargs
        self._paths = _nested_paths(in_spec, [(leaf, value) for leaf, value in self.constants if leaf not in index]) \
            if self._nested else None
        #: when every nested constant fills a top-level tuple or list of ints, bools, strings or ``None`` (such as
        #: ``input_dimensions=(8, 8)``): ``(key, type, value, leaf types)`` of each, compared in one go
        self._wholes = wholes if self._nested and covered == {leaf for leaf, _ in self.constants} - index.keys() \
            else None
        #: the traced call's positional count when it takes no keywords and no constants: such a call passes
        #: this check without running it (the call wrapper compares the count; -1: always run the check)
        self.plain_count = self.count if not self.keywords and not self.constants else -1

    def __call__(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        """Raises:
            InputMismatchError: the arguments do not bind, a traced argument is missing, a constant the trace
                specialised on differs, or a parameter the trace left at its default has another value.
        """
        if len(args) == self.count and kwargs.keys() == self.keywords:  # the traced way of calling
            for key, value in self._direct:
                given = args[key] if isinstance(key, int) else kwargs[key]
                if type(given) is not type(value) or given != value:
                    raise InputMismatchError(f"argument {self._name(key)!r} is {_short(given)}; the model was "
                                             f"converted with {_short(value)}", key=self._name(key), hint=_HINT)
            if self._nested and not self._wholes_match(args, kwargs) and \
                    not self._nested_match((args, kwargs) if self.args_kwargs else args):
                leaves = pytree.tree_leaves((args, kwargs) if self.args_kwargs else args)
                for leaf, value in self.constants:
                    if leaf < len(leaves) and not _same(leaves[leaf], value):
                        raise InputMismatchError(f"a nested argument is {_short(leaves[leaf])}; the model was "
                                                 f"converted with {_short(value)}", hint=_HINT)
            return
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise InputMismatchError(f"{exc}; the rebuilt forward is {self.signature}", hint=_HINT) from None
        arguments = bound.arguments
        for param in self.parameters:
            if param.traced and param.name not in arguments:
                raise InputMismatchError(f"argument {param.name!r} was given when the model was converted; this "
                                         "call leaves it at its default", key=param.name, hint=_HINT)
            if not param.traced and param.name in arguments and param.default is not NO_DEFAULT and \
                    not _same(arguments[param.name], param.default):
                raise InputMismatchError(f"{param.name}={_short(arguments[param.name])} differs from the default "
                                         f"{_short(param.default)} the model was converted with", key=param.name,
                                         hint=_HINT)
        # the traced arguments, bound the traced way: their constants are checked as above
        traced = [p.name for p in self.parameters if p.traced]
        positional = tuple(arguments[n] for n in traced[: self.count])
        self(module, positional, {n: arguments[n] for n in traced[self.count:]})

    def _wholes_match(self, args: tuple, kwargs: dict[str, Any]) -> bool:
        """Whether each all-constant tuple or list argument is given as traced: same type, values and value types
        (``False``: compare by key path, then leaf by leaf)."""
        if self._wholes is None:
            return False
        for key, kind, value, types in self._wholes:
            given = args[key] if isinstance(key, int) else kwargs[key]
            if type(given) is not kind or tuple(map(type, given)) != types or given != value:
                return False
        return True

    def _nested_match(self, given: Any) -> bool:
        """Whether every nested constant is where the trace had it, and equal (``False``: compare leaf by leaf)."""
        if self._paths is None:
            return False
        try:
            for path, value in self._paths:
                found = given
                for entry in path:
                    found = entry.get(found)
                if not _same(found, value):
                    return False
        except Exception:  # noqa: BLE001 - another structure than the trace's: the leaf-by-leaf comparison says
            return False
        return True

    def _name(self, key: int | str) -> str:
        if isinstance(key, str):
            return key
        traced = [p.name for p in self.parameters if p.traced]
        return traced[key] if key < len(traced) else f"args[{key}]"


#: Constant types whose ``==`` is :func:`~common.values.values_equal` once the types match (no float signs or NaNs).
_PLAIN = frozenset({int, bool, str, type(None)})


def _whole_constant(spec: pytree.TreeSpec, leaves: range, constants: dict[int, Any]) -> bool:
    """Whether the argument of ``spec`` (flat leaves ``leaves``) is a tuple or list of constants of plain types."""
    return spec.type in (tuple, list) and spec.num_children == len(leaves) and \
        all(c.is_leaf() for c in spec.children()) and \
        all(leaf in constants and type(constants[leaf]) in _PLAIN for leaf in leaves)


def _nested_paths(in_spec: pytree.TreeSpec, constants: list[tuple[int, Any]]) -> list[tuple[tuple, Any]] | None:
    """The key path of each nested constant (by flat leaf index) in the traced call's structure, or ``None`` when
    the structure cannot be rebuilt with placeholders (a custom node that refuses them)."""
    try:
        skeleton = pytree.tree_unflatten(list(range(in_spec.num_leaves)), in_spec)
        paths = {leaf: path for path, leaf in pytree.tree_flatten_with_path(skeleton)[0]}
        return [(paths[leaf], value) for leaf, value in constants]
    except Exception:  # noqa: BLE001 - the leaf-by-leaf comparison stays
        return None


def _same(value: Any, default: Any) -> bool:
    try:
        return bool(values_equal(value, default))
    except Exception:  # noqa: BLE001 - a tensor or other object compared with a plain default
        return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


__all__ = ["SignatureCheck"]
