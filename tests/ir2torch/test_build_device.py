"""Builders run on ``meta`` without the random fills whose meta kernels would return the tensor unchanged
(``ir2torch.rebuild.device``): the modules are those ``torch.device("meta")`` builds, every check still runs."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
import torch
from torch import nn

import ir2torch
from common.ir import IR, Implementation
from ir2torch.rebuild.device import building_on

_BUILDS = {
    "linear": lambda: nn.Linear(5, 3),
    "linear_no_bias": lambda: nn.Linear(5, 3, bias=False),
    "embedding": lambda: nn.Embedding(11, 4, padding_idx=2),
    "conv": lambda: nn.Conv2d(3, 4, 3, groups=1),
    "conv_transpose": lambda: nn.ConvTranspose1d(4, 2, 3),
    "layer_norm": lambda: nn.LayerNorm(6),
    "batch_norm": lambda: nn.BatchNorm1d(6),
    "lstm": lambda: nn.LSTM(4, 5, num_layers=2),
    "gru": lambda: nn.GRU(4, 5, bidirectional=True),
    "attention": lambda: nn.MultiheadAttention(8, 2),
    "transformer": lambda: nn.TransformerEncoderLayer(8, 2, dim_feedforward=16),
    "bilinear": lambda: nn.Bilinear(3, 4, 5),
    "prelu": lambda: nn.PReLU(3),
}


def _layout(module: nn.Module) -> list:
    return [(name, type(t), t.shape, t.stride(), t.dtype, t.device, t.requires_grad, t._version)
            for name, t in [*module.named_parameters(), *module.named_buffers()]]


@pytest.mark.parametrize("name", sorted(_BUILDS))
def test_a_meta_build_makes_the_module_torch_device_makes(name):
    torch.manual_seed(0)
    with torch.device("meta"):
        expected = _BUILDS[name]()
    state = torch.random.get_rng_state()
    torch.manual_seed(0)
    with building_on("meta"):
        built = _BUILDS[name]()
    assert torch.equal(torch.random.get_rng_state(), state)  # meta kernels draw nothing either way
    assert repr(built) == repr(expected)
    assert _layout(built) == _layout(expected)
    assert all(t.is_meta for t in built.parameters())


def test_the_fills_are_left_out_on_meta_only():
    calls = []
    real = torch._decomp.decompositions.uniform

    def counting(*args, **kwargs):
        calls.append(args[0].device)
        return real(*args, **kwargs)

    with mock.patch.object(torch._decomp.decompositions, "uniform", counting):
        with torch.device("meta"):
            nn.Linear(4, 4)
        assert len(calls) == 2  # what is left out: the meta decomposition of uniform_, once per tensor
        calls.clear()
        with building_on("meta"):
            nn.Linear(4, 4)
        assert calls == []
    with building_on("cpu"):
        torch.manual_seed(1)
        cpu = nn.Linear(4, 4)
    torch.manual_seed(1)
    assert torch.equal(cpu.weight, nn.Linear(4, 4).weight)  # on another device every fill runs


def _raises(fn) -> tuple[type, str]:
    with pytest.raises(Exception) as info:  # compared with the error under torch.device("meta")
        fn()
    return type(info.value), str(info.value)


@pytest.mark.parametrize("call", [
    lambda t: t.normal_(0.0, -1.0),  # the meta kernel's own check
    lambda t: t.normal_(0.0, math.nan),
    lambda t: t.to(torch.int64).normal_(),  # integer tensors: no normal_
    lambda t: nn.init.normal_(t, std=-2.0),
    lambda t: nn.Parameter(t).uniform_(),  # autograd: an in-place call on a leaf that requires grad
    lambda t: nn.Parameter(t).normal_(),
    lambda t: nn.init.kaiming_uniform_(t[0]),  # the initialiser's own check (fan-in of a 1-d tensor)
    lambda t: nn.init.kaiming_uniform_(t, mode="fan_avg"),
    lambda t: nn.init.kaiming_uniform_(t, nonlinearity="swish"),
    lambda t: nn.init.kaiming_uniform_(t, a="0.1"),
    lambda t: nn.init.normal_(t.to(torch.int32)),
    lambda t: _inference(t).uniform_(),  # an inference tensor changed outside inference mode
    lambda t: nn.Parameter(t)[0].uniform_(),  # a view of a leaf that requires grad
])
def test_every_check_still_runs(call):
    with torch.device("meta"):
        expected = _raises(lambda: call(torch.empty(3, 4)))
    with building_on("meta"):
        assert _raises(lambda: call(torch.empty(3, 4))) == expected


def _inference(t: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        return torch.empty_like(t)


def test_fills_skipped_before_dispatch_bump_the_version_as_a_fill_does():
    """``nn.init`` fills and the tensor methods under ``no_grad`` skip the dispatcher on meta: the tensor, its
    views' shared version counter and a zero-element tensor's warning are as under ``torch.device("meta")``."""
    def run() -> list:
        t = torch.empty(3, 4)
        view = t[1:]
        nn.init.kaiming_uniform_(t, a=math.sqrt(5))
        nn.init.uniform_(view, -1, 1)
        nn.init.normal_(t, std=0.0)
        with torch.no_grad():
            p = nn.Parameter(torch.empty(2, 2))
            p.normal_(0, 1)
        with pytest.warns(UserWarning, match="zero-element"):
            nn.init.kaiming_uniform_(torch.empty(0, 3))
        return [t._version, view._version, p._version, t.shape, p.requires_grad]

    with torch.device("meta"):
        expected = run()
    with building_on("meta"):
        assert run() == expected == [3, 3, 1, (3, 4), True]


def test_fills_in_a_builder_and_on_other_tensors():
    with building_on("meta"):
        t = torch.empty(2, 3)
        assert t.uniform_(5, -5) is t and t.normal_(1.0, 0.0) is t and t._version == 2
        with torch.no_grad():
            p = nn.Parameter(torch.empty(3))
            assert p.uniform_() is p and p._version == 1
        cpu = torch.zeros(3, device="cpu")
        assert cpu.uniform_(2.0, 3.0) is cpu and bool(((cpu >= 2) & (cpu < 3)).all())
        generated = torch.Generator().manual_seed(0)
        t.uniform_(generator=generated)  # with a generator: runs as it is
    assert torch.get_default_device() == torch.device("cpu")


def test_a_meta_conversion_builds_with_it():
    ir = IR()
    ir.add(Implementation("root", "linear", {"in_features": 3, "out_features": 2}, state={
        "weight": {"kind": "parameter", "shape": [2, 3], "dtype": torch.float32},
        "bias": {"kind": "parameter", "shape": [2], "dtype": torch.float32}}))
    with mock.patch.object(torch._decomp.decompositions, "uniform", side_effect=AssertionError("filled")):
        model = ir2torch.convert(ir, device="meta")
    assert model.weight.is_meta and model.weight.shape == (2, 3)


def test_a_meta_build_imports_nothing_more():
    """torch wraps a dispatch mode's ``__torch_dispatch__`` in a dynamo guard whose first call imports torch._dynamo
    (seconds, in a process that compiles nothing): the fills' mode has none."""
    code = ("import sys, torch; from torch import nn; from ir2torch.rebuild.device import building_on\n"
            "before = set(sys.modules)\n"
            "with building_on('meta'): nn.Linear(3, 3); nn.Embedding(4, 2)\n"
            "print(sorted(set(sys.modules) - before))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.stdout.strip() == "[]"
