"""Every name generated code binds is bound once, and is neither a parameter nor a global (``ir2torch.codegen.source``).

fx wrote an input's local as its placeholder's target and then copied it into the name its namespace gave the
node (``input_2 = input_1``). A list argument ``input`` was unpacked into targets ``input_0, input_1, ...`` while
the namespace, which keeps ``input_1`` for ``input`` (a builtin's name), moved each of them one up: one copy
overwrote the next target before it was read and ``torch.cat(input, 1)`` read one element twice (torchvision's
DenseNet layers take ``input: List[Tensor]``). The same happened wherever an argument's name and the names of the
graph's inputs or nodes met (``a`` and ``a_0``, ``cat``, ``add``, ``x_1``).

A forward argument named like a global fx spells in constants (``device``, ``inf``, ``nan``) used to refuse the
whole model (transformers' ProphetNet and DETR have submodules taking ``device``); such constants are now written
through ir2torch's own globals.
"""

from __future__ import annotations

import ast

import pytest
import torch
from torch import fx, nn

import ir2torch
import torch2ir
from common import IR
from tests.helpers import converted, max_abs_diff
from tests.models.zoo import ZOO

#: argument names: a builtin's name, names of the body's own nodes and of their numbered variants
NAMES = ["input", "cat", "add", "mul", "x_1", "x", "getitem", "input_1", "cat_1", "arg_0", "aten_cat_default"]


def _layer_class(name: str) -> type[nn.Module]:
    """``forward(self, <name>: list)`` concatenating its weighted items (each item counts, in order)."""
    namespace: dict[str, object] = {"torch": torch}
    exec(  # a fixed name of this test's list: the parameter's spelling is what is under test
        f"def forward(self, {name}):\n"
        f"    return torch.cat([v * (i + 1) for i, v in enumerate({name})], 1) + {name}[0].sum()\n",
        namespace)
    return type(f"Layer_{name}", (nn.Module,), {"forward": namespace["forward"]})


class _Parent(nn.Module):
    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        add = x + 1
        cat = torch.cat([x, add], 1)
        return self.layer([x, add, x * 2, cat[:, :2] - 3])


def _bound_names(gm: fx.GraphModule) -> None:
    """Assert that each local of ``gm``'s generated forward is assigned once (``name = None`` frees it), and that
    no local is a parameter or a global of the generated code."""
    tree = ast.parse(gm.code.strip())
    fn = tree.body[0]
    assert isinstance(fn, ast.FunctionDef)
    params = {a.arg for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]} - {"self"}
    bound: list[str] = []
    for statement in fn.body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Assign) and not (isinstance(node.value, ast.Constant) and node.value.value is None):
                for target in node.targets:
                    elts = target.elts if isinstance(target, ast.Tuple) else [target]
                    bound += [e.id for e in elts if isinstance(e, ast.Name)]
    assert len(bound) == len(set(bound)), sorted(n for n in bound if bound.count(n) > 1)
    assert not set(bound) & params
    assert not set(bound) & set(type(gm).forward.__globals__)


def _rebuilt(model: nn.Module, *args: object, reload_from: object = None) -> nn.Module:
    ir = torch2ir.convert(model, args)
    if reload_from is not None:
        ir = IR.load(ir.save(reload_from))
    return ir2torch.convert(ir, model.state_dict())


@pytest.mark.parametrize("name", NAMES)
def test_a_list_argument_named_like_the_body_is_unpacked_exactly(name: str) -> None:
    model = _Parent(_layer_class(name)()).eval()
    x = torch.arange(4.0).reshape(2, 2)
    rebuilt = _rebuilt(model, x)
    with torch.no_grad():
        assert max_abs_diff(rebuilt(x), model(x)) == 0
        assert max_abs_diff(rebuilt.layer([x, x + 1, x * 2, x - 3]), model.layer([x, x + 1, x * 2, x - 3])) == 0
    for module in rebuilt.modules():
        if isinstance(module, fx.GraphModule):
            _bound_names(module)


class _DenseLayer(nn.Module):
    """torchvision's ``_DenseLayer.bn_function``: ``torch.cat(input, 1)`` of a list argument named ``input``."""

    def forward(self, input: list) -> torch.Tensor:
        return torch.cat(input, 1)


class _DenseParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = _DenseLayer()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer([x, x + 1, x + 2])


def test_the_densenet_case_reads_each_item_once() -> None:
    """The issue's reproduction: ``[0, 0, 1, 1, 1, 1]`` instead of ``[0, 0, 1, 1, 2, 2]``."""
    model = _DenseParent().eval()
    x = torch.zeros(1, 2)
    with torch.no_grad():
        assert _rebuilt(model, x)(x).tolist() == [[0, 0, 1, 1, 2, 2]] == model(x).tolist()


class _TwoLists(nn.Module):
    """An argument ``a`` (a list: inputs ``a_0, a_1``) next to an argument named ``a_0``."""

    def forward(self, a: list, a_0: torch.Tensor, a_1: torch.Tensor) -> torch.Tensor:
        return a[0] * 1 + a[1] * 10 + a_0 * 100 + a_1 * 1000


class _TwoListsParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = _TwoLists()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner([x, x + 1], x + 2, x + 3)


def test_an_argument_named_like_an_item_of_another_is_kept_apart(tmp_path) -> None:
    model = _TwoListsParent().eval()
    x = torch.ones(3)
    for reload_from in (None, tmp_path / "m.json"):
        rebuilt = _rebuilt(model, x, reload_from=reload_from)
        with torch.no_grad():
            assert torch.equal(rebuilt(x), model(x))
        _bound_names(rebuilt.inner)


# -- arguments named like a global fx spells in constants --------------------------------------------------------


class _Device(nn.Module):
    """As transformers' position embeddings: the device to create a tensor on is an argument."""

    def forward(self, x: torch.Tensor, device: torch.device) -> torch.Tensor:
        return torch.arange(x.shape[-1], device=device) * x + torch.ones(x.shape, device=device)


class _Inf(nn.Module):
    """An untraced parameter ``inf`` (its default stays) and a ``-inf`` constant in the body."""

    def forward(self, x: torch.Tensor, inf: float = 2.0) -> torch.Tensor:
        return x.masked_fill(x > 1, float("-inf")) * inf


class _Nan(nn.Module):
    """A traced argument ``nan`` and a NaN constant in the body."""

    def forward(self, x: torch.Tensor, nan: float) -> torch.Tensor:
        return torch.where(x > 1, x, float("nan")) + nan


class _Spelled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.device_ = _Device()
        self.inf = _Inf()
        self.nan = _Nan()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.device_(x, x.device), self.inf(x), self.nan(x, 0.5)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)


def test_arguments_named_device_inf_and_nan_rebuild_exactly(tmp_path) -> None:
    model = _Spelled().eval()
    x = torch.arange(6.0).reshape(2, 3)
    for reload_from in (None, tmp_path / "m.json"):
        rebuilt = _rebuilt(model, x, reload_from=reload_from)
        with torch.no_grad():
            assert all(_same(a, b) for a, b in zip(rebuilt(x), model(x), strict=True))
            assert _same(rebuilt.device_(x, x.device), model.device_(x, x.device))
            assert _same(rebuilt.inf(x), model.inf(x))
        for module, name in ((rebuilt.device_, "device"), (rebuilt.inf, "inf"), (rebuilt.nan, "nan")):
            assert f", {name}" in module.code.splitlines()[3]  # the def line keeps the parameter's name
            _bound_names(module)


@pytest.mark.parametrize("name", ["input", "cat", "x_1"])
def test_a_root_taking_a_list_argument_named_like_its_body(name: str) -> None:
    model = _layer_class(name)().eval()
    items = [torch.arange(4.0).reshape(2, 2) + i for i in range(3)]
    rebuilt = _rebuilt(model, items)
    with torch.no_grad():
        assert max_abs_diff(rebuilt(items), model(items)) == 0
    _bound_names(rebuilt)


@pytest.mark.parametrize("name", [case.name for case in ZOO])
def test_every_generated_forward_of_the_zoo_binds_each_local_once(name: str) -> None:
    _, model, args, kwargs, ir = converted(name)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        assert max_abs_diff(rebuilt(*args, **kwargs), model(*args, **kwargs)) == 0
    modules = [m for m in rebuilt.modules() if isinstance(m, fx.GraphModule)]
    for module in modules:
        _bound_names(module)
