"""``common.treespec.exact_leaves``: the one-walk flattening of a nested argument whose structure is the
converted one, against torch.fx's ``tree_flatten_spec`` and torch's pytree (what the generated code used alone)."""

from __future__ import annotations

from collections import OrderedDict, namedtuple
from typing import Any

import pytest
import torch
from torch.fx import _pytree as fx_pytree
from torch.utils import _pytree as pytree

from common.treespec import exact_leaves
from ir2torch.codegen.arguments import ArgumentFlattener
from ir2torch.guards.check import check_structure

Pair = namedtuple("Pair", ["a", "b"])
T = [torch.full((1,), float(i)) for i in range(8)]

SAME = [
    T[0],
    (T[0], [T[1], T[2]], {"x": T[3], "y": (T[4], None)}),
    {"b": T[0], "a": [T[1], {"c": T[2]}]},
    Pair(T[0], [T[1], Pair(T[2], T[3])]),
    OrderedDict([("k", T[0]), ("j", T[1])]),
    ((), {"input_ids": T[0], "mask": None, "past": [(T[1], T[2]), (T[3], T[4])], "n": 3}),
]


@pytest.mark.parametrize("value", SAME)
def test_the_converted_structure_gives_fx_s_leaves(value: Any) -> None:
    spec = pytree.tree_structure(value)
    leaves = exact_leaves(value, spec)
    expected = fx_pytree.tree_flatten_spec(value, spec)
    assert leaves is not None and len(leaves) == len(expected)
    assert all(a is b for a, b in zip(leaves, expected, strict=True))
    assert ArgumentFlattener(())(value, spec) == leaves
    check_structure("arg", value, spec)


@pytest.mark.parametrize(("value", "other"), [
    ((T[0], T[1]), [T[0], T[1]]),  # a list for a tuple: the slower rule decides (it accepts this one)
    ([T[0], T[1]], [T[0], T[1], T[2]]),  # one more element (fx's flattening would cut it)
    ([T[0], T[1]], [T[0]]),
    ({"a": T[0], "b": T[1]}, {"b": T[1], "a": T[0]}),  # keys in another order
    ({"a": T[0]}, {"z": T[0]}),
    ({"a": T[0]}, OrderedDict([("a", T[0])])),
    (Pair(T[0], T[1]), (T[0], T[1])),
    ({"a": [T[0]]}, {"a": (T[0],)}),
    ([T[0], [T[1]]], [T[0], T[1]]),
])
def test_any_other_structure_is_not_taken_by_the_fast_path(value: Any, other: Any) -> None:
    assert exact_leaves(other, pytree.tree_structure(value)) is None


def test_a_leaf_of_the_spec_takes_anything_as_the_slow_rule_does() -> None:
    spec = pytree.tree_structure((T[0], T[1]))
    assert exact_leaves((T[0], [T[1], T[2]]), spec) == [T[0], [T[1], T[2]]]
    assert fx_pytree.tree_flatten_spec((T[0], [T[1], T[2]]), spec)[1] == [T[1], T[2]]


def test_generated_code_s_list_of_positional_arguments_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    value = ((T[0], [T[1]]), {"k": {"a": T[2]}})
    spec = pytree.tree_structure(value)
    monkeypatch.setattr(pytree, "tree_structure", None)  # the slow path would call it
    assert ArgumentFlattener(("x", "y", "k"))(([T[0], [T[1]]], {"k": {"a": T[2]}}), spec) == [T[0], T[1], T[2]]
