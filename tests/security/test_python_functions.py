"""The Python-level functions a file may name (``common.python_functions``): bounded arithmetic refuses hostile
constants, stays exact and keeps its names; every function has a class."""

from __future__ import annotations

import operator
from typing import Any

import pytest
import torch

from common import errors as E
from common import safety
from common.safety import op_class


# -- (e): Python-level functions ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "a", "b"), [("operator.mul", [0], 10**12), ("operator.mul", 10**12, "ab"),
                                              ("operator.mul", 2**60000, 2**60000),
                                              ("operator.pow", 10, 10**10), ("operator.pow", -3, 10**6),
                                              ("operator.lshift", 1, 10**12),
                                              ("operator.mul", [0], torch.tensor(10**12)),
                                              ("operator.add", [0] * 6_000_000, [0] * 6_000_000)],
                         ids=lambda v: v if isinstance(v, str) else "v")
def test_bounded_functions_refuse_hostile_constants(name: str, a: Any, b: Any) -> None:
    fn = safety.resolve_target(name)
    with pytest.raises(E.ResourceBudgetError, match=name):
        fn(a, b)


@pytest.mark.parametrize(("name", "a", "b"), [("operator.mul", 3, 7), ("operator.mul", [1, 2], 3),
                                              ("operator.mul", 2.5, 4), ("operator.mul", 3, (1,)),
                                              ("operator.mul", [0], -5), ("operator.mul", 2**1000, 3**500),
                                              ("operator.pow", 2, 10), ("operator.pow", 2, -1),
                                              ("operator.pow", 1, 10**12), ("operator.pow", 7, 1000),
                                              ("operator.pow", 2.0, 0.5), ("operator.lshift", 1, 62),
                                              ("operator.lshift", 0, 10**12), ("operator.lshift", 5, 0),
                                              ("operator.add", [1], [2]), ("operator.add", 2**900, 3),
                                              ("operator.add", "ab", "c"), ("operator.mul", [1], torch.tensor(3))],
                         ids=lambda v: v if isinstance(v, str) else "v")
def test_bounded_functions_are_exact(name: str, a: Any, b: Any) -> None:
    assert safety.resolve_target(name)(a, b) == getattr(operator, name.split(".")[1])(a, b)


def test_bounded_functions_pass_tensors_through() -> None:
    x = torch.arange(3)
    assert torch.equal(safety.resolve_target("operator.mul")(x, 2), x * 2)
    assert torch.equal(safety.resolve_target("operator.pow")(x, 2), x**2)
    assert torch.equal(safety.resolve_target("operator.lshift")(x, 2), x << 2)
    assert torch.equal(safety.resolve_target("operator.add")(x, x), x + x)


@pytest.mark.parametrize("name", sorted(safety.BOUNDED_FUNCTIONS))
def test_bounded_functions_keep_their_names(name: str) -> None:
    assert safety.function_name(safety.resolve_target(name)) == name


def test_every_python_function_has_a_class() -> None:
    for name in safety.PYTHON_FUNCTIONS:
        assert op_class(name)[0] in ("pure", "allocating"), name
