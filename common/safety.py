"""The allow-list through which every function named in an IR is resolved.

An IR is data: loading or rebuilding one must never import a module or call a callable
that the IR merely *names*. A function node's target is checked against this allow-list
**by name, before anything is resolved**; resolution then walks attributes of modules
that are already imported (``torch.ops.aten``, ``torch``, ``torch.nn.functional``,
``operator``, ``math``) and never calls ``importlib``.

Allowed:

- ATen operators, ``aten.<op>`` or ``aten.<op>.<overload>`` (e.g. ``aten.add.Tensor``),
  that exist in the dispatcher;
- the higher-order operators listed in :data:`HIGHER_ORDER_OPS`;
- the ``operator``, ``math``, ``torch`` and ``torch.nn.functional`` functions listed in
  :data:`PYTHON_FUNCTIONS`;
- whatever a converter explicitly adds with :meth:`Allowlist.allow`.

Everything else (``os.system``, ``builtins.eval``, ``subprocess.run``, ``pkg.mod.fn``)
raises :class:`~common.errors.UnsafeTargetError`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from .errors import IRFormatError, UnsafeTargetError
from .values import Subgraph, iter_values

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_ATEN = re.compile(rf"^aten\.({_IDENT})(?:\.({_IDENT}))?$")

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
    "sym_min", "sym_not", "sym_sum",
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

#: Qualified names of the Python-level functions an IR may name.
PYTHON_FUNCTIONS: frozenset[str] = frozenset(
    [f"operator.{n}" for n in _OPERATOR]
    + [f"math.{n}" for n in _MATH]
    + [f"torch.{n}" for n in _TORCH]
    + [f"torch.nn.functional.{n}" for n in _FUNCTIONAL]
)

#: Higher-order operators an IR may name (their subgraphs are IR graphs themselves).
HIGHER_ORDER_OPS: frozenset[str] = frozenset(
    ["higher_order.wrap_with_set_grad_enabled", "higher_order.wrap_with_autocast", "higher_order.cond"]
)

_ROOTS: dict[str, Any] = {"operator": operator, "math": math, "torch.nn.functional": F, "torch": torch}


def _resolve_python(name: str) -> Callable:
    for prefix in sorted(_ROOTS, key=len, reverse=True):
        if name.startswith(prefix + "."):
            return getattr(_ROOTS[prefix], name[len(prefix) + 1 :])
    raise AssertionError(name)  # unreachable: names come from PYTHON_FUNCTIONS


#: An opt-in pattern: ``"ns::op"``, ``"ns::op.overload"`` or ``"ns::*"``.
_PATTERN = re.compile(rf"^({_IDENT})::(\*|{_IDENT})(?:\.({_IDENT}))?$")
#: How an IR names an operator of another namespace: ``"ns.op.overload"`` (as ``str(OpOverload)``).
_CUSTOM = re.compile(rf"^({_IDENT})\.({_IDENT})(?:\.({_IDENT}))?$")


class Allowlist:
    """Which function names an IR may use, and how each resolves to a callable.

    A fresh instance allows the defaults. :meth:`allow` opts in to more, for one converter or
    loader only (copies are independent): operators of other namespaces by name or pattern
    (``"transformers::grouped_mm_fallback"``, ``"quantized_decomposed::*"``), resolved only among
    the operators already registered in this process (``torch.ops.<ns>.<op>``), never by importing
    anything; or a name bound to an explicit callable.
    """

    def __init__(self) -> None:
        self._extra: dict[str, Callable] = {}
        self._patterns: set[tuple[str, str, str | None]] = set()

    def allow(self, name: str, fn: Callable | None = None) -> Allowlist:
        """Allow ``name`` in IRs handled by this allow-list; returns ``self``.

        Args:
            name: an operator pattern (``"ns::op"``, ``"ns::op.overload"``, ``"ns::*"``), or, with ``fn``,
                any name an IR may use for ``fn``.
            fn: the callable ``name`` resolves to (omit for an operator pattern).

        Raises:
            UnsafeTargetError: ``name`` is not an operator pattern (and no ``fn`` is given).
            TypeError: ``fn`` is not callable.
        """
        if fn is not None:
            if not callable(fn):
                raise TypeError(f"allow({name!r}, fn): fn must be callable")
            self._extra[name] = fn
            return self
        match = _PATTERN.match(name) if isinstance(name, str) else None
        if match is None:
            raise UnsafeTargetError(f"{name!r} is not an operator pattern", key="allow",
                                    hint="write 'namespace::op', 'namespace::op.overload' or 'namespace::*'")
        self._patterns.add((match.group(1), match.group(2), match.group(3)))
        return self

    def extended(self, allow: Iterable[str] | None) -> Allowlist:
        """A copy that also allows the operator patterns of ``allow`` (``self`` when there are none)."""
        names = [allow] if isinstance(allow, str) else list(allow or [])
        if not names:
            return self
        new = self.copy()
        for name in names:
            new.allow(name)
        return new

    def copy(self) -> Allowlist:
        new = Allowlist()
        new._extra = dict(self._extra)
        new._patterns = set(self._patterns)
        return new

    def is_allowed(self, name: object) -> bool:
        """True when ``name`` may be resolved; never imports anything."""
        if not isinstance(name, str):
            return False
        if name in self._extra or name in PYTHON_FUNCTIONS or name in HIGHER_ORDER_OPS:
            return True
        match = _ATEN.match(name)
        if match:
            return _aten_overload(match.group(1), match.group(2)) is not None
        return self._custom(name) is not None

    def _custom(self, name: str) -> Any:
        """The registered ``OpOverload``/``OpOverloadPacket`` an opted-in ``ns.op[.overload]`` names, else None."""
        match = _CUSTOM.match(name)
        if match is None:
            return None
        ns, op, overload = match.groups()
        if not any(p_ns == ns and p_op in ("*", op) and p_over in (None, overload) for p_ns, p_op, p_over
                   in self._patterns):
            return None
        return registered_op(ns, op, overload)

    def check(self, name: object, *, implementation: str | None = None, node: str | None = None) -> None:
        """Raise :class:`UnsafeTargetError` unless ``name`` is allowed."""
        if self.is_allowed(name):
            return
        if isinstance(name, str) and _ATEN.match(name):
            message = f"{name!r} is not an ATen operator known to this torch ({torch.__version__})"
            hint = "check the op name and overload (torch.ops.aten.<op>.<overload>)"
        elif isinstance(name, str) and _CUSTOM.match(name):
            ns, op = name.split(".")[:2]
            message = f"operator {name!r} is not on the allow-list and will not be resolved or called"
            hint = (f"if you trust it, opt in: allow=['{ns}::{op}'] (or '{ns}::*') on convert/load, "
                    f"--allow-op {ns}::{op} on the command line; the operator must be registered in this process "
                    "(import the library that defines it first): nothing is imported for you")
        else:
            message = f"function {name!r} is not on the allow-list and will not be imported or called"
            hint = (
                "use an ATen op ('aten.<op>.<overload>') or an allowed torch/operator function; "
                "to trust another callable, add it with Allowlist.allow(name, fn) on your converter"
            )
        raise UnsafeTargetError(message, implementation=implementation, node=node, hint=hint)

    def resolve(self, name: str, *, implementation: str | None = None, node: str | None = None) -> Callable:
        """The callable ``name`` stands for, after :meth:`check`."""
        self.check(name, implementation=implementation, node=node)
        if name in self._extra:
            return self._extra[name]
        if name in PYTHON_FUNCTIONS:
            return _resolve_python(name)
        if name in HIGHER_ORDER_OPS:
            return getattr(torch.ops.higher_order, name.split(".", 1)[1])
        match = _ATEN.match(name)
        if match is None:
            return self._custom(name)
        return _aten_overload(match.group(1), match.group(2))  # type: ignore[return-value]

    def required(self, names: Iterable[str]) -> list[str]:
        """The names of ``names`` this allow-list does not allow (sorted, without duplicates)."""
        return sorted({n for n in names if not self.is_allowed(n)})


def _aten_overload(op: str, overload: str | None) -> Any:
    """``torch.ops.aten.<op>.<overload>`` (or the packet), or None when it is not an operator (see
    :func:`registered_op`: ``aten.__init__`` or ``aten.name`` resolve to nothing and nothing is called on them).

    Operators found are remembered (ATen's are torch's own and stay registered; a large IR asks for the same few
    dozen thousands of times); a name not found is asked again each time, as it may be registered later."""
    found = _ATEN_FOUND.get((op, overload))
    if found is None:
        found = registered_op("aten", op, overload)
        if found is not None:
            _ATEN_FOUND[(op, overload)] = found
    return found


_ATEN_FOUND: dict[tuple[str, str | None], Any] = {}


def required_ops_error(missing: list[str], what: str) -> UnsafeTargetError:
    """The error for names that are not allowed: the registered operators among them with the opt-in to pass,
    and the rest (``os.system``: not an operator at all) as names that are never imported or called."""
    ops = [n for n in missing if (m := _CUSTOM.match(n)) and not n.startswith("aten.") and registered_op(*m.groups())]
    others = [n for n in missing if n not in ops]
    parts = []
    if ops:
        parts.append(f"operators that are not on the allow-list: {', '.join(ops)}")
    if others:
        parts.append(f"names that are not on the allow-list and are no operator registered in this process (they "
                     f"will not be imported or called): {', '.join(others)}")
    patterns = sorted({"::".join(n.split(".")[:2]) for n in ops})
    hint = ("if you trust the operators, pass allow=" + str(patterns) + " (command line: "
            + " ".join(f"--allow-op {p}" for p in patterns) + ")") if ops else \
        "an IR may call ATen operators, the listed torch/operator functions and opted-in registered operators only"
    if others and ops:
        hint += "; the other names cannot be allowed this way"
    return UnsafeTargetError(f"{what} {'; and '.join(parts)}", key="ops", hint=hint)


def registered_op(ns: str, op: str, overload: str | None) -> Any:
    """``torch.ops.<ns>.<op>[.<overload>]`` if the dispatcher has that operator, else None.

    The dispatcher's schema table is asked first (a pure lookup); only then are the namespace and
    operator read from ``torch.ops``, and only an ``_OpNamespace`` / ``OpOverloadPacket`` / ``OpOverload``
    is accepted (``torch.ops.import_module`` or ``torch.ops.load_library`` are functions, never reached).
    """
    try:
        if ns.startswith("_") or not torch._C._jit_get_schemas_for_operator(f"{ns}::{op}"):
            return None
        namespace = getattr(torch.ops, ns)
        if not isinstance(namespace, torch._ops._OpNamespace):
            return None
        packet = getattr(namespace, op)
    except Exception:  # noqa: BLE001 - unknown names raise AttributeError or RuntimeError
        return None
    if not isinstance(packet, torch._ops.OpOverloadPacket):
        return None
    if overload is None:
        return packet
    if overload not in packet.overloads():
        return None
    found = getattr(packet, overload, None)
    return found if isinstance(found, torch._ops.OpOverload) else None


def function_name(fn: Any) -> str:
    """Qualified name of a callable as an IR names it (``aten.add.Tensor``, ``operator.getitem``).

    Raises:
        UnsafeTargetError: ``fn`` has no name on the allow-list.
    """
    if isinstance(fn, torch._ops.OpOverload):
        return f"aten.{fn._schema.name.split('::', 1)[1]}.{fn._overloadname}" if fn.namespace == "aten" else str(fn)
    if isinstance(fn, torch._ops.HigherOrderOperator):
        return f"higher_order.{fn.name()}"
    for prefix, mod in _ROOTS.items():
        name = getattr(fn, "__name__", None)
        if name is not None and getattr(mod, name, None) is fn and f"{prefix}.{name}" in PYTHON_FUNCTIONS:
            return f"{prefix}.{name}"
    raise UnsafeTargetError(
        f"callable {fn!r} has no name on the allow-list",
        hint="use an ATen op or an allowed torch/operator function",
    )


#: The default allow-list (no extra names).
DEFAULT_ALLOWLIST = Allowlist()


def check_target(name: object, **where: str | None) -> None:
    """Check ``name`` against the default allow-list (see :meth:`Allowlist.check`)."""
    DEFAULT_ALLOWLIST.check(name, **where)


def resolve_target(name: str, **where: str | None) -> Callable:
    """Resolve ``name`` through the default allow-list (see :meth:`Allowlist.resolve`)."""
    return DEFAULT_ALLOWLIST.resolve(name, **where)


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

    for impl in ir.values():
        for graph in impl.graphs():
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
