"""Operators of other libraries' namespaces that every allow-list accepts by default.

A custom operator is opt-in (``allow=["ns::op"]``): its kernel is another library's code, which this project has
not read. The operators here have been read and argued safe, and real models call them on their default path, so
a file may name them without ``allow=``:

``transformers.grouped_mm_fallback.default``
    transformers' grouped matrix product (``transformers/integrations/moe.py``), which the default experts of its
    mixture-of-experts models (Mixtral, Qwen2/3-MoE, OLMoE, DeepSeek, GPT-OSS, ...) call on the CPU. It computes
    ``out[offs[i-1]:offs[i]] = input[offs[i-1]:offs[i]] @ weight[i]`` for each expert ``i``, as a Python loop
    over ``offs.tolist()``. Its argument checks are in the fake kernel only, so ir2torch tests the same ones before
    the real kernel runs (:data:`ir2torch.run_safety.op_preconditions.PRECONDITIONS`). Whatever the values of
    ``offs``, the kernel reads and writes nothing outside its tensors: rows are taken with Python slices, which clamp
    to the tensor, and ``weight[i]`` is a bounds-checked index below ``len(offs)``, which must equal ``weight.size(0)``.
    Its work is at most ``len(offs)`` products of ``input``'s rows with one expert, bounded by the shapes.

``torch2ir_ste.<op>.default``
    this library's straight-through estimators (:mod:`common.ste_ops`, registered by importing it): ``round``,
    ``ceil``, ``floor``, signs, clamps, each with the gradient of brevitas' estimator of the same name. Their
    kernels call ATen operators of the default surface on the tensors they are given.

Nothing is imported to check a name. When a rebuild resolves a known operator that is not registered in this
process yet, the one module that registers it (:attr:`KnownOp.module`, a name written here, never one read from a
file) is imported, and only then; a missing library is an :class:`~common.errors.IRFormatError` naming it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from .errors import IRFormatError

#: The operators of :mod:`common.ste_ops` (``torch2ir_ste.<name>.default``), named here so that checking a name
#: imports nothing (that module checks it registers exactly these).
STE_OPERATORS: tuple[str, ...] = ("round", "ceil", "floor", "ternary_sign", "binary_sign", "round_to_zero",
                                  "dpu_round", "abs_binary_sign_grad", "scalar_clamp", "scalar_clamp_min",
                                  "tensor_clamp")


@dataclass(frozen=True)
class KnownOp:
    """An operator of another library that a file may name without ``allow=``.

    Attributes:
        module: the module whose import registers the operator (imported only to resolve it).
        package: what to ``pip install`` when that module cannot be imported.
        why: why its kernel touches only its tensors (shown by ``op_class``).
    """

    module: str
    package: str
    why: str


#: ``ns.op.overload`` (as a file names it) -> how it is registered and why it is allowed.
KNOWN_OPS: dict[str, KnownOp] = {
    "transformers.grouped_mm_fallback.default": KnownOp(
        module="transformers.integrations.moe",
        package="transformers",
        why="transformers' grouped matrix product of its default mixture-of-experts layers: rows are sliced with "
            "Python slices and experts indexed below weight.size(0); argument shapes checked before it runs",
    ),
    **{f"torch2ir_ste.{name}.default": KnownOp(
        module="common.ste_ops",
        package="torch2ir",
        why="this library's straight-through estimator (common.ste_ops): its forward is a composition of ATen "
            "operators of the default surface on its own tensors, its backward passes the gradient through",
    ) for name in STE_OPERATORS},
}


def is_known(name: object) -> bool:
    """Whether ``name`` is a known operator (a name check: nothing is imported)."""
    return isinstance(name, str) and name in KNOWN_OPS


def resolve_known(name: str, registered: Any) -> Any:
    """The ``OpOverload`` of known operator ``name``, importing :attr:`KnownOp.module` first when it is not
    registered yet. ``registered(ns, op, overload)`` looks an operator up without importing anything.

    Raises:
        IRFormatError: the library that defines it cannot be imported, or does not define it.
    """
    known = KNOWN_OPS[name]
    ns, op, overload = name.split(".")
    found = registered(ns, op, overload)
    if found is not None:
        return found
    try:
        importlib.import_module(known.module)
    except ImportError as exc:
        raise IRFormatError(f"operator {name!r} is defined by {known.package}, which cannot be imported ({exc})",
                            key=name, hint=f"pip install {known.package}") from exc
    found = registered(ns, op, overload)
    if found is None:
        raise IRFormatError(f"operator {name!r}: importing {known.module} did not register it (another version "
                            f"of {known.package}?)", key=name,
                            hint=f"install a {known.package} release that defines {ns}::{op}")
    return found


__all__ = ["KNOWN_OPS", "STE_OPERATORS", "KnownOp", "is_known", "resolve_known"]
