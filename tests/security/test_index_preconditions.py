"""Operators that read indices, labels or offsets from tensor data have them checked before the kernel runs
(issue 50, :mod:`ir2torch.run_safety.index_checks`), in a rebuilt module-level IR and in an executed FlatIR, with
a memory budget (the call is probed on fake tensors, then run with the data checks) and without one.

Each case is a layer calling one such operator: honest values give PyTorch's result; each hostile value is one
PyTorch itself refuses (checked here first), and the rebuild refuses it with an ``IRError`` saying it was
refused before it ran. Operators outside the default surface are opted in with ``allow=``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from common import safety
from common.errors import IRError
from common.required_ops import function_names
from common.surface import opt_in
from ir2torch.run_safety.index_checks import INDEX_OPS
from ir2torch.run_safety.op_preconditions import PRECONDITIONS
from tests.security.op_corpus import permissive


class _Layer(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn
        self.weight = nn.Parameter(torch.randn(5, 3, generator=torch.Generator().manual_seed(1)))

    def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return self.fn(self, x, i)


X = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))

#: name -> (the layer's function, honest (x, i), hostile i's). x is a 4 x 5 float tensor.
CASES: dict[str, tuple[Callable[..., torch.Tensor], torch.Tensor, list[torch.Tensor]]] = {
    "embedding": (lambda m, x, i: F.embedding(i, m.weight) + x.sum(),
                  torch.tensor([0, 4, 2]), [torch.tensor([0, 5, 1]), torch.tensor([-1, 0, 0]),
                                            torch.tensor([0, 10**12, 0])]),
    "index_select": (lambda m, x, i: torch.index_select(x, 1, i), torch.tensor([4, 0, 2]),
                     [torch.tensor([0, 5, 1]), torch.tensor([-1, 0, 1])]),
    "gather": (lambda m, x, i: torch.gather(x, 1, i.reshape(1, 3).expand(4, 3)), torch.tensor([4, 0, 2]),
               [torch.tensor([0, 5, 1]), torch.tensor([0, -1, 1])]),
    "index_tensor": (lambda m, x, i: x[i], torch.tensor([3, -4, 0]),
                     [torch.tensor([0, 4, 1]), torch.tensor([-5, 0, 1])]),
    "index_put": (lambda m, x, i: x.index_put((i,), torch.ones(5)), torch.tensor([3, -4, 0]),
                  [torch.tensor([0, 4, 1]), torch.tensor([2**40, 0, 0])]),
    "scatter": (lambda m, x, i: x.scatter(1, i.reshape(1, 3), 1.0), torch.tensor([4, 0, 2]),
                [torch.tensor([0, 5, 1]), torch.tensor([0, -1, 1])]),
    "scatter_add": (lambda m, x, i: x.scatter_add(1, i.reshape(1, 3), torch.ones(1, 3)), torch.tensor([4, 0, 2]),
                    [torch.tensor([0, 5, 1])]),
    "index_add": (lambda m, x, i: x.index_add(0, i, torch.ones(3, 5)), torch.tensor([3, 0, 2]),
                  [torch.tensor([0, 4, 1]), torch.tensor([0, -5, 1])]),
    "take": (lambda m, x, i: torch.take(x, i), torch.tensor([19, -20, 3]),
             [torch.tensor([20, 0, 1]), torch.tensor([-21, 0, 0])]),
    "cross_entropy": (lambda m, x, i: F.cross_entropy(x[:3], i), torch.tensor([4, 0, 2]),
                      [torch.tensor([0, 5, 1]), torch.tensor([0, -3, 1])]),
    "nll_loss_ignored": (lambda m, x, i: F.nll_loss(x[:3].log_softmax(-1), i, ignore_index=-1),
                         torch.tensor([4, -1, 2]), [torch.tensor([0, -2, 1]), torch.tensor([9, 0, 1])]),
    "one_hot": (lambda m, x, i: F.one_hot(i, 5).float() + x.sum(), torch.tensor([4, 0, 2]),
                [torch.tensor([0, 5, 1]), torch.tensor([-1, 0, 1])]),
    "bincount": (lambda m, x, i: torch.bincount(i, minlength=6).float() + x.sum(), torch.tensor([4, 0, 2]),
                 [torch.tensor([0, -1, 1])]),
}


def _allow(model: nn.Module, args: tuple) -> list[str]:
    """The opt-ins the model's operators need beyond the default surface."""
    with permissive():
        names = function_names(torch2ir.convert(model, args)) | {n.op_type for n in torch2ir.lower(
            model, args, decompose=True).nodes}
    return [opt_in(n) for n in sorted(names) if safety.DEFAULT_ALLOWLIST.outside_surface(n)]


@pytest.mark.parametrize("flat", [False, True], ids=["ir", "flat"])
@pytest.mark.parametrize("budget", ["available", None])
@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_indices_are_refused_before_the_kernel_runs(name: str, budget: str | None, flat: bool) -> None:
    fn, honest, hostile = CASES[name]
    model = _Layer(fn).eval()
    args = (X, honest)
    allow = _allow(model, args)
    if flat:
        ir = torch2ir.lower(model, args, decompose=True, allow=allow)
    else:
        ir = torch2ir.convert(model, args, allow=allow)
    rebuilt = ir2torch.get_default_converter().convert(ir, dict(model.state_dict()),
                                                       max_bytes=budget, allow=allow, guard_inputs=False)
    torch.testing.assert_close(rebuilt(*args), model(*args))
    for index in hostile:
        with pytest.raises((IndexError, RuntimeError)):  # PyTorch refuses it too (in its kernel)
            model(X, index)
        # one_hot is a composite: PyTorch's composite checks the values itself (min and max) before the scatter it
        # becomes, whose indices are checked too; every other operator reaches its precondition
        with pytest.raises(IRError, match="refused before it runs" if name != "one_hot" else
                           "refused before it runs|Class values must be (smaller|non-negative)"):
            rebuilt(X, index)


def test_every_default_operator_reading_indices_has_a_precondition() -> None:
    """Derived from the surface: every default overload with a tensor argument named like an index, a label, an
    offset or a count has a precondition (the index checks, or repeat_interleave's and ctc_loss's own)."""
    from common.surface import default_surface

    words = ("index", "indices", "target", "offsets", "repeats", "lengths", "sorter")
    # losses whose target holds values compared elementwise with the input (broadcast, checked by the kernel's
    # shape rules), never read as an index or a label
    value_targets = {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy",
                     "binary_cross_entropy_with_logits", "kl_div", "soft_margin_loss"}
    missing = []
    for name in sorted(default_surface()):
        _, op, overload = name.split(".")
        if op in value_targets:
            continue
        schema = getattr(getattr(torch.ops.aten, op), overload)._schema
        if any("Tensor" in str(a.type) and any(w in a.name for w in words) for a in schema.arguments) and \
                name not in PRECONDITIONS:
            missing.append(name)
    assert missing == []


def test_every_index_op_has_its_checks_for_each_overload() -> None:
    """Every overload of every operator of INDEX_OPS that torch has is checked (``.out`` and in-place too)."""
    from common import op_classes

    for name in op_classes.ATEN:
        if name.split(".")[1] in INDEX_OPS:
            assert name in PRECONDITIONS, name


def test_an_index_after_a_zero_dim_mask_is_checked_against_the_dim_it_indexes() -> None:
    """A 0-dim bool mask covers no dim of ``self`` (``x[True, i]`` indexes dim 0 with ``i``), so ``i`` is checked
    against dim 0's size, not dim 1's: 4 is within dim 1 (5) but not dim 0 (4)."""
    from ir2torch.run_safety.index_checks import _tensor_indices

    mask, inside, outside = torch.tensor(True), torch.tensor([3, -4]), torch.tensor([4])
    assert X[mask, inside].shape == (2, 5)  # PyTorch's own reading: dim 0 indexed
    with pytest.raises(IndexError):
        X[mask, outside]
    assert _tensor_indices({"self": X, "indices": [mask, inside]}) is None
    assert _tensor_indices({"self": X, "indices": [mask, outside]}) is not None
    assert _tensor_indices({"self": X, "indices": [torch.ones(4, dtype=torch.bool), torch.tensor([4])]}) is None
