"""The Python-level functions a file may name, and the bounded arithmetic that stands in for some of them.

Part of the allow-list (:mod:`common.safety`, which re-exports these names): :data:`PYTHON_FUNCTIONS` lists the
``operator``, ``math``, ``torch`` and ``torch.nn.functional`` functions a function node may call by name;
:data:`BOUNDED_FUNCTIONS` replaces ``operator.mul``/``add``/``pow``/``lshift`` with versions that refuse results
past :data:`MAX_SEQUENCE_ITEMS` items or :data:`MAX_INT_BITS` bits (a file's ``[0] * 10**12`` or ``2 ** 10**9``);
:func:`function_name` names a callable as a file names it.
"""

from __future__ import annotations

import math
import operator
import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .errors import IRValidationError, ResourceBudgetError, UnsafeTargetError

__all__ = ["BOUNDED_FUNCTIONS", "HIGHER_ORDER_OPS", "MAX_INT_BITS", "MAX_SEQUENCE_ITEMS", "MODULE_BATCH_NORM",
           "PYTHON_FUNCTIONS", "bounded_add", "bounded_lshift", "bounded_mul", "bounded_pow", "function_name",
           "module_batch_norm", "resolve_python"]

_OPERATOR = (
    "getitem", "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos",
    "matmul", "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "xor", "not_", "invert",
    "lshift", "rshift", "abs", "index", "contains", "is_", "is_not",
)  # fmt: skip
_MATH = ("sqrt", "ceil", "floor", "trunc", "log", "exp", "pow", "sin", "cos", "isinf", "isnan")
_TORCH = (
    "abs", "add", "addmm", "all", "any", "arange", "argmax", "argmin", "baddbmm", "bmm", "cat",
    "chunk", "clamp", "clone", "cos", "cumsum", "div", "einsum", "eq", "exp", "flatten", "full",
    "gather", "ge", "gt", "index_select", "le", "log", "logsumexp", "lt", "masked_fill", "matmul",
    "max", "maximum", "mean", "min", "minimum", "mm", "mul", "ne", "neg", "ones", "ones_like",
    "permute", "pow", "relu", "reshape", "rsqrt", "sigmoid", "sin", "softmax", "split", "sqrt",
    "squeeze", "stack", "sub", "sum", "tanh", "tensor_split", "tile", "transpose", "tril",
    "triu", "unsqueeze", "where", "zeros", "zeros_like", "sym_float", "sym_int", "sym_max",
    "sym_ite", "sym_min", "sym_not", "sym_sum", "Size",
)  # fmt: skip
_FUNCTIONAL = (
    "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "batch_norm", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "dropout", "elu", "embedding", "gelu", "glu",
    "group_norm", "hardsigmoid", "hardswish", "hardtanh", "instance_norm", "interpolate",
    "layer_norm", "leaky_relu", "linear", "log_softmax", "max_pool1d", "max_pool2d",
    "max_pool3d", "mish", "normalize", "pad", "relu", "relu6", "rms_norm",
    "scaled_dot_product_attention", "selu", "sigmoid", "silu", "softmax", "softplus", "tanh",
)  # fmt: skip

#: The name a file gives :func:`module_batch_norm`.
MODULE_BATCH_NORM = "ir.module_batch_norm"

#: Qualified names of the Python-level functions an IR may name.
PYTHON_FUNCTIONS: frozenset[str] = frozenset(
    [MODULE_BATCH_NORM]
    + [f"operator.{n}" for n in _OPERATOR]
    + [f"math.{n}" for n in _MATH]
    + [f"torch.{n}" for n in _TORCH]
    + [f"torch.nn.functional.{n}" for n in _FUNCTIONAL]
)

#: Higher-order operators an IR may name (their subgraphs are IR graphs themselves).
HIGHER_ORDER_OPS: frozenset[str] = frozenset(
    ["higher_order.wrap_with_set_grad_enabled", "higher_order.wrap_with_autocast", "higher_order.cond"]
)

def _flag(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise IRValidationError(f"{MODULE_BATCH_NORM}: {what} is {type(value).__name__} {str(value)[:40]!r}, "
                                "not a bool",
                                key=what, hint="the IR's batch norms of a module's own state pass bools there")
    return value


def _number(value: Any, what: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value):
        raise IRValidationError(f"{MODULE_BATCH_NORM}: {what} is {type(value).__name__} {str(value)[:40]!r}, not a "
                                "finite number", key=what,
                                hint="momentum and eps are the module's own (momentum=None is not carried)")
    return float(value)


def _state(value: Any, what: str) -> torch.Tensor | None:
    if value is not None and not isinstance(value, torch.Tensor):
        raise IRValidationError(f"{MODULE_BATCH_NORM}: {what} is {type(value).__name__}, not a tensor or None",
                                key=what, hint="weight, bias and the statistics are the module's own state")
    return value


def module_batch_norm(input: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                      running_mean: torch.Tensor | None, running_var: torch.Tensor | None,
                      num_batches_tracked: torch.Tensor | None, training: bool, track_running_stats: bool,
                      momentum: float, eps: float) -> torch.Tensor:
    """What ``torch.nn.BatchNorm{1,2,3}d.forward`` (``_BatchNorm.forward``) computes for a module of this state and
    these options, in train mode (``training``: the batch's statistics, running statistics and
    ``num_batches_tracked`` updated in place) and in eval mode (the running statistics), as a function of them.

    A module that subclasses a batch norm with a forward of its own computing that first (timm's ``BatchNormAct2d``:
    the batch norm, then its ``drop`` and ``act`` children) is traced in eval mode; torch2ir puts this function in
    place of its eval-form batch-norm op once the train-mode pass showed that its train-mode call computes the
    base's (:mod:`torch2ir.train.batch_norm`), so that the rebuild's train mode is the original's. ``momentum``
    ``None`` (a cumulative average read from ``num_batches_tracked``'s value) is not carried.

    Raises:
        IRValidationError: an argument of another type than the module's state and options have (a file's
            ``"momentum": "x"``), before anything runs.
    """
    weight, bias = _state(weight, "weight"), _state(bias, "bias")
    running_mean, running_var = _state(running_mean, "running_mean"), _state(running_var, "running_var")
    num_batches_tracked = _state(num_batches_tracked, "num_batches_tracked")
    training, track = _flag(training, "training"), _flag(track_running_stats, "track_running_stats")
    factor, eps = _number(momentum, "momentum"), _number(eps, "eps")
    if training and track and num_batches_tracked is not None:
        num_batches_tracked.add_(1)
    tracked = not training or track
    return F.batch_norm(input, running_mean if tracked else None, running_var if tracked else None, weight, bias,
                        training or (running_mean is None and running_var is None), factor, eps)


_ROOTS: dict[str, Any] = {"operator": operator, "math": math, "torch.nn.functional": F, "torch": torch,
                          "ir": types.SimpleNamespace(module_batch_norm=module_batch_norm)}

#: Largest sequence a Python-level function may build from an IR's values (items).
MAX_SEQUENCE_ITEMS = 10**7
#: Largest integer a Python-level function may build from an IR's values (bits).
MAX_INT_BITS = 10**5

_SEQUENCES = (list, tuple, str, bytes, bytearray)


def _too_big(what: str, size: int, limit: int, unit: str) -> ResourceBudgetError:
    return ResourceBudgetError(f"{what} would build {size} {unit} (limit {limit})", key=what,
                               hint="the IR's constants ask for a result far larger than any model needs")


def _repeat_count(n: Any) -> int | None:
    """The repeat count Python takes from ``n`` for ``sequence * n`` (through ``__index__``: an int tensor too)."""
    if isinstance(n, _SEQUENCES) or not hasattr(type(n), "__index__"):
        return None
    return operator.index(n)


def bounded_mul(a: Any, b: Any) -> Any:
    """``operator.mul`` that refuses a sequence repetition above :data:`MAX_SEQUENCE_ITEMS` items or an integer
    product above :data:`MAX_INT_BITS` bits (exact result otherwise; tensors and symbolic ints pass through)."""
    if isinstance(a, int) and isinstance(b, int):
        if a.bit_length() + b.bit_length() > MAX_INT_BITS:
            raise _too_big("operator.mul", a.bit_length() + b.bit_length(), MAX_INT_BITS, "bits")
    elif isinstance(a, _SEQUENCES) or isinstance(b, _SEQUENCES):
        seq, n = (a, b) if isinstance(a, _SEQUENCES) else (b, a)
        count = _repeat_count(n)
        if count is not None and count > 0 and len(seq) * count > MAX_SEQUENCE_ITEMS:
            raise _too_big("operator.mul", len(seq) * count, MAX_SEQUENCE_ITEMS, "items")
    return a * b


def bounded_add(a: Any, b: Any) -> Any:
    """``operator.add`` that refuses a sequence concatenation above :data:`MAX_SEQUENCE_ITEMS` items (a chain of
    ``x + x`` doubles a list at every node); exact result otherwise."""
    if isinstance(a, _SEQUENCES) and isinstance(b, _SEQUENCES) and len(a) + len(b) > MAX_SEQUENCE_ITEMS:
        raise _too_big("operator.add", len(a) + len(b), MAX_SEQUENCE_ITEMS, "items")
    return a + b


def bounded_pow(a: Any, b: Any) -> Any:
    """``operator.pow`` that refuses an integer power above :data:`MAX_INT_BITS` bits (exact result otherwise)."""
    if isinstance(a, int) and isinstance(b, int) and b > 0 and a not in (0, 1, -1):
        bits = (a.bit_length() - 1) * b + 1
        if bits > MAX_INT_BITS:
            raise _too_big("operator.pow", bits, MAX_INT_BITS, "bits")
    return a**b


def bounded_lshift(a: Any, b: Any) -> Any:
    """``operator.lshift`` that refuses an integer above :data:`MAX_INT_BITS` bits (exact result otherwise)."""
    if isinstance(a, int) and isinstance(b, int) and a and b > 0 and a.bit_length() + b > MAX_INT_BITS:
        raise _too_big("operator.lshift", a.bit_length() + b, MAX_INT_BITS, "bits")
    return a << b


#: Python-level functions that resolve to a bounded wrapper instead of the builtin.
BOUNDED_FUNCTIONS: dict[str, Callable] = {
    "operator.add": bounded_add, "operator.mul": bounded_mul, "operator.pow": bounded_pow,
    "operator.lshift": bounded_lshift,
}
_BOUNDED_NAMES: dict[Callable, str] = {fn: name for name, fn in BOUNDED_FUNCTIONS.items()}


def resolve_python(name: str) -> Callable:
    if name in BOUNDED_FUNCTIONS:
        return BOUNDED_FUNCTIONS[name]
    for prefix in sorted(_ROOTS, key=len, reverse=True):
        if name.startswith(prefix + "."):
            return getattr(_ROOTS[prefix], name[len(prefix) + 1 :])
    raise AssertionError(name)  # unreachable: names come from PYTHON_FUNCTIONS


def function_name(fn: Any) -> str:
    """Qualified name of a callable as an IR names it (``aten.add.Tensor``, ``operator.getitem``).

    Raises:
        UnsafeTargetError: ``fn`` has no name on the allow-list.
    """
    if isinstance(fn, torch._ops.OpOverload):
        return f"aten.{fn._schema.name.split('::', 1)[1]}.{fn._overloadname}" if fn.namespace == "aten" else str(fn)
    if isinstance(fn, torch._ops.HigherOrderOperator):
        return f"higher_order.{fn.name()}"
    bounded = _BOUNDED_NAMES.get(fn) if callable(fn) else None
    if bounded is not None:
        return bounded
    for prefix, mod in _ROOTS.items():
        name = getattr(fn, "__name__", None)
        if name is not None and getattr(mod, name, None) is fn and f"{prefix}.{name}" in PYTHON_FUNCTIONS:
            return f"{prefix}.{name}"
    raise UnsafeTargetError(
        f"callable {fn!r} has no name on the allow-list",
        hint="use an ATen op or an allowed torch/operator function",
    )
