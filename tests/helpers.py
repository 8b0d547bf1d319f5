"""Shared test helpers: output comparison over pytrees, cached conversions of zoo cases, counts of the kernels a
call runs on real tensors."""

from __future__ import annotations

from collections import Counter
from functools import cache
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import torch2ir
from common import IR
from tests.models.zoo import Case, by_name


def max_abs_diff(a: Any, b: Any) -> float:
    """Max |a - b| over the tensor leaves of two outputs; asserts they have the same structure."""
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    assert type(a) is type(b), (type(a), type(b))
    assert sa == sb, f"output structures differ:\n{sa}\n{sb}"
    diffs = [0.0]
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor):
            assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
            diffs.append((x.double() - y.double()).abs().max().item() if x.numel() else 0.0)
        else:
            assert x == y, (x, y)
    return max(diffs)


def same_outputs(a: Any, b: Any) -> bool:
    """Whether two outputs have the same structure and equal leaves (tensors by ``torch.equal``: same shape and
    values, bit for bit)."""
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    return sa == sb and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
                            for x, y in zip(la, lb, strict=True))


@cache
def converted(name: str) -> tuple[Case, torch.nn.Module, tuple, dict, IR]:
    """(case, model, args, kwargs, ir) for a zoo case, converted once per test session."""
    case = by_name(name)
    model = case.build()
    args, kwargs = case.inputs()
    return case, model, args, kwargs, torch2ir.convert(model, args, kwargs)


class RealKernels(TorchDispatchMode):
    """Counts, by overload packet name (``"convolution"``, ``"mm"``...), the ATen operators dispatched on real
    tensors while it is active: an op on fake or meta tensors (a probe measuring the call) is not counted, so a
    count of 0 proves that a kernel never ran on data (what a test of a refusal "before it runs" asserts, where a
    wall-time bound would only suggest it)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if not any(isinstance(t, FakeTensor) or t.is_meta for t in tensors):
            self.calls[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


# Source of ``peak_kib()`` for code run in a child process: the peak resident set size of *this* process
# image in KiB (``VmHWM``). ``ru_maxrss`` is not used: a child started by ``subprocess`` from a large pytest
# worker inherits the worker's high-water mark across fork/vfork + exec (Linux records the old address
# space's peak at exec), so a 400 MB child measured 2.1 GB under a busy worker.
PEAK_KIB_SOURCE = """
def peak_kib():
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
"""


def run_python(code: str, *, timeout: float) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter (repository on the path, offline); return the JSON object it prints
    last. Used to measure peak memory (``VmHWM``) of one job in isolation (its time is measured by benchmarks:
    ``benchmarks/run.py``'s ``scale`` scenario)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def weighted_loss(output: Any) -> torch.Tensor:
    """A weighted sum of every floating-point tensor of ``output`` that depends on the parameters (weights drawn
    from a generator seeded with 0, so that outputs cannot cancel out and two calls weigh alike)."""
    generator = torch.Generator().manual_seed(0)
    total = torch.zeros(())
    for leaf in pytree.tree_leaves(output):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad:
            weights = torch.rand(leaf.shape, generator=generator, dtype=leaf.dtype)
            total = total + (leaf * weights).sum().to(total.dtype)
    return total


def parameter_gradients(model: torch.nn.Module, args: tuple, kwargs: dict) -> dict[str, torch.Tensor | None]:
    """Every trainable parameter's gradient, by name, after one backward pass of :func:`weighted_loss`."""
    model.zero_grad(set_to_none=True)
    loss = weighted_loss(model(*args, **kwargs))
    assert loss.requires_grad, "no output depends on a parameter"
    loss.backward()
    return {name: p.grad for name, p in model.named_parameters() if p.requires_grad}


def assert_same_gradients(original: torch.nn.Module, rebuilt: torch.nn.Module, args: tuple, kwargs: dict,
                          tolerance: float = 0.0) -> None:
    """After one backward pass, every parameter of ``rebuilt`` has the gradient of ``original``'s parameter of the
    same name (within ``tolerance``), and the loss reaches at least one parameter."""
    expected = parameter_gradients(original, args, kwargs)
    got = parameter_gradients(rebuilt, args, kwargs)
    assert sorted(got) == sorted(expected)
    assert any(grad is not None for grad in expected.values()), "the loss reaches no parameter"
    for name, grad in expected.items():
        other = got[name]
        assert (grad is None) == (other is None), f"{name}: gradient {'missing' if other is None else 'extra'}"
        if grad is not None:
            diff = (grad.double() - other.double()).abs().max().item() if grad.numel() else 0.0
            assert diff <= tolerance, f"{name}: gradients differ by {diff:.3g}"
