"""Inputs that were one tensor when a module was converted: the rebuilt module refuses them apart.

When a call passes the same tensor twice (``model(x, x)``, ``self.attn(h, h)``), the trace cannot tell the two
arguments apart: ``torch.export`` gives the graph one of them to read for both, and the other goes unused. Run
with two different tensors, such a graph would return a result computed from one of them only, without a word
(``torch.export``'s own ``ExportedProgram.module()`` does exactly that). torch2ir marks each such input node with
``meta["same_as"]``, the name of the earlier input node it was identical to (a FlatIR lists them in its
``same_inputs``); the rebuilt module checks on every call, with one node right after the placeholders, that
those arguments are still one object, and raises an :class:`~common.errors.InputMismatchError` naming both
otherwise. Under a tracer the same variable is passed for both, so the check holds there too.

The check is identity (``is``), the relation the trace saw: two distinct tensors holding equal values, or two
views of one storage, are refused, since gradients and in-place updates would reach one of them only. A symbolic
int passed twice (one size for two arguments) is checked by value: Python does not keep one object per int.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import fx

from common.errors import InputMismatchError, IRFormatError
from common.flat import FlatIR
from common.ir import Implementation
from common.names import GENERATED_CALL_MODULE, GENERATED_CALLS

#: The key of an input node's ``meta`` naming the earlier input node it must be identical to.
SAME_AS = "same_as"


class SameInputs:
    """Called by one graph node with the module's placeholders; refuses a call where marked pairs differ.

    Args:
        pairs: ``(i, j, name_i, name_j)``: placeholder ``i`` must be the object placeholder ``j`` is (``j < i``).
        implementation: the module's implementation key, for the error.
    """

    def __init__(self, pairs: tuple[tuple[int, int, str, str], ...], implementation: str) -> None:
        # fx spells a call_function target ``<__module__>.<__name__>`` in generated code: fixed, safe names
        self.__name__ = self.__qualname__ = GENERATED_CALLS["same_inputs"]
        self.__module__ = GENERATED_CALL_MODULE
        self.pairs = pairs
        self.implementation = implementation

    def __call__(self, *values: Any) -> None:
        """Returns ``None`` (the node has no users).

        Raises:
            InputMismatchError: two inputs that were one tensor at conversion are different objects.
        """
        for i, j, name, other in self.pairs:
            a, b = values[i], values[j]
            if a is not b and (isinstance(a, torch.Tensor) or type(a) is not type(b) or a != b):
                tensor = isinstance(b, torch.Tensor)
                raise InputMismatchError(
                    f"inputs {other!r} and {name!r} are different {'objects' if tensor else 'values'}, "
                    f"but they were one {'tensor' if tensor else 'value'} when "
                    f"{'the model' if self.implementation == 'root' else 'this module'} was converted: its graph "
                    "reads one of them for both and would ignore the other",
                    implementation=self.implementation, key=name,
                    hint=f"pass the same tensor as {other!r} and {name!r}, or convert again with two different "
                         "tensors there")
        return None

    def __repr__(self) -> str:
        return f"SameInputs({self.pairs!r})"


@functools.cache
def _check(pairs: tuple[tuple[int, int, str, str], ...], implementation: str) -> SameInputs:
    """One object per distinct check, so that identical graphs still share their generated code."""
    return SameInputs(pairs, implementation)


def same_input_pairs(impl: Implementation, inputs: list[str]) -> tuple[tuple[int, int, str, str], ...]:
    """``(i, j, name_i, name_j)`` for each input node ``inputs[i]`` whose ``meta.same_as`` names input node
    ``inputs[j]`` (``inputs``: the graph's input nodes in the order of its placeholders).

    Raises:
        IRFormatError: ``same_as`` is not the name of an earlier input node of the same graph.
    """
    position = {name: i for i, name in enumerate(inputs)}
    pairs = []
    for i, node in enumerate(inputs):
        meta = impl.node(node).get("meta")
        if not isinstance(meta, dict) or SAME_AS not in meta:
            continue
        other = meta[SAME_AS]
        j = position.get(other) if isinstance(other, str) else None
        if j is None or j >= i:
            raise IRFormatError(f"input meta.same_as {str(other)[:80]!r} is not the name of an earlier input node "
                                "of this graph", implementation=impl.name, node=node,
                                hint="name an input node listed before this one, or remove same_as")
        pairs.append((i, j, node, other))
    return tuple(pairs)


def insert_same_inputs(graph: fx.Graph, impl: Implementation) -> fx.Node | None:
    """Add the :class:`SameInputs` check of ``impl``'s marked inputs right after ``graph``'s placeholders (built
    from ``impl``), or nothing when no input is marked."""
    placeholders = list(graph.find_nodes(op="placeholder"))
    return _insert(graph, same_input_pairs(impl, [p.meta.get("ir_node", p.name) for p in placeholders]), impl.name)


def insert_flat_same_inputs(graph: fx.Graph, flat: FlatIR) -> fx.Node | None:
    """The same for a FlatIR's ``same_inputs`` (checked by its validation: each names an earlier graph input)."""
    order = {m.name: i for i, m in enumerate(flat.graph_inputs)}
    return _insert(graph, tuple((order[a], order[b], a, b) for a, b in flat.same_inputs.items()), "root")


def _insert(graph: fx.Graph, pairs: tuple[tuple[int, int, str, str], ...], implementation: str) -> fx.Node | None:
    if not pairs:
        return None
    placeholders = list(graph.find_nodes(op="placeholder"))
    with graph.inserting_after(placeholders[-1]):
        return graph.call_function(_check(pairs, implementation), tuple(placeholders))


__all__ = ["SAME_AS", "SameInputs", "insert_flat_same_inputs", "insert_same_inputs", "same_input_pairs"]
