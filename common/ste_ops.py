"""Straight-through estimators as operators an IR names: the ``torch2ir_ste`` namespace.

A straight-through estimator is an op whose gradient is not its forward's: brevitas' ``round_ste`` rounds, and
passes the incoming gradient through unchanged where ``round``'s own gradient is zero. As a custom
``torch.autograd.Function`` it leaves no trace in ``torch.export``'s graph, only its forward's ATen ops; as a
``torch.library`` custom operator it stays one node, whose registered autograd formula is the estimator's. So each
operator here computes its forward with the same ATen ops as the estimator it stands for (the outputs are the same
bits) and has the estimator's backward (the gradients are the same), and a fake kernel running the same ops on fake
tensors (the same shapes, dtypes and strides).

The operators (``x``: a tensor; each backward returns the incoming gradient ``g`` for ``x`` and nothing for the
other arguments, except ``abs_binary_sign_grad``):

- ``round(x)``, ``ceil(x)``, ``floor(x)``: ``torch.round``, ``torch.ceil``, ``torch.floor`` (brevitas' ``RoundSteFn``,
  ``CeilSteFn``, ``FloorSteFn``);
- ``ternary_sign(x)``: ``torch.sign(x)`` (``TernarySignSteFn``); ``binary_sign(x)``: ``ge(x, 0).to(x.dtype) * 2 - 1``
  (``BinarySignSteFn``);
- ``round_to_zero(x)``: ``sign(x) * floor(abs(x))`` (``RoundToZeroSteFn``); ``dpu_round(x)``:
  ``where((x < 0) & (x - floor(x) == 0.5), ceil(x), round(x))`` (``DPURoundSteFn``);
- ``scalar_clamp(x, min, max)``: ``torch.clamp`` with numbers (``ScalarClampSteFn``); ``scalar_clamp_min(x, min)``:
  ``torch.clamp_min`` (``ScalarClampMinSteFn``);
- ``tensor_clamp(x, min, max)``: ``where(x > max, max, x)`` then ``where(. < min, min, .)``, bounds cast to ``x``'s
  dtype, broadcast (``TensorClampSteFn``);
- ``abs_binary_sign_grad(x)``: ``abs(x)``, whose backward is ``binary_sign(x).to(int8).float() * g``: a gradient of 1
  at zero (``AbsBinarySignGradFn``).

Their kernels are compositions of ATen operators of the default surface on the tensors they are given (nothing
else is read or written), so every allow-list accepts them (:mod:`common.known_ops`); a rebuild importing this
module registers them, and nothing of brevitas is imported. ``torch2ir`` maps brevitas' Functions to them while it
exports (:mod:`torch2ir.frontend.ste_functions`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .known_ops import STE_OPERATORS

#: The namespace of the operators (``torch2ir_ste.<op>.default`` in an IR).
NAMESPACE = "torch2ir_ste"


def _binary_sign(x: Tensor) -> Tensor:
    return torch.ge(x, 0.0).to(x.dtype) * 2.0 - 1.0


def _round_to_zero(x: Tensor) -> Tensor:
    return torch.sign(x) * torch.floor(torch.abs(x))


def _dpu_round(x: Tensor) -> Tensor:
    return torch.where((x < 0.0) & (x - torch.floor(x) == 0.5), torch.ceil(x), torch.round(x))


def _tensor_clamp(x: Tensor, min_val: Tensor, max_val: Tensor) -> Tensor:
    out = torch.where(x > max_val, max_val.type_as(x), x)
    return torch.where(out < min_val, min_val.type_as(out), out)


_UNARY: dict[str, Callable[[Tensor], Tensor]] = {
    "round": torch.round,
    "ceil": torch.ceil,
    "floor": torch.floor,
    "ternary_sign": torch.sign,
    "binary_sign": _binary_sign,
    "round_to_zero": _round_to_zero,
    "dpu_round": _dpu_round,
    "abs_binary_sign_grad": torch.abs,
}

#: ``{operator: (schema, forward)}``: each forward also serves as its fake kernel.
_OPS: dict[str, tuple[str, Callable[..., Tensor]]] = {
    **{name: ("(Tensor x) -> Tensor", fn) for name, fn in _UNARY.items()},
    "scalar_clamp": ("(Tensor x, Scalar min_val, Scalar max_val) -> Tensor", torch.clamp),
    "scalar_clamp_min": ("(Tensor x, Scalar min_val) -> Tensor", torch.clamp_min),
    "tensor_clamp": ("(Tensor x, Tensor min_val, Tensor max_val) -> Tensor", _tensor_clamp),
}

#: The operators' names (``torch2ir_ste.<name>.default``), as :data:`common.known_ops.STE_OPERATORS` lists them.
OPERATORS: tuple[str, ...] = tuple(_OPS)
if OPERATORS != STE_OPERATORS:
    raise RuntimeError("common.known_ops.STE_OPERATORS must list the operators of common.ste_ops")


def _forward(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    def kernel(*args: Any) -> Tensor:
        return fn(*args)

    return kernel


def _setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    ctx.count = len(inputs)


def _straight_through(ctx: Any, grad: Tensor) -> tuple:
    return (grad, *([None] * (ctx.count - 1)))


def _setup_abs(ctx: Any, inputs: tuple, output: Tensor) -> None:
    ctx.save_for_backward(_binary_sign(inputs[0]).type(torch.int8))


def _abs_backward(ctx: Any, grad: Tensor) -> Tensor:
    sign, = ctx.saved_tensors
    return sign.float() * grad


def _register() -> dict[str, Any]:
    ops: dict[str, Any] = {}
    for name, (schema, fn) in _OPS.items():
        qualname = f"{NAMESPACE}::{name}"
        op = torch.library.custom_op(qualname, _forward(fn), mutates_args=(), schema=schema)
        op.register_fake(_forward(fn))
        if name == "abs_binary_sign_grad":
            op.register_autograd(_abs_backward, setup_context=_setup_abs)
        else:
            op.register_autograd(_straight_through, setup_context=_setup)
        ops[name] = getattr(getattr(torch.ops, NAMESPACE), name).default
    return ops


#: ``{name: OpOverload}`` (``torch.ops.torch2ir_ste.<name>.default``), registered when this module is imported.
OPS: dict[str, Any] = _register()


__all__ = ["NAMESPACE", "OPERATORS", "OPS"]
