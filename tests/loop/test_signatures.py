"""Every rebuilt module keeps the original's call signature (#14 point 2).

A module rebuilt from its graph takes the arguments its original was called with (names in the order of the
original ``forward``'s parameters), the parent calls it as the original parent did, and it returns the original
output structure. So any rebuilt module can be replaced by a deep copy of the original module, or by a user's
module with the same signature, and the model's outputs stay exact.
"""

from __future__ import annotations

import copy
import inspect
import warnings

import pytest
import torch
from torch import fx, nn
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from tests.models.zoo import ZOO
from tests.real.corpus import CORPUS
from torch2ir.train.dropout import TrainModeWarning


def _exact(a, b) -> bool:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    return sa == sb and all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(la, lb, strict=True))


def _first_calls(model: nn.Module, args, kwargs) -> dict[str, tuple[tuple, dict]]:
    """``path -> (args, kwargs)`` of the first call of every module (plain PyTorch, no torch2ir)."""
    seen: dict[str, tuple[tuple, dict]] = {}
    handles = []
    for path, module in model.named_modules():
        def pre(_m, a, k, path=path):
            seen.setdefault(path, (a, k))
        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def _shown(module: nn.Module, args: tuple, kwargs: dict) -> list[str]:
    """Parameter names a rebuilt ``forward`` shows for this call of ``module``: the original's, with the items
    ``**kwargs`` received as named parameters (an unfilled ``*args`` / ``**kwargs`` left out)."""
    sig = inspect.signature(module.forward)
    bound = sig.bind(*args, **kwargs).arguments
    names: list[str] = []
    for name, param in sig.parameters.items():
        if param.kind is param.VAR_KEYWORD:
            names += list(bound.get(name, {}))
        elif param.kind is not param.VAR_POSITIONAL:
            names.append(name)
    return names


def _graph_modules(ir) -> list[str]:
    return [k for k, impl in ir.items() if k != "root" and impl.type == "module" and impl.graph.number_of_nodes()]


def _convert(model, args, kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainModeWarning)
        ir = torch2ir.convert(model, args, kwargs)
    return ir, ir2torch.convert(ir, model.state_dict())


def _check_swaps(model: nn.Module, args, kwargs) -> None:
    model.eval()
    ir, rebuilt = _convert(model, args, kwargs)
    with torch.no_grad():
        expected = model(*args, **kwargs)
        assert _exact(expected, rebuilt(*args, **kwargs))
    calls = _first_calls(model, args, kwargs)
    for path in _graph_modules(ir):
        # the signature: the original's
        got = list(inspect.signature(rebuilt.get_submodule(path).forward).parameters)
        assert got == _shown(model.get_submodule(path), *calls[path]), path
        # the original module swapped in
        swapped = copy.deepcopy(rebuilt)
        parent, _, name = path.rpartition(".")
        setattr(swapped.get_submodule(parent), name, copy.deepcopy(model.get_submodule(path)))
        with torch.no_grad():
            assert _exact(expected, swapped(*args, **kwargs)), path


@pytest.mark.parametrize("case", ZOO, ids=lambda c: c.name)
def test_zoo_modules_keep_their_signature_and_can_be_swapped_for_the_original(case):
    args, kwargs = case.inputs()
    _check_swaps(case.build(), args, kwargs)


_CORPUS = [a for a in CORPUS if a.name in ("bert", "llama", "vit", "t5_encoder", "whisper_encoder",
                                             "convnext", "roberta")]


@pytest.mark.parametrize("arch", _CORPUS, ids=lambda a: a.name)
def test_real_modules_keep_their_signature_and_can_be_swapped_for_the_original(arch):
    args, kwargs = arch.inputs()
    _check_swaps(arch.build(), args, kwargs)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, *, scale: float = 1.0, mask: torch.Tensor | None = None) -> tuple:
        y = self.lin(x) * scale
        if mask is not None:
            y = y * mask
        return y, x.sum()


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, total = self.block(x, mask=x > 0, scale=2.0)
        return y + total


class UserBlock(nn.Module):
    """A user's module with Block's signature and another body."""

    def forward(self, x: torch.Tensor, *, scale: float = 1.0, mask: torch.Tensor | None = None) -> tuple:
        return x * scale * mask, x.mean()


def test_a_user_module_with_the_same_signature_can_replace_a_rebuilt_one():
    model = Net().eval()
    x = torch.randn(2, 4)
    ir, rebuilt = _convert(model, (x,), {})
    block = rebuilt.block
    assert isinstance(block, fx.GraphModule)
    assert str(inspect.signature(block.forward)) == "(x, *, scale=1.0, mask=None)"
    assert ir["block"].meta["forward_arg_names"] == ["x", "scale", "mask"]
    out = block(x, scale=2.0, mask=x > 0)
    assert isinstance(out, tuple) and len(out) == 2  # the original output structure
    rebuilt.block = UserBlock()
    model.block = UserBlock()
    assert torch.equal(rebuilt(x), model(x))


def test_the_rebuilt_parent_calls_its_child_as_the_original_did():
    model = Net().eval()
    seen = []
    _, rebuilt = _convert(model, (torch.randn(2, 4),), {})
    rebuilt.block.register_forward_pre_hook(lambda _m, a, k: seen.append((len(a), sorted(k), k["scale"])),
                                            with_kwargs=True)
    rebuilt(torch.randn(2, 4))
    assert seen == [(1, ["mask", "scale"], 2.0)]


class Every(nn.Module):
    """Every kind of parameter; the parent passes some by position, some by name, and leaves two at default."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, /, y, mode="sum", *, scale=1.0, mask=None, **extra):
        out = self.lin(x) * scale + y
        out = out if mask is None else out * mask
        return out + extra["bias"] if mode == "sum" else out


class EveryParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Every()

    def forward(self, x):
        return self.block(x, x * 2, scale=3.0, bias=x)


def _every():
    torch.manual_seed(0)
    model, x = EveryParent().eval(), torch.randn(2, 4)
    ir, rebuilt = _convert(model, (x,), {})
    return model, x, ir, rebuilt


def test_the_rebuilt_forward_has_the_original_kinds_and_defaults():
    model, x, ir, rebuilt = _every()
    assert str(inspect.signature(rebuilt.block.forward)) == "(x, /, y, mode='sum', *, scale=1.0, mask=None, bias)"
    assert ir["block"].meta["parameters"][2] == ["mode", "positional_or_keyword", "sum"]
    with torch.no_grad():
        # bound another way than the parent did, with the traced values: same result
        assert torch.equal(rebuilt.block(x, y=x * 2, bias=x, scale=3.0, mode="sum"), model.block(x, x * 2, scale=3.0,
                                                                                                bias=x))
        assert torch.equal(rebuilt(x), model(x))


def test_the_signature_survives_a_json_round_trip(tmp_path):
    model, x, ir, _ = _every()
    ir.save(tmp_path / "m.ir.json")
    again = ir2torch.convert(type(ir).load(tmp_path / "m.ir.json"), model.state_dict())
    assert str(inspect.signature(again.block.forward)) == "(x, /, y, mode='sum', *, scale=1.0, mask=None, bias)"
    with torch.no_grad():
        assert torch.equal(again(x), model(x))


@pytest.mark.parametrize(("call", "fragment"), [
    (lambda b, x: b(x, x * 2, scale=2.0, bias=x), "'scale' is 2.0; the model was converted with 3.0"),
    (lambda b, x: b(x, x * 2, "mean", scale=3.0, bias=x), "mode='mean' differs from the default 'sum'"),
    (lambda b, x: b(x, x * 2, scale=3.0, bias=x, mask=x), "mask=tensor"),
    (lambda b, x: b(x, x * 2, bias=x), "'scale' was given when the model was converted"),
    (lambda b, x: b(x=x, y=x, scale=3.0, bias=x), "positional only"),
    (lambda b, x: b(x, x, scale=3.0, bias=x, other=1), "unexpected keyword"),
])
def test_a_call_the_graph_was_not_traced_for_is_refused(call, fragment):
    from common.errors import InputMismatchError

    _, x, _, rebuilt = _every()
    with pytest.raises(InputMismatchError, match=None) as info:
        call(rebuilt.block, x)
    assert fragment in str(info.value), str(info.value)


def test_a_changed_parameters_list_does_not_reach_the_next_conversion():
    """Conversions share what they learn of a ``forward``; each IR still gets lists of its own."""
    from tests.loop.test_dead_arguments import FromCall

    torch.manual_seed(0)
    model, x = FromCall().eval(), torch.randn(2, 3, 8)
    first = torch2ir.convert(model, (x,))
    first["layers.0"].meta["parameters"][0][0] = "changed"
    first["layers.0"].meta["forward_arg_names"].append("changed")
    second = torch2ir.convert(model, (x,))
    assert second["layers.0"].meta["parameters"][0][0] == "hidden"
    assert second["layers.0"].meta["forward_arg_names"] == ["hidden", "position", "scale"]


class _Scale(nn.Module):
    def forward(self, x: torch.Tensor, factor: float = 2.0, *, shift: torch.Tensor | None = None) -> torch.Tensor:
        return x * factor if shift is None else x * factor + shift


class _ScaleParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = _Scale()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(x).relu()


def test_the_traced_positional_call_skips_the_check_and_every_other_call_runs_it(monkeypatch):
    """A child traced with positional tensors only (no keywords, no constants) is called by its parent without
    running the signature check; any other way of calling it still runs it, and still refuses what differs."""
    from common.errors import InputMismatchError
    from ir2torch.guards.signature_check import SignatureCheck

    model, x = _ScaleParent().eval(), torch.randn(3)
    _, rebuilt = _convert(model, (x,), {})
    runs, real = [], SignatureCheck.__call__
    monkeypatch.setattr(SignatureCheck, "__call__", lambda self, *a: runs.append(a[1:]) or real(self, *a))
    assert torch.equal(rebuilt(x), model(x)) and runs == []  # the parent's call: as traced
    assert torch.equal(rebuilt.scale(x=x), x * 2) and runs[0][1].keys() == {"x"}  # by name: checked, accepted
    for call, fragment in ((lambda: rebuilt.scale(x, 3.0), "factor=3.0 differs from the default 2.0"),
                           (lambda: rebuilt.scale(x, shift=x), "shift=tensor")):
        runs.clear()
        with pytest.raises(InputMismatchError) as info:
            call()
        assert fragment in str(info.value), str(info.value)
        assert runs, "the check ran"


class _Windowed(nn.Module):
    def forward(self, x: torch.Tensor, window: tuple[int, int], *, scale: float = 1.0) -> torch.Tensor:
        return x.reshape(window[0], window[1]) * scale


class _WindowParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.win = _Windowed()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.win(x, (2, 3), scale=2.0).sum(0)


def test_a_nested_constant_is_checked_where_the_trace_had_it():
    """``window=(2, 3)`` was traced: the graph holds the reshape to (2, 3). Another window is refused with the
    nested argument named; the traced one, by position or by name, is accepted."""
    from common.errors import InputMismatchError

    model, x = _WindowParent().eval(), torch.randn(6)
    _, rebuilt = _convert(model, (x,), {})
    check = type(rebuilt.win)._wrapped_call.check
    assert [value for _, value in check._paths] == [2, 3]  # found by key path, without flattening the call
    assert torch.equal(rebuilt(x), model(x))
    assert torch.equal(rebuilt.win(x, (2, 3), scale=2.0), model.win(x, (2, 3), scale=2.0))
    assert torch.equal(rebuilt.win(x, window=(2, 3), scale=2.0), model.win(x, (2, 3), scale=2.0))
    for window in ((3, 2), (2, 4), (1, 6)):
        with pytest.raises(InputMismatchError, match="nested argument"):
            rebuilt.win(x, window, scale=2.0)


def test_an_all_constant_tuple_is_compared_in_one_go_and_anything_else_by_key_path(monkeypatch):
    """``window=(2, 3)`` is all constants: the traced call compares the tuple whole (no key-path walk). A list, a
    bool for an int, a float, a tensor or another length falls back to the key-path and leaf comparisons, which
    accept the list (as the generated binding does) and refuse the rest."""
    from common.errors import InputMismatchError, IRError
    from ir2torch.guards.signature_check import SignatureCheck

    model, x = _WindowParent().eval(), torch.randn(6)
    _, rebuilt = _convert(model, (x,), {})
    check = type(rebuilt.win)._wrapped_call.check
    assert check._wholes == [(1, tuple, (2, 3), (int, int))]
    walks, real = [], SignatureCheck._nested_match
    monkeypatch.setattr(SignatureCheck, "_nested_match", lambda self, given: walks.append(given) or real(self, given))
    assert torch.equal(rebuilt(x), model(x)) and walks == []
    assert torch.equal(rebuilt.win(x, [2, 3], scale=2.0), model.win(x, (2, 3), scale=2.0)) and len(walks) == 1
    for window in ((2, True), (2.0, 3), (torch.tensor(2), 3), (2, 4)):
        with pytest.raises(InputMismatchError):
            rebuilt.win(x, window, scale=2.0)
    for window in ((2, 3, 1), (2,)):  # another length: refused by the check or by the generated binding
        with pytest.raises(IRError):
            rebuilt.win(x, window, scale=2.0)
