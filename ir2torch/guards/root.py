"""The input guard of a rebuilt root that a builder made (``nn.Sequential``, any typed module), not generated code.

A root rebuilt from its graph checks its inputs in its own generated ``forward`` (:mod:`ir2torch.guards.check`). A
root of
a type with a builder is the library's module itself (an ``nn.Sequential`` stays an ``nn.Sequential``, indexable),
so there is no generated code to put the check in, and the root ran unguarded: the graphs of its children, traced
for the converted shapes, took anything. ``Sequential(Linear(8, 8), <x.reshape(x.shape[0], -1)>)`` converted at
batch 2 and called at batch 4 returned a ``(2, 64)`` result instead of ``(4, 32)``, without an error.

:func:`guard_builder_root` gives such a root the checks a generated root runs, built the same way from the same
recorded data: the call's structure (:meth:`~ir2torch.guards.check.InputGuard.check_call`), then a generated function
binding the arguments with the root's calling convention and calling the guard (and the same-inputs check) on the
flat inputs, exactly as the first lines of a generated root do. They run in the instance's ``forward``
(:func:`guarded_forward`), which then calls the class's ``forward``: the root keeps its class (``type(root) is
nn.Sequential``), no hook is added, and deep copies keep the check.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

from torch import fx, nn

from common.ir import Implementation
from ir2torch.codegen.source import calling_convention, compile_variant
from ir2torch.guards.check import InputGuard
from ir2torch.guards.same_inputs import insert_same_inputs
from ir2torch.rebuild.graphs import GraphBuilder, execution_order


def guarded_forward(cls_forward: Callable[..., Any], guard: InputGuard, bind: Callable[..., Any]) -> Callable[..., Any]:
    """``forward(self, ...)`` of a rebuilt root built by a builder: ``guard``'s call check, ``bind`` (the generated
    binding that calls the guard on the flat inputs), then ``cls_forward``, the class's ``forward``. Its signature is
    ``cls_forward``'s, so ``inspect.signature(root.forward)``, ``torch.export`` and a conversion of the rebuilt model
    read the original parameters."""

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        guard.check_call(self, args, kwargs)
        bind(self, *args, **kwargs)
        return cls_forward(self, *args, **kwargs)

    forward.__signature__ = inspect.signature(cls_forward)  # type: ignore[attr-defined]
    forward.__qualname__ = f"{getattr(cls_forward, '__qualname__', 'forward')} (input guard)"
    forward.__doc__ = cls_forward.__doc__
    forward.input_guard = guard  # type: ignore[attr-defined]
    return forward


def guard_builder_root(module: nn.Module, impl: Implementation, guard: InputGuard) -> nn.Module:
    """Make ``module`` (the root ``impl`` rebuilt by a builder) check its inputs with ``guard`` on every call.

    Raises:
        IRError: as the calling convention and code generation of a graph (an unreadable ``in_spec``, a name
            generated code cannot use).
    """
    graph = fx.Graph()
    builder = GraphBuilder(impl, allowlist=None, codes=None)  # type: ignore[arg-type] - only its input names
    for node in execution_order(impl):
        if impl.node(node)["type"] == "input":
            placeholder = graph.placeholder(builder.placeholder_name(node))
            placeholder.meta["ir_node"] = node
    insert_same_inputs(graph, impl)
    guard.insert(graph)
    graph.output(None)
    if "in_spec" in impl.meta:  # the root's arguments, bound as its generated forward would; nothing returned
        graph._codegen = calling_convention({k: v for k, v in impl.meta.items() if k != "out_spec"}, impl.name)
    forward = guarded_forward(type(module).forward, guard, compile_variant(graph, impl.name))
    # the instance's ``forward``, which ``nn.Module.__call__`` calls: a bound method (deep copies rebind it)
    module.__dict__["forward"] = types.MethodType(forward, module)
    return module


__all__ = ["guard_builder_root", "guarded_forward"]
