"""Module, parameter and buffer names holding a ``-`` (torchvision's RegNet stages: ``block1-0``).

Such a name is data: an attribute path's component may hold ASCII letters, digits, ``_`` and ``-``
(``common.names``); generated code never spells it as an identifier, only as a quoted string
(``getattr(self, "block1-0")``), which none of these characters can end or escape. The model used to be refused
with "this is a torch2ir bug" (the converter's own IR failed validation).
"""

from __future__ import annotations

import ast
from collections import OrderedDict

import pytest
import torch
from torch import fx, nn

import ir2torch
import torch2ir
from common import IR
from common.errors import UnsafeNameError
from common.names import check_attr_path
from tests.helpers import max_abs_diff


class _Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.proj = nn.Linear(width, width)
        self.register_buffer("scale-0", torch.full((width,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.proj(x)) * getattr(self, "scale-0") + x


class _AnyStage(nn.Sequential):
    """torchvision.models.regnet.AnyStage, by hand: ``self.add_module(f"block{stage_index}-{i}", block)``."""

    def __init__(self, width: int, depth: int, stage_index: int) -> None:
        super().__init__()
        for i in range(depth):
            self.add_module(f"block{stage_index}-{i}", _Block(width))


class _RegNetLike(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk_output = nn.Sequential(OrderedDict(
            [(f"block{i + 1}", _AnyStage(8, 2, i + 1)) for i in range(2)]))
        self.heads = nn.ModuleDict({"x-y": nn.Linear(8, 3), "x_y": nn.Linear(8, 3)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.trunk_output(x)
        first = self.trunk_output.block1[0]  # a parameter read by path through a `-` name: a get_attr target
        return self.heads["x-y"](h) - self.heads["x_y"](h) + first.proj.weight.sum()


def _quoted_only(gm: fx.GraphModule, names: set[str]) -> None:
    """Each of ``names`` occurs in ``gm``'s generated code as a string constant, never as a name or attribute."""
    tree = ast.parse(gm.code.strip())
    spelled = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    spelled |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not spelled & names
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert names & strings


@pytest.mark.parametrize("reload", [False, True])
def test_names_with_a_dash_rebuild_with_the_same_paths_and_outputs(tmp_path, reload: bool) -> None:
    torch.manual_seed(0)
    model = _RegNetLike().eval()
    x = torch.randn(2, 8)
    ir = torch2ir.convert(model, (x,))
    assert "trunk_output.block1.block1-0" in ir
    if reload:
        ir = IR.load(ir.save(tmp_path / "m.json"))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        assert max_abs_diff(rebuilt(x), model(x)) == 0
    assert [n for n, _ in rebuilt.named_modules()] == [n for n, _ in model.named_modules()]
    assert list(rebuilt.state_dict()) == list(model.state_dict())
    assert type(rebuilt.trunk_output) is nn.Sequential
    _quoted_only(rebuilt, {"x-y"})
    _quoted_only(rebuilt.trunk_output.block1.get_submodule("block1-0"), {"scale-0"})
    again = ir2torch.convert(torch2ir.convert(rebuilt, (x,)), rebuilt.state_dict())  # the loop closes
    with torch.no_grad():
        assert max_abs_diff(again(x), model(x)) == 0


def test_a_sequential_of_dashed_names_and_its_flat_lowering() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict([("a-b", nn.Linear(4, 4)), ("c", nn.ReLU()), ("d-0", _Block(4))])).eval()
    x = torch.randn(3, 4)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())
    flat = ir2torch.convert(torch2ir.lower(model, (x,)), model.state_dict())
    with torch.no_grad():
        assert max_abs_diff(rebuilt(x), model(x)) == 0
        assert max_abs_diff(flat(x), model(x)) == 0
    assert list(rebuilt.state_dict()) == list(model.state_dict())
    assert [n for n, _ in rebuilt.named_modules()] == [n for n, _ in model.named_modules()]


@pytest.mark.parametrize("path", ["block1-0", "a.b-c.0", "-", "x--y"])
def test_dashes_are_accepted_as_data(path: str) -> None:
    assert check_attr_path(path, "implementation key") == path


@pytest.mark.parametrize("path", ['a"b', "a b", "a+b", "a\\b", "a'b", "a)b", "a\nb", "é", "a-b.__class__"])
def test_other_characters_are_still_refused(path: str) -> None:
    with pytest.raises(UnsafeNameError):
        check_attr_path(path, "implementation key")
