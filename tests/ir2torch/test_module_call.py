"""The call of a rebuilt module running generated code: ``forward`` directly while nothing else would run, and
PyTorch's own ``_call_impl`` (hooks, ``torch.jit.trace`` scopes) as soon as something would.

Each behaviour is compared with the same hook on the original eager model.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules import module as torch_module

import ir2torch
import torch2ir


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) * 2 + x


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _Block()
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x).relu())


def _pair() -> tuple[nn.Module, nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model, x = _Net().eval(), torch.randn(3, 4)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict()).eval()
    assert isinstance(rebuilt.block, torch.fx.GraphModule)  # generated code, not the original class
    return model, rebuilt, x


def test_without_hooks_the_generated_forward_runs_without_call_impl(monkeypatch: pytest.MonkeyPatch) -> None:
    model, rebuilt, x = _pair()
    expected = model(x)
    entered: list[nn.Module] = []
    real = nn.Module._call_impl
    monkeypatch.setattr(nn.Module, "_call_impl", lambda self, *a, **k: entered.append(self) or real(self, *a, **k))
    assert torch.equal(rebuilt(x), expected)
    assert entered and all(type(m) is nn.Linear for m in entered)  # only the original leaves went through it


def test_module_hooks_on_a_generated_module_run_as_on_the_original() -> None:
    model, rebuilt, x = _pair()
    outputs: dict[str, list[torch.Tensor]] = {"eager": [], "rebuilt": []}
    for label, net in (("eager", model), ("rebuilt", rebuilt)):
        net.block.register_forward_pre_hook(lambda m, args: (args[0] * 3,))
        net.block.register_forward_hook(lambda m, args, out, label=label: outputs[label].append(out) or out - 1)
    assert torch.equal(rebuilt(x), model(x))
    assert len(outputs["rebuilt"]) == 1 and torch.equal(outputs["rebuilt"][0], outputs["eager"][0])


def test_global_hooks_see_every_module_call_as_on_the_original() -> None:
    model, rebuilt, x = _pair()
    seen: list[tuple[str, Any]] = []
    names = {id(m): p for net in (model, rebuilt) for p, m in net.named_modules()}
    pre = torch_module.register_module_forward_pre_hook(lambda m, args: seen.append(("pre", names.get(id(m)))))
    post = torch_module.register_module_forward_hook(lambda m, args, out: seen.append(("post", names.get(id(m)))))
    try:
        model(x)
        eager, seen[:] = list(seen), []
        rebuilt(x)
    finally:
        pre.remove()
        post.remove()
    assert seen == eager and ("pre", "block") in seen


def test_a_full_backward_hook_on_a_generated_module_gets_the_original_gradients() -> None:
    model, rebuilt, x = _pair()
    grads: dict[str, list[torch.Tensor]] = {"eager": [], "rebuilt": []}
    for label, net in (("eager", model), ("rebuilt", rebuilt)):
        net.block.register_full_backward_hook(lambda m, gin, gout, label=label: grads[label].append(gout[0]))
        net(x.clone().requires_grad_()).sum().backward()
    assert len(grads["rebuilt"]) == 1 and torch.equal(grads["rebuilt"][0], grads["eager"][0])
    for p, q in zip(model.parameters(), rebuilt.parameters()):
        assert torch.equal(p.grad, q.grad)


def test_a_removed_hook_leaves_the_direct_call_again(monkeypatch: pytest.MonkeyPatch) -> None:
    model, rebuilt, x = _pair()
    handle = rebuilt.block.register_forward_hook(lambda m, args, out: out * 0)
    assert torch.equal(rebuilt(x), model.head(torch.zeros(3, 4)))
    handle.remove()
    assert torch.equal(rebuilt(x), model(x))


def test_torch_jit_trace_records_the_rebuilt_model_through_call_impl() -> None:
    model, rebuilt, x = _pair()
    with pytest.warns(torch.jit.TracerWarning):  # the input guard's shape comparison is traced as a constant
        traced = torch.jit.trace(rebuilt, (x,), check_trace=False)
    assert torch.equal(traced(x), model(x))
    assert any(n.scopeName().endswith("block") for n in traced.inlined_graph.nodes())  # scopes come from _slow_forward


def test_imported_while_a_tracer_patches_module_call_the_fast_call_still_applies() -> None:
    """``torch.fx.symbolic_trace`` replaces ``nn.Module.__call__`` while it runs; a rebuild's modules imported then
    (a lazy import inside the traced call) must still know torch's own ``__call__`` afterwards, or every later
    call goes through ``_call_impl`` and plain ``torch.nn`` leaves run under the data checks (a CI worker's order
    did this). Run in a fresh process, so that the imports happen under the patch."""
    import subprocess
    import sys

    code = """
import torch
from torch import nn
real = nn.Module.__call__
nn.Module.__call__ = lambda self, *a, **k: real(self, *a, **k)
import ir2torch, torch2ir
from ir2torch.codegen import module_call
from ir2torch.run_safety import node_checks
nn.Module.__call__ = real
assert module_call._MODULE_CALL is nn.Module.__call__ and node_checks._MODULE_CALL is nn.Module.__call__
assert not node_checks.module_needs_checks(nn.Linear)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
