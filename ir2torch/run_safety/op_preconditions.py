"""What some ATen kernels assume without checking, and the sizes of outputs that depend on data.

:mod:`ir2torch.run_safety.forward_budget` tests :data:`PRECONDITIONS` on an op's arguments before the op runs (on fake
tensors in a probe, on real ones in a checked call), and reads :data:`DATA_SIZES` from the real arguments of an
allocating op whose output size fake tensors cannot tell.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch

from common import op_classes
from ir2torch.run_safety.index_checks import index_preconditions


def _nonempty_weight_norm(v: Any, g: Any, dim: int = 0) -> str | None:
    if isinstance(v, torch.Tensor) and isinstance(g, torch.Tensor) and (v.numel() == 0 or g.numel() == 0):
        return "weight norm of an empty tensor (the CPU kernel divides by zero and kills the process)"
    return None


def _fft_dims(self: Any, dim: Any, *args: Any, **kwargs: Any) -> str | None:
    if not isinstance(self, torch.Tensor) or not isinstance(dim, (list, tuple)):
        return None
    rank = max(self.dim(), 1)
    if any(not isinstance(d, int) or not -rank <= d < rank for d in dim) or \
            len({d % rank for d in dim}) != len(dim):
        return f"dims {list(dim)[:8]} are not distinct dims of a {self.dim()}-d tensor (the kernel does not check)"
    return None


#: Largest ``|decimals|`` of ``aten.round.decimals*``: a float64 holds powers of ten up to 1e308, so any larger count
#: gives NaN in eager; the op's reference (which the forward's shape probe runs) computes ``10**decimals`` as a Python
#: integer, and ``decimals=10**9`` ran for minutes (found by the long op-level fuzz).
ROUND_DECIMALS_LIMIT = 1000


def _round_decimals(self: Any, *args: Any, decimals: Any = 0, **kwargs: Any) -> str | None:
    if isinstance(decimals, int) and abs(decimals) > ROUND_DECIMALS_LIMIT:
        return (f"decimals={decimals} is beyond +-{ROUND_DECIMALS_LIMIT} (past 308 every value rounds to NaN, and "
                "the shape probe would compute 10**decimals as a Python integer)")
    return None


#: Largest work (output elements x degree) of the ``aten.special_*_polynomial_*`` kernels, which run a recurrence
#: of ``n`` steps per element on the CPU (the Legendre one does not stop early for ``|x| < 1``): ``n = 2**62``
#: ran for minutes in the long op-level fuzz. 10**8 steps take well under a second.
POLYNOMIAL_WORK_LIMIT = 10**8
_POLYNOMIALS = ("chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v",
                "chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
                "legendre_polynomial_p", "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
                "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w")


def _polynomial_work(x: Any, n: Any, *args: Any, **kwargs: Any) -> str | None:
    """The recurrence's steps: ``n`` (a number, or a tensor's largest finite value) times the output's elements.
    A tensor ``n`` without values (fake, in the shape probe) sends the call to the checked run, which reads them."""
    shapes = [tuple(v.shape) for v in (x, n) if isinstance(v, torch.Tensor)]
    elements = math.prod(torch.broadcast_shapes(*shapes)) if shapes else 1
    if isinstance(n, torch.Tensor):
        from torch._subclasses.fake_tensor import FakeTensor

        if n.device.type == "meta" and not isinstance(n, FakeTensor):
            return None  # a meta kernel computes no values
        if isinstance(n, FakeTensor):
            return "the degree n is a tensor whose values set the kernel's run time (read in a checked run)"
        if n.numel() == 0:
            return None
        if not bool(torch.isfinite(n).all()):
            return "the degree n holds a value that is not finite"
        degree = float(n.abs().max())
    elif isinstance(n, (int, float)) and not isinstance(n, bool):
        if not math.isfinite(n):
            return f"the degree n={n} is not finite"
        degree = abs(float(n))
    else:
        return None
    if degree * elements > POLYNOMIAL_WORK_LIMIT:
        return (f"degree {degree:.0f} for {elements} elements is {degree * elements:.3g} steps of the recurrence, "
                f"more than {POLYNOMIAL_WORK_LIMIT:.0e}")
    return None


def _batch_norm_problem(input: Any, training: bool, **stats: Any) -> str | None:
    """What the CPU batch-norm kernel assumes and ``aten.batch_norm`` checks before it: an input of 2 dims or more,
    a weight, bias and running statistics of one element per channel, and running statistics in eval mode."""
    if not isinstance(input, torch.Tensor):
        return None
    if input.dim() < 2:
        return f"batch norm of a {input.dim()}-d input (it needs a channel dim)"
    channels = input.shape[1]
    for name, value in stats.items():
        if isinstance(value, torch.Tensor) and value.numel() != channels:
            return (f"{name} has {value.numel()} elements for {channels} channels (the kernel reads and writes one "
                    "per channel unchecked)")
    if not training and not all(isinstance(stats.get(k), torch.Tensor) for k in ("running_mean", "running_var")):
        return "batch norm in eval mode without running statistics (the kernel reads them unchecked)"
    return None


def _native_batch_norm(input: Any, weight: Any = None, bias: Any = None, running_mean: Any = None,
                       running_var: Any = None, training: bool = False, *args: Any, **kwargs: Any) -> str | None:
    return _batch_norm_problem(input, bool(training), weight=weight, bias=bias, running_mean=running_mean,
                               running_var=running_var)


def _batch_norm_no_stats(input: Any, weight: Any = None, bias: Any = None, training: bool = False, *args: Any,
                         **kwargs: Any) -> str | None:
    return _batch_norm_problem(input, bool(training), weight=weight, bias=bias)


def _batch_norm_no_training(input: Any, weight: Any = None, bias: Any = None, running_mean: Any = None,
                            running_var: Any = None, *args: Any, **kwargs: Any) -> str | None:
    return _batch_norm_problem(input, False, weight=weight, bias=bias, running_mean=running_mean,
                               running_var=running_var)


def _batch_norm_update_stats(input: Any, running_mean: Any = None, running_var: Any = None, *args: Any,
                             **kwargs: Any) -> str | None:
    return _batch_norm_problem(input, True, running_mean=running_mean, running_var=running_var)


def _grouped_mm_fallback(input: Any, weight: Any, offs: Any) -> str | None:
    """transformers' grouped matrix product (:mod:`common.known_ops`): its real kernel leaves the argument checks
    to its fake kernel, so a file's mismatched arguments would reach ``torch.mm`` (a bare error) or an index out
    of the experts (an ``IndexError``). With real ``offs`` (a checked call), its values must be the cumulative row
    counts the kernel expects: non-decreasing, from 0 to the rows of ``input``."""
    if not all(isinstance(t, torch.Tensor) for t in (input, weight, offs)):
        return "input, weight and offs must be tensors"
    if input.dim() != 2 or weight.dim() != 3 or offs.dim() != 1:
        return (f"input must be 2-d, weight 3-d and offs 1-d (got {input.dim()}-d, {weight.dim()}-d, "
                f"{offs.dim()}-d)")
    if offs.dtype not in (torch.int32, torch.int64):
        return f"offs must be int32 or int64, not {offs.dtype}"
    if input.dtype != weight.dtype or not input.dtype.is_floating_point:
        return f"input and weight must have one floating dtype (got {input.dtype} and {weight.dtype})"
    if offs.size(0) != weight.size(0) or input.size(1) != weight.size(1):
        return (f"offs has {offs.size(0)} entries for {weight.size(0)} experts, or input's {input.size(1)} "
                f"columns do not match weight's {weight.size(1)} rows")
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(offs, FakeTensor) or offs.device.type == "meta":
        return None  # no values: the kernel slices rows, whatever they are, within the tensors
    ends = offs.tolist()
    if any(e < 0 or e > input.size(0) for e in ends) or any(b < a for a, b in itertools.pairwise(ends)):
        return f"offs must be non-decreasing row counts within 0..{input.size(0)}"
    return None


def _is_fake(t: Any) -> bool:
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor) or (isinstance(t, torch.Tensor) and t.is_meta)


#: Largest total ``repeat_interleave`` may be asked for (its kernel sums the repeats in int64 and trusts the sum).
REPEAT_TOTAL_LIMIT = 2**53


def _repeat_interleave(repeats: Any, *args: Any, output_size: Any = None, **kwargs: Any) -> str | None:
    """The kernel sums ``repeats`` in int64 and writes that many values into an output sized by the (wrapped) sum
    or by ``output_size``: a sum past 2**63 wrapped and wrote 2**63 - 1 elements (a segfault, issue 50)."""
    if not isinstance(repeats, torch.Tensor) or repeats.is_floating_point() or repeats.is_complex():
        return None  # the kernel refuses those itself
    if _is_fake(repeats):
        # without output_size the output size depends on the values: the call is checked anyway; with it the fake
        # kernel would size the output from a number the real kernel trusts
        return None if output_size is None else "output_size is checked against the repeats in a checked run"
    if repeats.numel() == 0:
        return None if output_size in (None, 0) else f"output_size={output_size} for no repeats"
    if bool((repeats < 0).any()):
        return "repeats has negative values"
    total = float(repeats.double().sum())
    if total > REPEAT_TOTAL_LIMIT:
        return f"the repeats add up to {total:.3g}, past {REPEAT_TOTAL_LIMIT} (the kernel's int64 sum would wrap)"
    if output_size is not None and output_size != int(total):
        return f"output_size={output_size} differs from the sum of the repeats, {int(total)}"
    return None


def _repeat_interleave_self(self: Any, repeats: Any, *args: Any, output_size: Any = None, **kwargs: Any) -> str | None:
    return _repeat_interleave(repeats, output_size=output_size) if isinstance(repeats, torch.Tensor) else None


def _lengths(value: Any) -> list[int] | None:
    if isinstance(value, torch.Tensor):
        return value.reshape(-1).tolist()
    return list(value) if isinstance(value, (list, tuple)) else None


def _ctc_loss(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0, *args: Any,
              **kwargs: Any) -> str | None:
    """The CTC kernel indexes ``log_probs`` by the labels of ``targets`` and walks each sequence by its lengths,
    unchecked: a label of 10**9 segfaulted, 10**5 read out of bounds (issue 50). Labels and lengths are data:
    read in a checked run (the probe sends the call there)."""
    if not (isinstance(log_probs, torch.Tensor) and isinstance(targets, torch.Tensor)) or log_probs.dim() not in (2, 3):
        return None
    steps, classes = log_probs.size(0), log_probs.size(-1)
    if not isinstance(blank, int) or not 0 <= blank < classes:
        return f"blank={blank} is not a class of {classes}"
    if any(_is_fake(v) for v in (targets, input_lengths, target_lengths)):
        return "the labels and lengths are read in a checked run"
    inputs, labels = _lengths(input_lengths), _lengths(target_lengths)
    if inputs is None or labels is None:
        return None
    if any(not 0 <= n <= steps for n in inputs):
        return f"input lengths must be within 0..{steps}"
    if any(n < 0 for n in labels):
        return "target lengths must not be negative"
    if targets.dim() == 2 and any(n > targets.size(1) for n in labels):
        return f"target lengths must be at most {targets.size(1)}"
    if targets.dim() == 1 and sum(labels) > targets.numel():
        return f"the target lengths add up to more than the {targets.numel()} targets"
    if targets.numel() and (targets.is_floating_point() or bool(((targets < 0) | (targets >= classes)).any())):
        return f"targets must be class labels within 0..{classes - 1}"
    return None


#: Conditions an op's real kernel assumes without checking, tested on its arguments before it runs (fake or real):
#: ``aten._weight_norm`` (which wav2vec2's exports call) reaches ``_weight_norm_interface``, whose CPU kernel gets a
#: SIGFPE on an empty input; the internal FFTs (which decomposed exports of FNet call) crash on dims out of range
#: (both found by the op-level fuzz); the batch-norm kernels (which decomposed exports of every CNN call) read and
#: write one element per channel of weight, bias and running statistics without checking their sizes, and read
#: the running statistics in eval mode even when there are none (segfaults, found by the long op-level fuzz;
#: ``aten.batch_norm`` checks both before it calls them); ``aten.round`` with an absurd ``decimals`` (see
#: :data:`ROUND_DECIMALS_LIMIT`); the special polynomials' recurrences (see :data:`POLYNOMIAL_WORK_LIMIT`); the
#: known operators of other libraries (:mod:`common.known_ops`) whose real kernel leaves its checks to its fake one.
#: The operators that read indices, labels, offsets or counts from tensor data have theirs checked
#: (:mod:`ir2torch.run_safety.index_checks`, every overload the operator classes know).
PRECONDITIONS: dict[str, Callable[..., str | None]] = {
    **index_preconditions(op_classes.ATEN),
    "transformers.grouped_mm_fallback.default": _grouped_mm_fallback,
    "aten.repeat_interleave.Tensor": _repeat_interleave,
    **{f"aten.repeat_interleave.{o}": _repeat_interleave_self for o in ("self_Tensor", "self_int")},
    # a graph names ctc_loss; the checked run sees the kernel it calls, _ctc_loss: both are checked
    **{f"aten.{op}.{o}": _ctc_loss for op in ("ctc_loss", "_ctc_loss") for o in ("IntList", "Tensor", "default")},
    **{f"aten.native_batch_norm.{o}": _native_batch_norm for o in ("default", "out")},
    **{f"aten._native_batch_norm_legit.{o}": _native_batch_norm for o in ("default", "out")},
    **{f"aten._native_batch_norm_legit.{o}": _batch_norm_no_stats for o in ("no_stats", "no_stats_out")},
    **{f"aten._native_batch_norm_legit_no_training.{o}": _batch_norm_no_training for o in ("default", "out")},
    **{f"aten.batch_norm_update_stats.{o}": _batch_norm_update_stats for o in ("default", "out")},
    **{f"aten.round.{o}": _round_decimals for o in ("decimals", "decimals_out")},
    **{f"aten.special_{op}.{o}": _polynomial_work for op in _POLYNOMIALS
       for o in ("default", "out", "x_scalar", "x_scalar_out", "n_scalar", "n_scalar_out")},
    "aten._weight_norm_interface.default": _nonempty_weight_norm,
    "aten._weight_norm.default": _nonempty_weight_norm,
    **{f"aten.{op}.{overload}": _fft_dims for op in ("_fft_r2c", "_fft_c2r", "_fft_c2c") for overload in ("default",
                                                                                                        "out")},
}


#: The precondition of each operator object seen (None: it has none): every op of a checked call asks.
_CHECKS: dict[Any, Callable[..., str | None] | None] = {}


def check_preconditions(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise ``RuntimeError`` (turned into an ``ExecutionError`` naming the node) when ``func``'s precondition
    (:data:`PRECONDITIONS`) refuses ``args`` and ``kwargs``."""
    try:
        check = _CHECKS[func]
    except KeyError:
        check = _CHECKS[func] = PRECONDITIONS.get(qualified(func))
    except TypeError:  # an unhashable callable
        check = PRECONDITIONS.get(qualified(func))
    if check is not None:
        problem = check(*args, **kwargs)
        if problem is not None:
            raise RuntimeError(f"{func}: {problem}; refused before it runs")


def _one_hot_bytes(input: torch.Tensor, num_classes: int = -1) -> int:
    width = num_classes if num_classes >= 0 else (int(input.max()) + 1 if input.numel() else 0)
    return input.numel() * max(width, 0) * 8


def _bincount_bytes(input: torch.Tensor, weights: Any = None, minlength: int = 0) -> int:
    size = max(int(minlength), int(input.max()) + 1 if input.numel() else 0)
    return size * (8 if weights is None else max(8, weights.element_size()))


def _repeat_interleave_bytes(repeats: torch.Tensor, *args: Any, **kwargs: Any) -> int:
    return int(max(float(repeats.double().sum()) if repeats.numel() else 0.0, 0.0)) * 8  # no int64 wrapping


#: Bytes of the output of allocating ops whose size depends on their data, from the real arguments (in a checked
#: call, where fake tensors cannot tell).
DATA_SIZES: dict[str, Callable[..., int]] = {
    "aten.bincount.default": _bincount_bytes,
    "aten.one_hot.default": _one_hot_bytes,
    "aten.repeat_interleave.Tensor": _repeat_interleave_bytes,
}


def qualified(func: Any) -> str:
    """``aten.<op>.<overload>`` of an ``OpOverload`` (the operator classes' key)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return str(func)
    return f"{schema.name.replace('::', '.')}.{getattr(func, '_overloadname', 'default')}"


__all__ = ["DATA_SIZES", "PRECONDITIONS", "check_preconditions", "qualified"]
