"""A rebuilt graph that fails while running raises ExecutionError naming implementation and node."""

from __future__ import annotations

import copy

import pytest
import torch

import ir2torch
import torch2ir
from common.errors import ExecutionError, InputMismatchError
from tests.models.zoo import by_name


def _broken():
    case = by_name("kwargs")
    model = case.build()
    args, kwargs = case.inputs()
    ir = torch2ir.convert(model, args, kwargs)
    ir.root.node("mul")["args"].append(3)  # aten.mul.Tensor takes two arguments
    return ir2torch.convert(ir, model.state_dict()), args, kwargs


def test_names_implementation_and_node_and_chains_the_cause() -> None:
    rebuilt, args, kwargs = _broken()
    with pytest.raises(ExecutionError) as info:
        rebuilt(*args, **kwargs)
    assert info.value.implementation == "root"
    assert "node 'mul' (aten.mul.Tensor)" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert isinstance(info.value, RuntimeError)  # `except RuntimeError` around the model still catches it


def test_a_deep_copy_reports_the_same_way_and_keeps_the_input_guard() -> None:
    rebuilt, args, kwargs = _broken()
    twice = copy.deepcopy(copy.deepcopy(rebuilt))
    with pytest.raises(ExecutionError, match="node 'mul'"):
        twice(*args, **kwargs)
    with pytest.raises(InputMismatchError, match="unexpected"):
        twice(*args, **kwargs, extra=torch.zeros(1))


def test_the_rebuilt_model_carries_no_hook_of_its_own() -> None:
    case = by_name("kwargs")
    model = case.build()
    args, kwargs = case.inputs()
    rebuilt = ir2torch.convert(torch2ir.convert(model, args, kwargs), model.state_dict())
    assert not rebuilt._forward_pre_hooks and not rebuilt._forward_hooks
    assert torch.equal(rebuilt(*args, **kwargs), model(*args, **kwargs))
