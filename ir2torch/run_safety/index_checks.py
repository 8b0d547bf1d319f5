"""Preconditions of the operators whose kernels read indices, labels, offsets or counts from tensor data (issue 50).

ATen kernels trust their callers more or less: most bounds-check an index (``IndexError``), some read past the
data (``ctc_loss``, ``repeat_interleave``'s wrapping sum: :mod:`ir2torch.run_safety.op_preconditions`), and none of
them is a promise a model format should rest on. Every operator of :data:`INDEX_OPS` has the values its kernel reads
from tensor data checked before the kernel runs: indices within the dimension they index (negative ones where the
operator wraps them), labels within the classes or equal to ``ignore_index``, offsets non-decreasing from 0
within the indices, counts non-negative. :data:`INDEX_PRECONDITIONS` holds one check per overload of each
(``aten.gather.default``, ``aten.gather.out``...), merged into
:data:`ir2torch.run_safety.op_preconditions.PRECONDITIONS`, which the forward budget tests before every op of a
rebuilt module-level IR and of an executed FlatIR alike (:mod:`ir2torch.run_safety.forward_budget`). On fake tensors
(the budget's probe) the values are unknown and nothing is checked: these operators' output sizes follow from the index
*shapes*; the real call then checks them in the nodes that call these operators
(:mod:`ir2torch.run_safety.node_checks`).

``tests/security/test_index_preconditions.py`` plants out-of-range values for each and checks that an ``IRError``
comes out where PyTorch itself raises, and that honest values give PyTorch's result.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

Check = Callable[[dict[str, Any]], "str | None"]


def _real(t: Any) -> bool:
    """A tensor whose values can be read (not fake, not meta), of an integer or bool dtype, with elements."""
    if not isinstance(t, torch.Tensor) or t.is_meta or t.numel() == 0 or t.is_floating_point() \
            or t.is_complex() or t.layout is not torch.strided:
        return False
    if type(t) is torch.Tensor:  # no subclass, so no fake tensor
        return True
    from torch._subclasses.fake_tensor import FakeTensor

    return not isinstance(t, FakeTensor)


#: Most elements whose bounds are read as Python numbers (one copy to the host instead of a reduction and two).
_FEW = 64


def _bounds(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() <= _FEW:  # a decoding step's few token ids
        values = t.reshape(-1).tolist()
        return int(min(values)), int(max(values))
    low, high = torch.aminmax(t.reshape(-1).to(torch.int64) if t.dtype == torch.bool else t.reshape(-1))
    return int(low), int(high)


def _within(what: str, t: Any, size: int, *, negative: bool) -> str | None:
    """Why ``t``'s values are not indices into a dimension of ``size`` (``-size..size-1`` with ``negative``)."""
    if not _real(t) or t.dtype == torch.bool:
        return None
    low, high = _bounds(t)
    floor = -size if negative else 0
    if low < floor or high >= size:
        span = f"{floor}..{size - 1}" if size else "nothing (the dimension is empty)"
        return f"{what} holds values from {low} to {high}, outside {span}"
    return None


def _dim_size(t: Any, dim: Any) -> int | None:
    """``t.size(dim)`` (a 0-d tensor has one element along dim 0 or -1), or None when ``dim`` is not one of its
    dims (the kernel refuses that itself)."""
    if not isinstance(t, torch.Tensor) or not isinstance(dim, int):
        return None
    rank = max(t.dim(), 1)
    if not -rank <= dim < rank:
        return None
    return 1 if t.dim() == 0 else t.size(dim)


def _along_dim(index: str, *, negative: bool) -> Check:
    """``index`` indexes ``self`` along ``dim`` (gather, scatter, index_select, index_add...)."""

    def check(a: dict[str, Any]) -> str | None:
        size = _dim_size(a.get("self"), a.get("dim"))
        return None if size is None else _within(index, a.get(index), size, negative=negative)

    return check


def _embedding(a: dict[str, Any]) -> str | None:
    weight = a.get("weight", a.get("self"))
    if not isinstance(weight, torch.Tensor) or weight.dim() < 1:
        return None
    problem = _within("indices", a.get("indices"), weight.size(0), negative=False)
    if problem is not None or a.get("offsets") is None:
        return problem
    offsets, indices = a["offsets"], a["indices"]
    if not _real(offsets) or not isinstance(indices, torch.Tensor) or indices.dim() != 1:
        return None
    values = offsets.reshape(-1).tolist()
    if values[0] != 0 or any(after < before for before, after in itertools.pairwise(values)) or \
            values[-1] > indices.numel():
        return f"offsets must rise from 0 to at most the {indices.numel()} indices"
    return None


def _tensor_indices(a: dict[str, Any]) -> str | None:
    """``self[indices]`` (index.Tensor, index_put): each integer index within the dim it indexes (negative
    ones wrap), a bool mask over as many dims as it has (a 0-dim mask over none: `x[True, i]` indexes dim 0)."""
    self, indices = a.get("self"), a.get("indices")
    if not isinstance(self, torch.Tensor) or not isinstance(indices, (list, tuple)):
        return None
    dim = 0
    for position, index in enumerate(indices):
        if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
            dim += index.dim()  # a k-dim mask covers k dims (a 0-dim one none)
            continue
        if index is not None and dim < self.dim():
            problem = _within(f"index {position}", index, self.size(dim), negative=True)
            if problem is not None:
                return problem
        dim += 1
    return None


def _flat(index: str) -> Check:
    """``index`` indexes ``self`` as if flattened (take, put), negative ones wrapping."""

    def check(a: dict[str, Any]) -> str | None:
        self = a.get("self")
        return None if not isinstance(self, torch.Tensor) else _within(index, a.get(index), self.numel(),
                                                                         negative=True)

    return check


def _take_along_dim(a: dict[str, Any]) -> str | None:
    self, dim = a.get("self"), a.get("dim")
    size = self.numel() if dim is None and isinstance(self, torch.Tensor) else _dim_size(self, dim)
    return None if size is None else _within("indices", a.get("indices"), size, negative=True)


def _classes(self: Any) -> int | None:
    if not isinstance(self, torch.Tensor):
        return None
    return self.size(1) if self.dim() >= 2 else self.size(0) if self.dim() == 1 else None


def _labels(*, floor: int = 0) -> Check:
    """``target`` holds class labels of ``self`` (``0..C-1``; ``ignore_index`` too where the op has it)."""

    def check(a: dict[str, Any]) -> str | None:
        classes, target = _classes(a.get("self")), a.get("target")
        if classes is None or not _real(target):
            return None
        ignore = a.get("ignore_index")
        if isinstance(ignore, int):
            target = target[target != ignore]
            if target.numel() == 0:
                return None
        return _within("target", target, classes, negative=False) if floor == 0 else \
            _within("target", target + 1, classes + 1, negative=False)

    return check


def _non_negative(what: str) -> Check:
    def check(a: dict[str, Any]) -> str | None:
        t = a.get(what)
        if _real(t) and t.dtype != torch.bool and _bounds(t)[0] < 0:
            return f"{what} holds negative values"
        return None

    return check


def _one_hot(a: dict[str, Any]) -> str | None:
    self, classes = a.get("self"), a.get("num_classes", -1)
    if not _real(self):
        return None
    low, high = _bounds(self)
    if low < 0:
        return "the class values are negative"
    if isinstance(classes, int) and classes >= 0 and high >= classes:
        return f"class value {high} is not below num_classes={classes}"
    return None


def _unpool(a: dict[str, Any]) -> str | None:
    size = a.get("output_size")
    if not isinstance(size, (list, tuple)) or not all(isinstance(s, int) for s in size):
        return None
    return _within("indices", a.get("indices"), math.prod(size), negative=False)


def _sorter(a: dict[str, Any]) -> str | None:
    sequence = a.get("sorted_sequence")
    if not isinstance(sequence, torch.Tensor) or sequence.dim() == 0 or a.get("sorter") is None:
        return None
    return _within("sorter", a["sorter"], sequence.size(-1), negative=False)


#: Operators (all their overloads) whose kernels read indices, labels, offsets or counts from tensor data -> the
#: check of their bound arguments. ``repeat_interleave`` and ``ctc_loss`` are in
#: :mod:`ir2torch.run_safety.op_preconditions`.
INDEX_OPS: dict[str, Check] = {
    "embedding": _embedding,
    "embedding_renorm": _embedding,
    "embedding_renorm_": _embedding,
    "embedding_bag": _embedding,
    "_embedding_bag": _embedding,
    "_embedding_bag_forward_only": _embedding,
    "index_select": _along_dim("index", negative=False),
    "gather": _along_dim("index", negative=False),
    "scatter": _along_dim("index", negative=False),
    "scatter_": _along_dim("index", negative=False),
    "scatter_add": _along_dim("index", negative=False),
    "scatter_add_": _along_dim("index", negative=False),
    "scatter_reduce": _along_dim("index", negative=False),
    "scatter_reduce_": _along_dim("index", negative=False),
    "index_add": _along_dim("index", negative=True),
    "index_add_": _along_dim("index", negative=True),
    "index_copy": _along_dim("index", negative=True),
    "index_copy_": _along_dim("index", negative=True),
    "index_fill": _along_dim("index", negative=True),
    "index_fill_": _along_dim("index", negative=True),
    "index_reduce": _along_dim("index", negative=True),
    "index_reduce_": _along_dim("index", negative=True),
    "index": _tensor_indices,
    "_unsafe_index": _tensor_indices,
    "index_put": _tensor_indices,
    "index_put_": _tensor_indices,
    "_unsafe_index_put": _tensor_indices,
    "take": _flat("index"),
    "put": _flat("index"),
    "put_": _flat("index"),
    "take_along_dim": _take_along_dim,
    "nll_loss": _labels(),
    "nll_loss_forward": _labels(),
    "nll_loss2d": _labels(),
    "nll_loss2d_forward": _labels(),
    "nll_loss_nd": _labels(),
    "cross_entropy_loss": _labels(),
    "multi_margin_loss": _labels(),
    "multilabel_margin_loss": _labels(floor=-1),
    "multilabel_margin_loss_forward": _labels(floor=-1),
    "bincount": _non_negative("self"),
    "one_hot": _one_hot,
    "max_unpool2d": _unpool,
    "max_unpool3d": _unpool,
    "searchsorted": _sorter,
}


@functools.cache
def _schema_names(name: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """The argument names of ``aten.<op>.<overload>``, and those that are keyword-only."""
    _, op, overload = name.split(".")
    schema = getattr(getattr(torch.ops.aten, op), overload)._schema
    return tuple(a.name for a in schema.arguments), frozenset(a.name for a in schema.arguments if a.kwarg_only)


def bind(name: str, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments of a call of ``aten.<op>.<overload>`` by their schema names."""
    names, _ = _schema_names(name)
    bound = dict(zip(names, args, strict=False))
    bound.update(kwargs)
    return bound


def _precondition(name: str, check: Check) -> Callable[..., str | None]:
    def precondition(*args: Any, **kwargs: Any) -> str | None:
        return check(bind(name, args, kwargs))

    precondition.__name__ = f"index_check_{name.replace('.', '_')}"
    return precondition


def index_preconditions(table: dict[str, str]) -> dict[str, Callable[..., str | None]]:
    """One precondition per overload of ``table`` (the operator classes) whose operator is in :data:`INDEX_OPS`."""
    return {name: _precondition(name, INDEX_OPS[name.split(".")[1]]) for name in table
            if name.startswith("aten.") and name.split(".")[1] in INDEX_OPS}


__all__ = ["INDEX_OPS", "bind", "index_preconditions"]
