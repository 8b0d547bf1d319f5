"""Faster reads in generated source: a module's own submodules, parameters and buffers read from its dictionaries,
and submodule calls made through :func:`ir2torch.codegen.module_call.call_module` (two frames fewer)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import fx
from torch.fx.graph import _format_target

from common.names import generated_global

#: Names the generated module class answers itself (its ``code``, ``graph``, ``forward``...): looked up as fx writes
#: them, never in the module's dictionaries.
_CLASS_NAMES = frozenset(dir(fx.GraphModule)) | {"_wrapped_call"}


def _first_hop(root: str, name: str, kinds: tuple[str, ...]) -> str:
    """``root.name`` as ``nn.Module.__getattr__`` finds it (its ``_parameters``, ``_buffers``, ``_modules``, in that
    order, among ``kinds``), else fx's own expression. The same object without ``__getattr__``'s failed lookup
    first: a submodule, parameter or buffer of a module costs about 0.55 us through the attribute and 0.03 us from
    its dictionary."""
    plain = _format_target(root, name)
    if name in _CLASS_NAMES:
        return plain
    tests = "".join(f'{root}.{kind}["{name}"] if "{name}" in {root}.{kind} else ' for kind in kinds)
    return f"({tests}{plain})"


def _fast_lookups(src: str, nodes: Any, root_module: str, name_of: Callable[[str], str] = str) -> str:
    """``src`` with the module's own submodules, parameters and buffers read from its dictionaries, and each
    submodule call ``x = self.a.b(...)`` written ``x = _ir_call_module(<self.a>.b, ...)``
    (:func:`ir2torch.codegen.module_call.call_module`: the same call, two frames fewer without hooks).

    Only the start of the line fx wrote for a ``call_module`` or ``get_attr`` node changes, from names fx made and
    the graph's checked targets (:func:`check_graph`), so the lines, and the line-to-node map error reports use,
    stay as they are; a line in another form is left as fx wrote it. The first step of a path is the generated
    module's own (a class fx and the rebuilder define); a later step goes through
    :func:`ir2torch.codegen.module_call.child`, which reads a torch container's ``_modules`` and takes ``getattr`` for
    anything else, since a user's module may sit there."""
    edits: dict[str, tuple[str, str, str]] = {}  # node name -> (op, fx's target text, the new target text)
    for node in nodes:
        if node.op not in ("call_module", "get_attr"):
            continue
        first, _, rest = node.target.partition(".")
        if node.op == "call_module" or rest:
            base = _first_hop(root_module, first, ("_modules",))
        else:
            base = _first_hop(root_module, first, ("_parameters", "_buffers", "_modules"))
        target = base
        for name in rest.split(".") if rest else ():
            target = f'{name_of(generated_global("child"))}({target}, "{name}")'
        edits[node.name] = (node.op, _format_target(root_module, node.target), target)
    if not edits:
        return src
    # one pass over the lines (a ``str.replace`` per node rescans the whole source: quadratic in a large graph);
    # each node's first line of the form fx writes changes, as the replacements of each head did
    lines = src.split("\n")
    done: set[tuple[str, str]] = set()
    call = name_of(generated_global("call_module"))
    for i in range(1, len(lines)):
        line = lines[i]
        if not line.startswith("    "):
            continue
        name = line[4:line.find(" = ", 4)] if " = " in line else ""
        edit = edits.get(name)
        if edit is None:
            continue
        op, written, target = edit
        head = f"    {name} = {written}"
        if not line.startswith(head):
            continue
        end = line[len(head):len(head) + 1]
        if op == "call_module":
            if end == "(" and (name, "(") not in done:
                lines[i] = f"    {name} = {call}({target}, " + line[len(head) + 1:]
                done.add((name, "("))
        elif end == ";" and (name, ";") not in done:
            lines[i] = f"    {name} = {target}" + line[len(head):]
            done.add((name, ";"))
        elif end == "" and i < len(lines) - 1 and (name, "\n") not in done:
            lines[i] = f"    {name} = {target}"
            done.add((name, "\n"))
    return "\n".join(lines)
