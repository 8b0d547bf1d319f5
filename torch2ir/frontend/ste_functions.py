"""brevitas' straight-through estimators recorded as the operators of :mod:`common.ste_ops` while a conversion
exports.

brevitas quantizes through twelve custom ``torch.autograd.Function``\\ s (``brevitas/ops/autograd_ste_ops.py``):
``RoundSteFn`` rounds and passes the gradient through. ``torch.export`` records a Function's forward ops only, so a
traced ``RoundSteFn`` would be a ``round`` whose gradient is zero. While a conversion exports
(:func:`torch2ir.frontend.custom_backward.recording`), the forward of each Function of :data:`FUNCTIONS` calls the
``torch2ir_ste`` operator standing for it instead of its own ops: the graph then holds one node naming the
estimator, whose registered autograd formula is the Function's backward, and the module calling it need not be
kept opaque.

A Function is mapped only when it is the one named here (its module and qualified name, looked up among the
classes already defined: brevitas is never imported for it) and when, once per process, it agrees with its operator
on probe values (:func:`agrees`: ties, signs, zeros, infinities and NaN, outputs and gradients bitwise equal);
otherwise (another brevitas release changed it) it is left alone, and the module calling it is handled as for any
custom Function. ``InplaceTensorClampSteFn`` writes into its input: it stays a custom Function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

#: ``"module.Qualname"`` of a brevitas Function -> the ``torch2ir_ste`` operator standing for it.
FUNCTIONS: dict[str, str] = {
    f"brevitas.ops.autograd_ste_ops.{cls}": op for cls, op in {
        "RoundSteFn": "round",
        "CeilSteFn": "ceil",
        "FloorSteFn": "floor",
        "TernarySignSteFn": "ternary_sign",
        "BinarySignSteFn": "binary_sign",
        "RoundToZeroSteFn": "round_to_zero",
        "DPURoundSteFn": "dpu_round",
        "AbsBinarySignGradFn": "abs_binary_sign_grad",
        "ScalarClampSteFn": "scalar_clamp",
        "ScalarClampMinSteFn": "scalar_clamp_min",
        "TensorClampSteFn": "tensor_clamp",
    }.items()
}


def _probe_args(op: str) -> list[tuple]:
    """Arguments to compare a Function and its operator on: every rounding corner, and clamps with bounds of
    several kinds (a Python int and float, a 0-d and a broadcast tensor)."""
    x = torch.tensor([-2.5, -1.5, -0.5, -0.49, -0.0, 0.0, 0.3, 0.5, 1.5, 2.5, 7.0, float("inf"), float("-inf"),
                      float("nan")], dtype=torch.float32)
    if op == "scalar_clamp":
        return [(x, -1, 2), (x, -1.5, 0.25)]
    if op == "scalar_clamp_min":
        return [(x, 0), (x, -0.5)]
    if op == "tensor_clamp":
        return [(x, torch.tensor(-1.0), torch.tensor(2.0)),
                (x, torch.tensor([[-3.0], [0.0]]), torch.tensor([[1.0], [2.5]]))]
    return [(x,), (x.to(torch.float64),)]


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and torch.equal(torch.nan_to_num(a, 9.0, 8.0, -8.0), torch.nan_to_num(b, 9.0, 8.0, -8.0))
            and torch.equal(torch.signbit(a), torch.signbit(b)))


@functools.cache
def agrees(function: type, op: str) -> bool:
    """Whether ``function.apply`` and the operator ``op`` give bitwise equal outputs and gradients (with a random
    incoming gradient) on :func:`_probe_args`; once per process and class."""
    generator = torch.Generator().manual_seed(0)
    with torch.enable_grad():
        return all(_agrees_on(function, op, args, generator) for args in _probe_args(op))


def _agrees_on(function: type, op: str, args: tuple, generator: torch.Generator) -> bool:
    from common.ste_ops import OPS

    x = args[0]
    theirs_in, ours_in = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    try:
        theirs = function.apply(theirs_in, *args[1:])
        ours = OPS[op](ours_in, *args[1:])
        grad = torch.randn(theirs.shape, generator=generator, dtype=theirs.dtype)
        (theirs_grad,) = torch.autograd.grad(theirs, theirs_in, grad)
        (ours_grad,) = torch.autograd.grad(ours, ours_in, grad)
    except Exception:  # noqa: BLE001 - a Function that fails on the probe is not the one this maps
        return False
    return _same(theirs, ours) and _same(theirs_grad, ours_grad)


def operator_for(function: type) -> Any:
    """The ``torch2ir_ste`` ``OpOverload`` standing for the custom Function class ``function``, or None (not one of
    :data:`FUNCTIONS`, or not agreeing with it: :func:`agrees`)."""
    op = FUNCTIONS.get(f"{function.__module__}.{function.__qualname__}")
    if op is None or not agrees(function, op):
        return None
    from common.ste_ops import OPS

    return OPS[op]


def mapped_forward(op: Any, original: Callable[..., Any], recording: Callable[[], bool]) -> Callable[..., Any]:
    """A Function ``forward`` calling ``op`` on its arguments (without its ``ctx``) while this thread records a
    conversion (``recording()``), and the ``original`` forward otherwise (another thread training meanwhile)."""

    def forward(ctx: Any, *args: Any) -> Any:
        if recording():
            return op(*args)
        return original(ctx, *args)

    return forward


__all__ = ["FUNCTIONS", "agrees", "mapped_forward", "operator_for"]
