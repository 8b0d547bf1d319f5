"""Check that a rebuilt model computes what the original computes, and find where it stops doing so.

:func:`verify` runs both models on the same inputs, compares their outputs leaf by leaf (over torch
pytrees, so tuples, dicts, named tuples, transformers ``ModelOutput`` s and any type registered with
``torch.utils._pytree`` all work, with or without a ``flatten_with_keys_fn``) and, through forward hooks on every
module, names the first module call of the original whose output the rebuilt model does not reproduce::

    report = verify(model, rebuilt, (ids,), {"attention_mask": mask})
    assert report.ok, str(report)

Module calls are keyed by their ``named_modules(remove_duplicate=False)`` path; the second call of a
module is ``path@1``, the third ``path@2``, and so on. A module registered under several names records
each of its calls under every one of them. Calls found in only one model, and calls whose outputs are
structured differently (rebuilt submodules may return only the outputs their caller uses), are counted
in the report but not compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.pytree_compare import (
    _shapes,
    _snapshot,
    compare_leaf,
    compare_leaves,
    flatten,
    kind,
    short,
    structure_difference,
)

from .errors import IRError


class VerificationError(IRError):
    """One of the two models given to :func:`verify` raised during its forward pass."""


@dataclass
class OutputRecord:
    """The comparison of one output leaf: its pytree ``path`` (e.g. ``"[0]"``, ``"['logits']"``, ``".sample"``).

    Types registered with torch's pytree without a ``flatten_with_keys_fn`` name a child by the item or
    dataclass field it is, else by its index (``"[0]"``).
    """

    path: str
    shape: tuple[int, ...] | None  # None for a non-tensor leaf
    dtype: str  # the tensor dtype or the Python type name of a non-tensor leaf; "original -> rebuilt" if they differ
    max_abs_diff: float | None  # None for a non-tensor leaf (compared with ==)
    ok: bool


@dataclass
class Divergence:
    """A module call whose output differs between the two models: ``path`` and ``call`` (0 = first call)."""

    path: str
    call: int
    max_abs_diff: float  # inf when shapes or non-tensor leaves differ
    original_shapes: list[tuple[int, ...]]
    rebuilt_shapes: list[tuple[int, ...]]

    @property
    def key(self) -> str:
        """The call key: ``path`` for the first call, ``path@1`` for the second, ..."""
        return _call_key(self.path, self.call)


@dataclass
class VerifyReport:
    """Result of :func:`verify`; ``str(report)`` renders it as a table.

    ``ok`` and ``max_abs_diff`` are about the final outputs only; a module call that diverges while the
    outputs still agree (e.g. a shift a later LayerNorm removes) shows up in ``first_divergence`` alone.
    """

    ok: bool
    max_abs_diff: float
    outputs: list[OutputRecord] = field(default_factory=list)
    structure_mismatch: str | None = None
    first_divergence: Divergence | None = None
    calls_compared: int = 0  # module calls recorded under the same key, with outputs of the same structure
    unmatched_calls: int = 0  # module calls recorded in only one of the models ...
    unmatched_keys: list[str] = field(default_factory=list)  # ... and their keys
    skipped_keys: list[str] = field(default_factory=list)  # calls in both, but with differently structured outputs
    diverged_keys: list[str] = field(default_factory=list)  # every compared call that differs, in execution order
    #: module path ("root" for the model) -> largest max abs diff over its compared calls (inf: shapes differ);
    #: ``ir2torch verify --report`` writes it, ``ir2torch view --overlay`` draws it
    module_diffs: dict[str, float] = field(default_factory=dict)
    tolerance: str = ""  # the tolerance used, in words

    def __str__(self) -> str:
        lines = [
            f"verify: {'OK' if self.ok else 'FAILED'} (max abs diff {self.max_abs_diff:.1e}, "
            f"{self.calls_compared} module calls compared, {self.unmatched_calls} unmatched, "
            f"{len(self.skipped_keys)} skipped)"
        ]
        if self.tolerance:
            lines.append(f"tolerance: {self.tolerance}")
        if self.unmatched_calls:
            lines.append(f"unmatched: {self.unmatched_calls} module calls ran in one model only, so they were not "
                         f"compared ({', '.join(self.unmatched_keys[:5])}{', ...' if self.unmatched_calls > 5 else ''})"
                         ": modules a rewrite removed or merged, or a rebuild's leaves that call no submodule")
        if self.structure_mismatch:
            lines.append(f"structure mismatch: {self.structure_mismatch}")
        rows = [("output", "shape", "dtype", "max abs diff", "status")]
        for rec in self.outputs:
            shape = "-" if rec.shape is None else str(tuple(rec.shape))
            diff = "-" if rec.max_abs_diff is None else f"{rec.max_abs_diff:.1e}"
            rows.append((rec.path or "<output>", shape, rec.dtype, diff, "OK" if rec.ok else "DIFF"))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines += ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[4] for row in rows]
        div = self.first_divergence
        if div is None:
            lines.append("no divergence")
        else:
            lines.append(
                f"first divergence: {div.path or '<root>'} (call {div.call}): max abs diff {div.max_abs_diff:.1e}"
            )
        return "\n".join(lines)


def verify(
    original: nn.Module,
    rebuilt: nn.Module,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any] | None = None,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-5,
    seed: int | None = 0,
    rewritten: Any = None,
    scale: bool = False,
) -> VerifyReport:
    """Run ``original`` and ``rebuilt`` on ``args``/``kwargs`` under ``torch.no_grad()`` and compare them.

    Outputs may be any pytree: nested tuples, lists, dicts, named tuples, dataclass-style model outputs and
    types registered with ``torch.utils._pytree.register_pytree_node`` (with or without keys). Outputs of a
    different structure fail with ``structure_mismatch`` naming the first place they differ. Tensors are equal
    when ``torch.allclose(a, b, atol=atol, rtol=rtol, equal_nan=True)`` holds and their dtypes agree; other
    leaves (``None``, ints, strings, ...) when they have the same type and ``a == b`` (two float NaNs are
    equal). Each model gets its own clone of the input tensors, and the
    models are run as they are: in train mode, dropout draws random numbers, so both runs start from the
    same random state (``seed``), and batch norm updates its running statistics in both models. The global
    random state is restored afterwards. Every hook installed is removed again, even when a model raises.

    Args:
        original: the reference model.
        rebuilt: the model that should compute the same thing (e.g. from ``ir2torch.convert``).
        args: positional inputs of both forward passes.
        kwargs: keyword inputs of both forward passes.
        atol: absolute tolerance; with ``scale``, relative to each compared tensor's largest finite magnitude
            (at least 1): ``atol * max(1, max|original|)``.
        rtol: relative tolerance.
        seed: ``torch.manual_seed`` applied before each forward pass (``None``: leave the random state alone,
            so train-mode models with dropout differ).
        rewritten: the IR ``rebuilt`` was made from, when it is a rewrite of ``original``
            (:mod:`common.rewrite`): a module that replaces original modules (a convolution with its batch norm
            folded in) is compared with the *last* original module it replaces (the batch norm), by the
            provenance records of the IR; where their outputs differ in shape (a fused QKV projection) the call
            is skipped.
        scale: scale ``atol`` by each tensor's largest magnitude: a model with random weights reaches outputs of
            1e7 and more, where an element near zero differs by rounding of the large ones (a folded batch norm
            is then correct and fails a fixed ``atol``). The report says which tolerance it used.

    Returns:
        A :class:`VerifyReport` on the final outputs and on the first diverging module call.

    Raises:
        VerificationError: if either model raises during its forward pass (chained to that exception).
    """
    kwargs = dict(kwargs or {})
    out_o, calls_o = _run("original", original, args, kwargs, seed)
    out_r, calls_r = _run("rebuilt", rebuilt, args, kwargs, seed)
    mapped: set[str] = set()
    if rewritten is not None:
        from .provenance import compared_paths

        paths = compared_paths(rewritten)
        mapped = {paths[p] for p, _, _ in calls_r if p in paths and paths[p] != p}
        calls_r = [(paths.get(p, p), n, output) for p, n, output in calls_r]

    report = VerifyReport(ok=True, max_abs_diff=0.0, tolerance=(
        f"atol {atol:g} scaled by the largest magnitude of each tensor (at least 1), rtol {rtol:g}" if scale
        else f"atol {atol:g}, rtol {rtol:g}"))
    paths_o, leaves_o = flatten(out_o)
    paths_r, leaves_r = flatten(out_r)
    difference = structure_difference(out_o, out_r)
    if difference is not None:
        report.ok = False
        report.structure_mismatch = (
            f"{difference}; leaves of the original {short(paths_o)}, of the rebuilt model {short(paths_r)}"
        )
    if len(leaves_o) == len(leaves_r):
        for path, a, b in zip(paths_o, leaves_o, leaves_r):
            ok, diff = compare_leaf(a, b, atol, rtol, scale)
            tensor = isinstance(a, torch.Tensor)
            shape = tuple(a.shape) if tensor else None
            dtype = kind(a) if kind(a) == kind(b) else f"{kind(a)} -> {kind(b)}"
            report.outputs.append(OutputRecord(path, shape, dtype, diff if tensor else None, ok))
            report.ok = report.ok and ok
            if tensor:
                report.max_abs_diff = max(report.max_abs_diff, diff)

    rebuilt_by_key = {(path, n): output for path, n, output in calls_r}
    original_keys = {(path, n) for path, n, _ in calls_o}
    unmatched = [(p, n) for p, n, _ in calls_o if (p, n) not in rebuilt_by_key]
    unmatched += [(p, n) for p, n, _ in calls_r if (p, n) not in original_keys]
    report.unmatched_keys = [_call_key(p, n) for p, n in unmatched]
    report.unmatched_calls = len(unmatched)
    for path, n, output in calls_o:  # execution (post-)order of the original: deepest, earliest call first
        if (path, n) not in rebuilt_by_key:
            continue
        other = rebuilt_by_key[path, n]
        if structure_difference(output, other) is not None or (path in mapped and _shapes(output) != _shapes(other)):
            report.skipped_keys.append(_call_key(path, n))  # e.g. a rebuilt module returning only the outputs used
            continue
        report.calls_compared += 1
        ok, diff = compare_leaves(pytree.tree_leaves(output), pytree.tree_leaves(other), atol, rtol, scale)
        key = path or "root"
        report.module_diffs[key] = max(report.module_diffs.get(key, 0.0), diff)
        if not ok:
            report.diverged_keys.append(_call_key(path, n))
            if report.first_divergence is None:
                report.first_divergence = Divergence(path, n, diff, _shapes(output), _shapes(other))
    return report


def _run(
    which: str, model: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], seed: int | None
) -> tuple[Any, list[tuple[str, int, Any]]]:
    """Run ``model`` with a hook on every module path; return its output and ``(path, call, output)`` in order."""
    calls: list[tuple[str, int, Any]] = []
    counts: dict[str, int] = {}

    def make_hook(path: str):
        def hook(module: nn.Module, inputs: Any, output: Any) -> None:
            n = counts.get(path, 0)
            counts[path] = n + 1
            calls.append((path, n, _snapshot(output)))

        return hook

    handles = [mod.register_forward_hook(make_hook(p)) for p, mod in model.named_modules(remove_duplicate=False)]
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            inputs_args, inputs_kwargs = _snapshot((tuple(args), kwargs))
            output = model(*inputs_args, **inputs_kwargs)
    except Exception as exc:
        raise VerificationError(
            f"the {which} model raised {type(exc).__name__} during its forward pass: {exc}",
            hint="run that model alone on the same inputs to debug it",
        ) from exc
    finally:
        for handle in handles:
            handle.remove()
    return output, calls


def _call_key(path: str, call: int) -> str:
    return path if call == 0 else f"{path}@{call}"


__all__ = ["Divergence", "OutputRecord", "VerificationError", "VerifyReport", "verify"]
