"""One probe for a family of input shapes: the forward budget's probe run on symbolic sizes (issue 52).

:class:`~ir2torch.run_safety.forward_budget.ForwardBudget` probes each new input signature on fake tensors before
the call runs. A decoder's ``generate()`` makes a new signature at every step (its cache grows by one token), so
the first generation of a process paid one probe per token, 30 to 48 times a token's time.

When a probed signature of a module has the same structure, dtypes, devices, layouts and plain values as the first
probed one of its structure and differs only in some tensor sizes, :class:`SymbolicCovers` probes the call once
more with the sizes seen varying (2 or more here) as symbols (``ShapeEnv(duck_shape=False)``: each its own symbol,
no equality assumed). The same dispatch mode as any probe measures it (:class:`~ir2torch.run_safety.op_modes.
Tally`), on values whose sizes are expressions: every decision that depends on a size, in the fake kernels, in the
generated code and input guard, and in the budget's own comparisons (an output or the live total against
``max_bytes``, the FLOPs against ``max_flops``), is recorded by the shape environment as a guard on the symbols,
decided at the sizes of the probe; the peak of the live memory is kept as an expression (a symbolic maximum, which
decides nothing), and so are the FLOPs and workspaces (an ``int()`` would fix them).

A later signature of the family is then **covered** without a probe when its sizes satisfy every guard and every
relation the probe found between symbols, and the peak at its sizes fits the budget of the moment (``"available"``
memory is read again): the probe would have taken the same decisions for it. The guards are decided on their
expressions, walked with Python integers (:mod:`~ir2torch.run_safety.size_exprs`; nothing is compiled or evaluated
as code), with the sizes no guard mentions checked as well: every size that was not made a symbol equal, every
stride equal to its expression, every symbol inside the range the probe assumed (sizes 0 and 1 are never symbols:
the probe's range starts at 2, and a family called with batch 1 and with more gets a cover for each). A probe that
read a value of data (an unbacked symbol), fixed a varying size to one value, or raised covers nothing. Anything not
covered is probed as before. A structure's first symbolic probe waits for :data:`AFTER` concrete ones (it costs about
as much); at most :data:`TRIES` are made per structure.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _disable_current_modes

from common.module_state import kept_attributes
from ir2torch.run_safety.fake_probe import fake_state, hooks_off
from ir2torch.run_safety.op_modes import Tally, quiet_fake_tensors, storages
from ir2torch.run_safety.size_exprs import evaluate

#: Symbolic probes made at most per structure (a family whose sizes keep breaking the guards is probed as before).
TRIES = 6
#: Concrete probes of a structure before its first symbolic probe. A symbolic probe costs about 25-50 concrete ones
#: (sympy reasons about every size an op computes; benchmarks/results-first-generate.md): made at once, it would make
#: a short first generate() slower. Made after as many concrete probes as it costs (a ski-rental rule), a family
#: called that often pays at most about twice what the better of the two choices would have, however long it runs.
AFTER = 32


class _Cover:
    """The outcome of one symbolic probe: the family's fixed parts, the size and stride expressions its inputs were
    made with (``ints`` where fixed), the shape environment's guards."""

    __slots__ = ("env", "fixed", "guards", "inputs", "peak")

    def __init__(self, fixed: tuple[Any, ...], inputs: list[tuple[int, tuple[Any, ...], tuple[Any, ...]]], env: Any,
                 peak: Any) -> None:
        self.fixed, self.inputs, self.env = fixed, inputs, env
        self.peak = peak.node.expr if isinstance(peak, torch.SymInt) else int(peak)
        self.guards = [g.expr for g in env.guards]

    def covers(self, signature: tuple[Any, ...], limit: int | None) -> bool:
        """Whether the probe's decisions hold for ``signature`` (module docstring)."""
        if _fixed(signature, self.inputs) != self.fixed:
            return False
        values: dict[Any, int] = {}
        pending: list[tuple[int, Any]] = []
        for leaf, sizes, strides in self.inputs:
            shape, stride = signature[1 + leaf][0], signature[1 + leaf][1]
            if stride is None or len(shape) != len(sizes) or len(stride) != len(strides):
                return False
            for got, expr in zip((*shape, *stride), (*sizes, *strides)):
                if isinstance(expr, int):
                    if got != expr:
                        return False
                elif expr.is_Symbol and expr not in values:
                    values[expr] = got
                else:
                    pending.append((got, expr))
        for sym, value in values.items():
            bound = self.env.var_to_range.get(sym)
            if bound is None or not bound.lower <= value <= bound.upper:
                return False
        if any(evaluate(expr, values) != got for got, expr in pending):
            return False
        for sym, expr in self.env.replacements.items():  # sizes the probe found equal (or related): still so
            if sym in values and evaluate(expr, values) != values[sym]:
                return False
        if not all(evaluate(guard, values) is True for guard in self.guards):
            return False
        # the same path as the probe's: its peak, an expression of the sizes, against the budget of now
        return limit is None or evaluate(self.peak, values) <= limit


def _fixed(signature: tuple[Any, ...], inputs: list[tuple[int, tuple[Any, ...], tuple[Any, ...]]]
           ) -> tuple[Any, ...]:
    """``signature`` without the sizes and strides of the inputs made symbolic (checked against their
    expressions)."""
    symbolic = {leaf for leaf, _, _ in inputs}
    return (signature[0], *((part[2:] if i in symbolic else part) for i, part in enumerate(signature[1:])))


def _varying(first: tuple[Any, ...], second: tuple[Any, ...]) -> dict[int, list[int]] | None:
    """Leaf -> the dims whose sizes differ between two signatures of one structure, when nothing else differs but
    strides (None otherwise)."""
    if first[0] != second[0] or len(first) != len(second):
        return None
    found: dict[int, list[int]] = {}
    for i, (a, b) in enumerate(zip(first[1:], second[1:])):
        if a == b:
            continue
        tensors = isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b) == 5 and \
            isinstance(a[0], torch.Size) and isinstance(b[0], torch.Size)
        if not tensors or a[2:] != b[2:] or len(a[0]) != len(b[0]):
            return None
        dims = [d for d, (x, y) in enumerate(zip(a[0], b[0])) if x != y]
        if dims:
            found[i] = dims
    return found


class SymbolicCovers:
    """A module's symbolic probes: per structure token, the first probed signature, the dims seen varying since, and
    up to :data:`TRIES` covers (module docstring)."""

    __slots__ = ("covers", "first", "probed", "seen", "tried")

    def __init__(self) -> None:
        self.first: dict[Any, tuple[Any, ...]] = {}
        self.seen: dict[Any, dict[int, set[int]]] = {}
        self.tried: dict[Any, list[frozenset[tuple[int, int]]]] = {}  # the symbols of each symbolic probe made
        self.covers: dict[Any, list[_Cover]] = {}
        self.probed: dict[Any, int] = {}  # concrete probes made per structure

    def covered(self, signature: tuple[Any, ...], limit: int | None) -> bool:
        for cover in self.covers.get(signature[0], ()):
            try:
                if cover.covers(signature, limit):
                    return True
            except Exception:  # noqa: BLE001 - a guard that cannot be decided covers nothing: probed as before
                continue
        return False

    def learn(self, obj: Any, call: Any, signature: tuple[Any, ...], args: tuple, kwargs: dict[str, Any],
              limit: int | None, where: str | None, flops: int | None) -> None:
        """After ``signature`` was probed: the sizes that differ from the structure's first probed signature (in
        sizes only) join the dims seen varying; those of them at 2 or more here become the symbols of one more probe,
        unless a try already had the same symbols (at most :data:`TRIES` tries per structure; fewer symbols keep it
        cheaper: the other sizes stay fixed). Sizes 0 and 1 are decided by the kernels, not symbols: a family called
        with 1 and with more gets a cover for each."""
        token = signature[0]
        self.probed[token] = probed = self.probed.get(token, 0) + 1
        first = self.first.setdefault(token, signature)
        varying = None if first is signature else _varying(first, signature)
        if not varying:
            return
        seen = self.seen.setdefault(token, {})
        for leaf, dims in varying.items():
            seen.setdefault(leaf, set()).update(dims)
        chosen = {leaf: sorted(d for d in dims if signature[1 + leaf][0][d] >= 2) for leaf, dims in seen.items()}
        chosen = {leaf: dims for leaf, dims in chosen.items() if dims}
        key = frozenset((i, d) for i, dims in chosen.items() for d in dims)
        tried = self.tried.setdefault(token, [])
        if not key or probed < AFTER or len(tried) >= TRIES or key in tried:
            return
        tried.append(key)  # a failed try counts too
        cover = _probe(obj, call, signature, args, kwargs, chosen, limit, where, flops)
        if cover is not None and self._decides(cover, signature, limit):
            self.covers.setdefault(token, []).append(cover)

    @staticmethod
    def _decides(cover: _Cover, signature: tuple[Any, ...], limit: int | None) -> bool:
        """Whether ``cover`` covers the signature it was made from (every guard decided by its sizes)."""
        try:
            return cover.covers(signature, limit)
        except Exception:  # noqa: BLE001 - a guard on a symbol the call's sizes do not give
            return False


def _probe(obj: Any, call: Any, signature: tuple[Any, ...], args: tuple, kwargs: dict[str, Any],
           varying: dict[int, list[int]], limit: int | None, where: str | None, flops: int | None) -> _Cover | None:
    """The call on fake tensors whose ``varying`` sizes are symbols, measured as any probe; None when it does not
    give a cover (module docstring)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv, StatelessSymbolicContext

    env = ShapeEnv(duck_shape=False)
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if len(leaves) != len(signature) - 1:
        return None
    try:
        with kept_attributes(obj), _disable_current_modes(), quiet_fake_tensors(), hooks_off(obj), \
                FakeTensorMode(allow_fallback_kernels=False, shape_env=env) as mode, \
                fake_state(obj, mode) as external:
            fakes: list[Any] = []
            for i, leaf in enumerate(leaves):
                if isinstance(leaf, torch.Tensor):
                    dims = set(varying.get(i, ()))
                    context = StatelessSymbolicContext(
                        dynamic_sizes=[DimDynamic.DYNAMIC if d in dims else DimDynamic.STATIC
                                       for d in range(leaf.dim())],
                        constraint_sizes=[None] * leaf.dim())
                    fakes.append(mode.from_tensor(leaf, symbolic_context=context))
                else:
                    fakes.append(leaf)
            made = [(i, _exprs(fake.shape), _exprs(fake.stride())) for i, fake in enumerate(fakes) if i in varying]
            fake_args, fake_kwargs = pytree.tree_unflatten(fakes, spec)
            inputs = storages((fake_args, fake_kwargs))
            external.update(inputs)
            with Tally(limit, where, external, flops, inputs) as tally:
                call(obj, *fake_args, **fake_kwargs)
    except Exception:  # noqa: BLE001 - no cover: the family is probed one signature at a time, as before
        return None
    if env.deferred_runtime_asserts and any(env.deferred_runtime_asserts.values()):
        return None  # a size read from data
    for i, sizes, _ in made:  # as made, before the call's guards replaced one by another
        for d in varying[i]:
            if isinstance(sizes[d], int) or getattr(env.replacements.get(sizes[d]), "is_number", False):
                return None  # fixed to one value: nothing to cover
    if any(getattr(sym, "name", "").startswith("u") for sym in env.var_to_range):
        return None  # an unbacked symbol: a size read from data
    return _Cover(_fixed(signature, made), made, env, tally.peak)


def _exprs(values: Any) -> tuple[Any, ...]:
    """Each size or stride as its symbolic expression, or its int."""
    return tuple(v.node.expr if isinstance(v, torch.SymInt) else int(v) for v in values)


__all__ = ["TRIES", "SymbolicCovers"]
