"""The operators a document needs, checked against an allow-list, and the error that lists what is refused.

Part of the allow-list family (:mod:`common.safety`): a file records the function names its graphs call
(``ops``); :func:`check_required_ops` refuses it, before anything is built, when the loader's allow-list does not
allow all of them, and :func:`required_ops_error` words that refusal: refused ATen operators with their reason,
those outside the default surface with the ``allow=`` that opts in, registered operators of other libraries, and
names that are no operator at all (never imported or called).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import IRFormatError, OperatorSurfaceError, UnsafeTargetError
from .safety import CUSTOM, DEFAULT_ALLOWLIST, Allowlist, registered_op
from .surface import opt_in
from .values import Subgraph, iter_values

__all__ = ["check_required_ops", "function_names", "required_ops_error"]


def required_ops_error(missing: list[str], what: str) -> UnsafeTargetError:
    """The error for names that are not allowed: the registered operators among them with the opt-in to pass,
    and the rest (``os.system``: not an operator at all) as names that are never imported or called."""
    refused = {n: r for n in missing if (r := DEFAULT_ALLOWLIST.refusal(n)) is not None}
    outside = [n for n in missing if DEFAULT_ALLOWLIST.outside_surface(n)]
    ops = [n for n in missing if (m := CUSTOM.match(n)) and not n.startswith("aten.") and registered_op(*m.groups())]
    others = [n for n in missing if n not in ops and n not in refused and n not in outside]
    parts = [f"refused ATen operators: {', '.join(f'{n} (refused: {r})' for n, r in refused.items())}"] if refused \
        else []
    if outside and not (refused or ops or others):
        return OperatorSurfaceError(
            f"{what} ATen operators outside the default operator surface (the overloads real models' conversions "
            f"emit, common/default_ops.txt): {', '.join(outside)}", key="ops",
            hint=f"if you trust this file, opt in: allow={[opt_in(n) for n in outside]} (command line: "
                 + " ".join(f"--allow-op {opt_in(n)}" for n in outside) + ")")
    if outside:
        parts.append(f"ATen operators outside the default surface (allow={[opt_in(n) for n in outside]} opts "
                     f"in): {', '.join(outside)}")
    if ops:
        parts.append(f"operators that are not on the allow-list: {', '.join(ops)}")
    if others:
        parts.append(f"names that are not on the allow-list and are no operator registered in this process (they "
                     f"will not be imported or called): {', '.join(others)}")
    patterns = sorted({"::".join(n.split(".")[:2]) for n in ops})
    if not ops and not others:
        return UnsafeTargetError(f"{what} {'; and '.join(parts)}", key="ops",
                                 hint="these ATen operators are never resolved or called (see Operator classes "
                                      "in docs/ir-spec.md)")
    hint = ("if you trust the operators, pass allow=" + str(patterns) + " (command line: "
            + " ".join(f"--allow-op {p}" for p in patterns) + ")") if ops else \
        "an IR may call ATen operators, the listed torch/operator functions and opted-in registered operators only"
    if others and ops:
        hint += "; the other names cannot be allowed this way"
    return UnsafeTargetError(f"{what} {'; and '.join(parts)}", key="ops", hint=hint)


def function_names(ir: Any) -> set[str]:
    """Every function name ``ir`` calls, in every graph, variant and higher-order-op body."""
    names: set[str] = set()

    def visit(impl: Any) -> None:
        for _, attrs in impl.graph.nodes(data=True):
            if attrs.get("type") == "function" and isinstance(attrs.get("implementation"), str):
                names.add(attrs["implementation"])
            for _, value in iter_values([attrs.get("args", []), attrs.get("kwargs", {})]):
                if isinstance(value, Subgraph):
                    visit(value.impl)

    seen: set[int] = set()
    for impl in ir.values():
        source = impl.shared_body or impl  # an unexpanded instance calls what its body calls: read it once
        if id(source) in seen:
            continue
        seen.add(id(source))
        for graph in source.graphs():
            visit(graph)
    return names


def check_required_ops(doc: Mapping[str, Any], allowlist: Allowlist | None, source: str) -> None:
    """Refuse a document whose recorded ``ops`` the loader does not allow, listing all of them.

    Raises:
        IRFormatError: ``ops`` is not a list of names.
        UnsafeTargetError: operators outside ``allowlist``, with the ``allow=`` to pass.
    """
    ops = doc.get("ops", [])
    if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops) or len(ops) > 10_000:
        raise IRFormatError(f"{source}: 'ops' must be a list of operator names", key="ops")
    missing = (allowlist or DEFAULT_ALLOWLIST).required(ops)
    if missing:
        raise required_ops_error(missing, f"{source} calls")
