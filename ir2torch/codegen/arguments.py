"""How generated code binds a call's nested arguments: checked against the traced structure (the rule of the root's
input guard), then flattened as fx flattens them (:class:`ArgumentFlattener`)."""

from __future__ import annotations

from typing import Any

from torch.fx import _pytree as fx_pytree
from torch.utils import _pytree as pytree

from common.errors import InputMismatchError
from common.treespec import describe_spec, exact_leaves
from ir2torch.guards.check import check_structure, fits
from ir2torch.guards.specs import is_call_spec


def _not_a_sequence(name: str, value: Any) -> None:
    """Generated code's refusal of a non-sequence where the trace was given a tuple or list.

    Raises:
        InputMismatchError: always, naming the argument.
    """
    raise InputMismatchError(f"argument {name!r} is a {type(value).__name__}; the module was converted with a "
                             "tuple or list of tensors here", key=name,
                             hint="pass a tuple or list as in the conversion call, or convert again with this call")


class ArgumentFlattener:
    """How generated code binds nested arguments (``_ir_flatten(([a, b], {'k': k}), self._in_spec)``): the call's
    structure is checked against the traced one first, with the rule of the root's input guard
    (:meth:`ir2torch.guards.check.InputGuard.check_call`: a list for a tuple and plain-dict keys in another order
    are read alike, any other difference is refused, an ``OrderedDict`` for a ``dict`` or the reverse included), then
    flattened as fx flattens it; a call of the converted structure itself is checked and flattened in one walk
    (:func:`~common.treespec.exact_leaves`). A mismatch raises :class:`~common.errors.InputMismatchError`
    naming the argument and both structures in short, never the values (fx's flattening cut a longer list to the
    traced length without a word, and its error printed every tensor of the argument).
    """

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def __call__(self, value: Any, spec: pytree.TreeSpec) -> list[Any]:
        call = value
        if type(value) is tuple and len(value) == 2 and type(value[0]) is list:
            call = (tuple(value[0]), value[1])  # generated code passes the positional arguments as a list
        leaves = exact_leaves(call, spec)  # the converted structure itself: its leaves in one walk
        if leaves is not None:
            return leaves
        if not fits(pytree.tree_structure(value), spec):
            self._refuse(value, spec)
        return fx_pytree.tree_flatten_spec(value, spec)

    def _refuse(self, value: Any, spec: pytree.TreeSpec) -> None:
        tops: list[tuple[str, Any, pytree.TreeSpec]] = []
        if is_call_spec(spec) and isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
            args, kwargs = value
            specs = [*spec.child(0).children(), *spec.child(1).children()]
            given = [*args, *(kwargs.get(k) for k in spec.child(1).context)]
            tops = list(zip(self.names, given, specs))
        for name, item, item_spec in tops:
            check_structure(name, item, item_spec)
        raise InputMismatchError(
            f"the arguments have pytree structure {describe_spec(pytree.tree_structure(value))}, but the module was "
            f"converted with {describe_spec(spec)}",
            hint="call the module with the structure of the converted call, or convert again with this one")
