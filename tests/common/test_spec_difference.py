"""``common.treespec.spec_difference``: where two pytree structures first differ, for the messages whose structure
texts are the same."""

from __future__ import annotations

from collections import namedtuple

from torch.utils import _pytree as pytree

from common.treespec import describe_spec, spec_difference


def _spec(value: object) -> pytree.TreeSpec:
    return pytree.tree_structure(value)


def test_equal_structures_have_no_difference() -> None:
    assert spec_difference(_spec((1, [2, {"a": 3}])), _spec((4, [5, {"a": 6}]))) is None


def test_the_first_difference_is_named_by_its_position() -> None:
    assert spec_difference(_spec((1, [2, 3])), _spec((1, [2, (3, 4)]))) == \
        "at [1][1]: a leaf, converted with tuple"
    assert spec_difference(_spec((1, [2, 3])), _spec((1, (2, 3)))) == "at [1]: list, converted with tuple"
    assert spec_difference(_spec([1, 2]), _spec([1, 2, 3])) == "at the top: list of 2 children, converted with 3"


def test_two_named_tuples_of_one_name_differ_by_their_class() -> None:
    """Two classes called ``Pair`` print the same structure text; the difference names the context (the class)."""
    first, second = namedtuple("Pair", "a b"), namedtuple("Pair", "x y")
    a, b = _spec(first(1, 2)), _spec(second(1, 2))
    assert describe_spec(a) == describe_spec(b) == "Pair(*, *)"
    difference = spec_difference(a, b)
    assert difference is not None and difference.startswith("at the top: Pair with context "), difference
    assert "Pair('a', 'b'), converted with tests.common.test_spec_difference.Pair('x', 'y')" in difference


def test_a_long_context_is_cut() -> None:
    a, b = _spec({f"k{i}": i for i in range(200)}), _spec({f"j{i}": i for i in range(200)})
    difference = spec_difference(a, b, limit=50)
    assert difference is not None and len(difference) < 200 and "..." in difference, difference
