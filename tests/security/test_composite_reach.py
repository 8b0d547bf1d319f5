"""The composites run without data checks (:data:`~ir2torch.run_safety.node_checks.PRECONDITION_FREE_COMPOSITES`)
reach no operator with a precondition on data, and no composite of the default surface is left out of the review.

A composite (``CompositeImplicitAutograd``) decomposes in C++ into other operators, which a dispatch mode sees (it
never sees the composite itself). Each composite added to the list since its first review is called here on sample
arguments covering its branches (modes, optional arguments, dims, dtypes, with and without autograd), and every
operator it reaches is recorded: none may have a precondition
(:data:`~ir2torch.run_safety.op_preconditions.PRECONDITIONS`), else the composite must run under the data checks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from common.surface import default_surface
from ir2torch.run_safety.node_checks import PRECONDITION_FREE_COMPOSITES, is_composite
from ir2torch.run_safety.op_preconditions import PRECONDITIONS, qualified

A = torch.ops.aten


class _Reached(TorchDispatchMode):
    """Records the ATen overloads a call reaches below the composites."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.ops.add(qualified(func))
        return func(*args, **(kwargs or {}))


def _overload(name: str) -> Any:
    ns, op, overload = name.split(".")
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def _samples() -> dict[str, list[Callable[[], Any]]]:
    """Composite -> calls of it on sample arguments (the arguments made outside the recorded call)."""
    g = torch.Generator().manual_seed(0)
    x, img, vol = (torch.randn(*s, generator=g) for s in ((2, 3, 8), (2, 3, 5, 6), (1, 2, 3, 4, 5)))
    grid2, grid3 = torch.rand(2, 4, 4, 2, generator=g) * 3 - 1.5, torch.rand(1, 2, 3, 3, 3, generator=g) * 3 - 1.5
    vec, ints, mask = torch.randn(8, generator=g), torch.arange(12).reshape(3, 4), x > 0
    inf = math.inf
    grids = [(img, grid2, m) for m in (0, 1, 2)] + [(vol, grid3, m) for m in (0, 1)]  # bicubic: 2-d only
    return {
        "aten.broadcast_tensors.default": [lambda: A.broadcast_tensors.default([x, vec, torch.tensor(2.0)])],
        "aten.clip.default": [lambda: A.clip.default(x, -0.5, 0.5), lambda: A.clip.default(x, None, 0.5),
                              lambda: A.clip.default(ints, 1, None)],
        "aten.grid_sampler.default": [
            lambda i=i, gr=gr, m=m, p=p, a=a: A.grid_sampler.default(i, gr, m, p, a)
            for (i, gr, m), p, a in itertools.product(grids, (0, 1, 2), (False, True))],
        "aten.linalg_norm.default": [
            *(lambda o=o, d=d: A.linalg_norm.default(x, o, d) for o in (None, 2, 1, inf, -inf, 0, 3.5, -1)
              for d in ([1], [-1])),
            *(lambda o=o: A.linalg_norm.default(x[0], o, [0, 1]) for o in (2, 1, -1, -2, inf, -inf)),
            lambda: A.linalg_norm.default(x), lambda: A.linalg_norm.default(x, dtype=torch.float64)],
        "aten.log_sigmoid.default": [lambda: A.log_sigmoid.default(x)],
        "aten.max_pool1d.default": [
            lambda k=k, s=s, p=p, d=d, c=c: A.max_pool1d.default(x, [k], [s] if s else [], [p], [d], c)
            for k, s, p, d, c in itertools.product((1, 2, 3), (0, 1, 2), (0, 1), (1, 2), (False, True)) if 2 * p <= k],
        "aten.movedim.int": [lambda: A.movedim.int(x, 0, -1)],
        "aten.narrow.default": [lambda: A.narrow.default(x, 2, 1, 3), lambda: A.narrow.default(x, -1, -3, 2)],
        "aten.outer.default": [lambda: A.outer.default(vec, vec[:3]), lambda: A.outer.default(ints[0], ints[1])],
        "aten.swapaxes.default": [lambda: A.swapaxes.default(x, 0, 2)],
        "aten.tile.default": [lambda: A.tile.default(x, [2]), lambda: A.tile.default(x, [2, 1, 1, 3]),
                              lambda: A.tile.default(x, [])],
        "aten.upsample_linear1d.vec": [
            *(lambda a=a: A.upsample_linear1d.vec(x, [16], a, None) for a in (False, True)),
            *(lambda a=a: A.upsample_linear1d.vec(x, None, a, [2.5]) for a in (False, True))],
        "aten.where.ScalarSelf": [lambda: A.where.ScalarSelf(mask, 1.0, x)],
        "aten.isclose.default": [lambda: A.isclose.default(x, x * 1.5, 1e-5, 1e-8, False),
                                 lambda: A.isclose.default(x, x, 0.0, 0.0, True),
                                 lambda: A.isclose.default(ints[0], ints[1], 1e-5, 1e-8, False)],
        "aten.conv_transpose1d.default": [
            lambda s=s, p=p, o=o, g=g, d=d: A.conv_transpose1d.default(x[:, :2] if g == 2 else x,
                                                                     torch.randn(2 if g == 2 else 3, 2, 3), None,
                                                                     [s], [p], [o], g, [d])
            for s, p, o, g, d in itertools.product((1, 2), (0, 1), (0, 1), (1, 2), (1, 2)) if o < max(s, d)],
        "aten.var.dim": [lambda: A.var.dim(x, [1], True, True), lambda: A.var.dim(x, None, False, False),
                         lambda: A.var.dim(x, [-1, 0], False, True)],
    }


def test_every_default_composite_is_reviewed() -> None:
    """A composite of the default surface runs bare only if listed; one not listed must be one with a precondition
    of its own (which its node tests): a composite added to the surface fails here until it is reviewed."""
    for name in sorted(default_surface()):
        if is_composite(_overload(name)):
            assert (name in PRECONDITION_FREE_COMPOSITES) != (name in PRECONDITIONS), name


@pytest.mark.parametrize("name", sorted(_samples()))
def test_a_listed_composite_reaches_no_operator_with_a_precondition(name: str) -> None:
    assert name in PRECONDITION_FREE_COMPOSITES and is_composite(_overload(name))
    calls, reached = _samples()[name], set()
    for call, grad in itertools.product(calls, (False, True)):
        recorder = _Reached()
        with torch.set_grad_enabled(grad), recorder:
            call()
        assert recorder.ops, name  # the recorder sees the decomposition
        reached |= recorder.ops
    assert not sorted(op for op in reached if op in PRECONDITIONS), (name, sorted(reached))


def test_the_recorder_sees_a_precondition_a_composite_reaches() -> None:
    """The recording can fail: ``embedding_bag`` (a composite with a precondition) reaches a kernel that has one."""
    recorder = _Reached()
    with recorder:
        A.embedding_bag.padding_idx(torch.randn(5, 3), torch.tensor([0, 2, 4]), torch.tensor([0, 1]), False, 0, False,
                                    None, False, None)
    assert any(op in PRECONDITIONS for op in recorder.ops), sorted(recorder.ops)
