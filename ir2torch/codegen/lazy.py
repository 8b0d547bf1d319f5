"""Generate and compile a very large graph's ``forward`` at its first use, not while rebuilding.

Writing the source of a graph and compiling it costs about 100 us per node: a root calling 10**5 modules spent
about 10 s there, more than the rest of its rebuild, for a model that may only be inspected, moved or given its
weights. A graph of at least :data:`LAZY_NODES` nodes whose code no earlier graph of the conversion shares
(:class:`ir2torch.codegen.shared.CodeCache`) is therefore installed with its graph and calling convention only
(:func:`defer`); its source is written and compiled, through the same code generator and checks as any graph
(the strings that reach the source were checked by :func:`ir2torch.codegen.source.check_graph` before this), the first
time the module runs or its ``code`` is read (:func:`materialize`). torch.fx does the same for its own graphs
(``torch.fx._lazy_graph_module``).

Until then the class's ``forward`` is a small function with the generated ``forward``'s signature (made by
generating the code of the graph's inputs and output alone), so ``inspect.signature``, ``torch.export`` and
``torch2ir`` see the real parameters. A failure to write or compile the code is an
:class:`~common.errors.IRFormatError` naming the implementation, raised by the call that needed the code. Tracing
through the first call (``torch.fx.symbolic_trace``, non-strict ``torch.export``) works as a plain call does;
``torch.compile(..., fullgraph=True)`` and strict export cannot trace the compilation itself: run the model once,
or read its ``code``, before those.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from torch import fx
from torch.fx.experimental import _config as fx_experimental_config
from torch.fx.graph import _PyTreeCodeGen
from torch.fx.graph_module import _forward_from_src, _WrappedCall

from common.errors import IRError, IRFormatError
from ir2torch.codegen.fold_cache import FOLD_ATTR

#: Graphs of at least this many nodes get their code at first use (see the module docstring).
LAZY_NODES = 10_000
#: Attribute of the stand-in ``forward`` holding the implementation's name (and marking it as the stand-in).
_PENDING = "_ir_pending_code"


def wants_deferral(graph: fx.Graph) -> bool:
    """Whether ``graph`` is large enough to have its code at first use (and fx writes no node metadata into
    code, which its profiler mode does)."""
    return len(graph.nodes) >= LAZY_NODES and not fx_experimental_config.enrich_profiler_metadata


def defer(gm: fx.GraphModule, graph: fx.Graph, implementation: str) -> None:
    """Make ``graph`` ``gm``'s graph, with its code written and compiled at first use (see the module docstring).

    Raises:
        IRFormatError: the code of the graph's inputs and output (its signature) cannot be generated.
    """
    attrs = gm.__dict__
    attrs["_graph"] = graph  # what ``nn.Module.__setattr__`` does with a plain value (see shared_code.adopt)
    graph.owning_module = gm
    if isinstance(graph._codegen, _PyTreeCodeGen):
        gm._in_spec = graph._codegen.pytree_info.in_spec
        gm._out_spec = graph._codegen.pytree_info.out_spec

    def forward(self: fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        materialize(self)
        return type(self).forward(self, *args, **kwargs)

    forward.__signature__ = _signature(graph, implementation)  # type: ignore[attr-defined]
    setattr(forward, _PENDING, implementation)
    cls = type(gm)
    cls.forward = forward
    cls.code = property(_code, doc=fx.GraphModule.code.__doc__)  # type: ignore[attr-defined]
    cls_call = cls.__call__ if "__call__" in vars(cls) else None
    if "_wrapped_call" not in vars(cls):
        cls._wrapped_call = _WrappedCall(cls, cls_call)

    def call_wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        return self._wrapped_call(self, *args, **kwargs)

    cls.__call__ = call_wrapped


def pending(gm: fx.GraphModule) -> bool:
    """Whether ``gm``'s code is still to be generated (:func:`defer`)."""
    return hasattr(type(gm).__dict__.get("forward"), _PENDING)


def materialize(gm: fx.GraphModule) -> None:
    """Write and compile ``gm``'s deferred code now (nothing if it has its code).

    Raises:
        IRFormatError: fx cannot generate or compile the source (names the implementation).
    """
    cls = type(gm)
    stub = cls.__dict__.get("forward")
    implementation = getattr(stub, _PENDING, None)
    if implementation is None:
        return
    graph = gm._graph
    with generating(implementation):
        python_code = graph.python_code(root_module="self")
        fn = _forward_from_src(python_code.src, python_code.globals, getattr(graph, "_co_fields", {}))
    attrs = gm.__dict__
    attrs["_code"] = python_code.src
    attrs["_lineno_map"] = python_code._lineno_map
    attrs["_prologue_start"] = python_code._prologue_start
    if cls.__dict__.get("forward") is stub:  # unless another thread or a recompile() was first
        cls.forward = fn
        fold = gm.__dict__.get(FOLD_ATTR)
        if fold is not None and fold.plain is stub:  # the fold stands for the plain forward, which this is
            fold.plain = fn
    if "code" in cls.__dict__:
        del cls.code


def _code(self: fx.GraphModule) -> str:
    materialize(self)
    return self.__dict__["_code"]


def _signature(graph: fx.Graph, implementation: str) -> inspect.Signature:
    """The signature of ``graph``'s generated ``forward`` (``self`` first): the code of a graph holding only its
    inputs and its output (the output's other values read as ``None``), written by the same code generator."""
    skeleton = fx.Graph()
    skeleton._codegen = graph._codegen
    copies: dict[fx.Node, fx.Node] = {}
    for node in graph.nodes:
        if node.op == "placeholder":
            copies[node] = skeleton.node_copy(node)
        elif node.op == "output":
            skeleton.output(fx.map_arg(node.args[0], lambda n: copies.get(n)))
    with generating(implementation):
        python_code = skeleton.python_code(root_module="self")
        fn: Callable[..., Any] = _forward_from_src(python_code.src, python_code.globals)
    return inspect.signature(fn)


@contextlib.contextmanager
def generating(implementation: str) -> Iterator[None]:
    """Turn a failure of fx's code generation or of compiling its source into an :class:`IRFormatError` naming
    ``implementation`` (an :class:`IRError` passes as it is).

    Raises:
        IRFormatError: fx raised ``SyntaxError``, ``RecursionError``, ``ValueError``, ``TypeError``,
            ``RuntimeError`` or ``MemoryError``.
    """
    try:
        yield
    except IRError:
        raise
    except (SyntaxError, RecursionError, ValueError, TypeError, RuntimeError, MemoryError) as exc:
        raise IRFormatError(f"cannot generate code for this graph: {type(exc).__name__}: {exc}",
                            implementation=implementation,
                            hint="the IR's graph is malformed (nesting, names or arguments)") from None


__all__ = ["LAZY_NODES", "defer", "generating", "materialize", "pending", "wants_deferral"]
