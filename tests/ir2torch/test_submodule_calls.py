"""How generated code reaches and calls its submodules, parameters and buffers.

Generated code reads a rebuilt module's own children, parameters and buffers from its dictionaries (not through
``nn.Module.__getattr__``) and calls every submodule through ``ir2torch.codegen.module_call.call_module``, which calls
``forward`` itself while ``_call_impl`` would do nothing more. Each test holds the rebuilt model to what the
original eager model does under the same change: a replaced parameter, buffer or child, a hook, a class with its
own call, ``torch.jit.trace``, ``torch.export`` in both modes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

import ir2torch
import torch2ir


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.full((4,), 0.5))
        self.register_buffer("shift", torch.arange(4.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale + self.shift


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Scaled(), _Scaled()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def _pair() -> tuple[nn.Module, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(3, 4)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict()).eval()
    assert isinstance(rebuilt.blocks[0], torch.fx.GraphModule)
    rebuilt(x)  # probed on fake tensors first (ir2torch.run_safety.forward_budget); the tests count later calls
    return model, rebuilt, x


@contextmanager
def _calls() -> Iterator[list[str]]:
    """The names of the Python functions called inside the block."""
    names: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        yield names
    finally:
        sys.setprofile(None)


def test_generated_code_reads_its_own_children_parameters_and_buffers_without_getattr(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model, rebuilt, x = _pair()
    looked_up: list[str] = []
    real = nn.Module.__getattr__
    monkeypatch.setattr(nn.Module, "__getattr__", lambda self, name: looked_up.append(name) or real(self, name))
    expected = model(x)
    eager, looked_up[:] = list(looked_up), []
    assert torch.equal(rebuilt(x), expected)
    assert {"blocks", "lin", "scale", "shift", "head"} <= set(eager)
    assert set(looked_up) == {"weight", "bias"}, looked_up  # what is left is nn.Linear's own forward
    assert 'self._parameters["scale"]' in rebuilt.blocks[0].code


def test_without_hooks_no_submodule_call_enters_call_impl() -> None:
    model, rebuilt, x = _pair()
    expected = model(x)
    with _calls() as eager:
        model(x)
    with _calls() as names:
        out = rebuilt(x)
    assert torch.equal(out, expected)
    assert eager.count("_call_impl") == 6  # the root, two blocks, three linears
    assert "_call_impl" not in names and "_wrapped_call_impl" not in names
    assert names.count("forward") == eager.count("forward")


def test_replaced_parameter_buffer_and_child_are_used_as_by_the_original() -> None:
    model, rebuilt, x = _pair()
    head = nn.Linear(4, 2)
    for net in (model, rebuilt):
        net.blocks[0].scale = nn.Parameter(torch.full((4,), -2.0))
        net.blocks[1].shift = torch.full((4,), 3.0)  # a buffer stays a buffer
        net.head = head
    assert torch.equal(rebuilt(x), model(x))
    for net in (model, rebuilt):
        del net.blocks[1].scale
        net.blocks[1].scale = torch.full((4,), 7.0)  # now a plain attribute: found by the usual lookup
    assert "scale" not in rebuilt.blocks[1]._parameters
    assert torch.equal(rebuilt(x), model(x))


def test_hooks_on_leaves_and_global_hooks_run_as_on_the_original() -> None:
    model, rebuilt, x = _pair()
    for net in (model, rebuilt):
        net.blocks[1].lin.register_forward_pre_hook(lambda m, args: (args[0] * 3,))
        net.head.register_forward_hook(lambda m, args, out: out - 1)
    assert torch.equal(rebuilt(x), model(x))
    seen: list[str] = []
    names = {id(m): p for net in (model, rebuilt) for p, m in net.named_modules()}
    handle = torch_module.register_module_forward_hook(lambda m, args, out: seen.append(names[id(m)]))
    try:
        model(x)
        eager, seen[:] = list(seen), []
        rebuilt(x)
    finally:
        handle.remove()
    assert seen == eager and "blocks.0.lin" in seen


class _OwnCall(nn.Linear):
    calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        type(self).calls += 1
        return super().__call__(*args, **kwargs) * 2


class _OwnCallImpl(nn.Linear):
    def _call_impl(self, *args: Any, **kwargs: Any) -> Any:
        return super()._call_impl(*args, **kwargs) + 1


@pytest.mark.parametrize("cls", [_OwnCall, _OwnCallImpl])
def test_a_child_class_with_its_own_call_is_called_through_it(cls: type[nn.Linear]) -> None:
    model, rebuilt, x = _pair()
    head = cls(4, 2)
    head.load_state_dict(model.head.state_dict())
    before = _OwnCall.calls
    for net in (model, rebuilt):
        net.head = head
    assert torch.equal(rebuilt(x), model(x))
    assert not torch.equal(rebuilt(x), nn.functional.linear(rebuilt.blocks[1](rebuilt.blocks[0](x)), head.weight,
                                                            head.bias))
    if cls is _OwnCall:
        assert _OwnCall.calls - before == 3


def test_a_child_with_a_compiled_call_runs_it() -> None:
    model, rebuilt, x = _pair()
    for net in (model, rebuilt):
        net.head._compiled_call_impl = lambda *args, **kwargs: torch.zeros(3, 2)  # what Module.compile() sets
    assert torch.equal(rebuilt(x), torch.zeros(3, 2)) and torch.equal(model(x), torch.zeros(3, 2))


def test_torch_jit_trace_records_the_leaves_scopes() -> None:
    model, rebuilt, x = _pair()
    with pytest.warns(torch.jit.TracerWarning):  # the input guard's shape comparison is traced as a constant
        traced = torch.jit.trace(rebuilt, (x,), check_trace=False)
    assert torch.equal(traced(x), model(x))
    scopes = {n.scopeName() for n in traced.inlined_graph.nodes()}
    assert any(s.endswith("blocks.0/__module.blocks.0.lin") for s in scopes), scopes


@pytest.mark.parametrize("strict", [False, True], ids=["non-strict", "strict"])
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_export_of_the_rebuilt_model_keeps_every_module_scope(strict: bool) -> None:
    model, rebuilt, x = _pair()

    def scopes(net: nn.Module) -> set[str]:
        ep = torch.export.export(net, (x,), strict=strict)
        return {path for n in ep.graph.nodes for path, _ in (n.meta.get("nn_module_stack") or {}).values()}

    expected = scopes(model)
    assert {"", "blocks.0", "blocks.0.lin", "blocks.1", "blocks.1.lin", "head"} == expected
    if not strict:
        # torch's non-strict tracer inlines every fx.GraphModule without a scope of its own (``_ModuleStackTracer.
        # call_module``), whichever way it is called: the rebuilt blocks are GraphModules
        expected = {p for p in expected if not p or not isinstance(rebuilt.get_submodule(p), torch.fx.GraphModule)}
        assert expected == {"", "blocks.0.lin", "blocks.1.lin", "head"}
    assert scopes(rebuilt) == expected
