"""Which strings of a file may become names in a rebuilt model, and the checks that enforce it.

An IR is data, but some of its strings end up as *names*: the forward arguments of the rebuilt
root, keyword-argument names of calls, attribute paths of child modules and of parameters and
buffers. torch.fx pastes such names into the Python source it generates and executes, so a
name that is not a plain identifier could smuggle code in. Every such field is checked here,
on load, against one rule per kind of name:

- :func:`check_identifier`: an ASCII Python identifier that is not a keyword, not a dunder
  name and not ``self`` (forward-argument and keyword-argument names);
- :func:`check_attr_path`: a dotted path of *components* (ASCII letters, digits, ``_`` and ``-``; a
  component may start with a digit, as ``ModuleList`` indices do, and hold a ``-``, as torchvision's
  ``block1-0``) none of which would shadow an attribute of ``nn.Module`` or ``fx.GraphModule``
  (``forward``, ``training``, ``_modules``, ``graph`` ...) — implementation keys, aliases, state names
  and ``get_attr`` targets. Generated code never spells a component as an identifier: one that is not
  an identifier is a quoted string there (``getattr(self, "block1-0")``, ``self._modules["0"]``), which
  these characters cannot end or escape.

Names the rebuilder makes itself (fx node names, placeholder names) never come from these
checks: they are derived from file strings by :func:`common.names.sanitize`-style cleaning and
made unique by fx.
"""

from __future__ import annotations

import functools
import keyword
import re

from .errors import UnsafeNameError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_COMPONENT = re.compile(r"[A-Za-z0-9_-]+\Z")

#: Longest name accepted (a module path of a real model is far shorter).
MAX_NAME_LENGTH = 512

# -- the names generated code uses: the one registry ir2torch draws from and the checks read ------------------
#: Names generated code spells as they are (``self``, fx's builtins and module globals, builtins it calls by
#: name): never renamed, so a forward argument or a parameter of that name would shadow them inside the
#: generated function; the checks here refuse them, and ir2torch never gives a node one of them.
CODEGEN_NAMES = frozenset({"self", "torch", "fx_pytree", "pytree", "inf", "nan", "NoneType", "device",
                           "getattr", "slice"})

#: Names of :data:`CODEGEN_NAMES` that generated code spells only in constants fx writes by their ``repr``
#: (``device(type='cpu')``, ``inf``, ``nan``): where a forward argument or parameter has one of them, the code
#: generator writes those constants through globals of its own instead (:mod:`ir2torch.codegen.source`), so these are
#: accepted as argument names (``forward(self, x, device)`` in transformers' ProphetNet and DETR).
RESPELLED_NAMES = frozenset({"device", "inf", "nan"})

#: Names a forward argument or parameter may not have: generated code spells them as they are.
ARGUMENT_RESERVED_NAMES = CODEGEN_NAMES - RESPELLED_NAMES

#: The globals ir2torch adds to generated code, by role (``{}``: an index). The code generator takes the name
#: of each from fx's namespace after the arguments and the locals of their binding, so an argument that has
#: one of these names keeps it and the global gets another: they are accepted as argument names.
GENERATED_GLOBALS = {
    "call_module": "_ir_call_module", "child": "_ir_child", "sequences": "_ir_sequences",
    "not_a_sequence": "_ir_not_a_sequence", "default": "_ir_default_{}", "out_fn": "_ir_out_fn_{}",
    "out_ctx": "_ir_out_ctx_{}", "constant": "_ir_constant_{}", "flatten": "_ir_flatten",
}  # fmt: skip

#: ``__module__`` of the checks generated code calls (a call node's target); fx spells such a target
#: ``<module>_<name>`` and takes that name from its namespace too (an argument of that name gets it first).
GENERATED_CALL_MODULE = "ir2torch"
#: ``__name__`` of those checks, by role: the input guard and the same-inputs check.
GENERATED_CALLS = {"input_guard": "check_inputs", "same_inputs": "check_same_inputs"}

#: Attributes ir2torch keeps in a rebuilt module's ``__dict__``, by role (the variant of the next call, the folded
#: constants and their plan, the forward's memory budget): a parameter, buffer or child of that name would be
#: hidden by them, so no component of an attribute path may be one.
GENERATED_ATTRS = {"variant": "_ir_variant", "fold": "_ir_fold", "folded": "_ir_folded",
                   "forward_budget": "_ir_forward_budget"}
_ATTR_NAMES = frozenset(GENERATED_ATTRS.values())


def generated_global(role: str, index: int | None = None) -> str:
    """The base name of the generated code's global for ``role`` (a key of :data:`GENERATED_GLOBALS`)."""
    base = GENERATED_GLOBALS[role]
    return base.format(index) if index is not None else base


def generated_names(count: int = 1) -> list[str]:
    """Every name generated code may take for a global of ir2torch's, indices ``0..count-1``: the bases of
    :data:`GENERATED_GLOBALS` and the spellings of :data:`GENERATED_CALLS` (for tests and documentation)."""
    names = [base.format(i) for base in GENERATED_GLOBALS.values() for i in (range(count) if "{}" in base else [0])]
    return names + [f"{GENERATED_CALL_MODULE}_{name}" for name in GENERATED_CALLS.values()]


@functools.cache
def module_attributes() -> frozenset[str]:
    """Attribute names of ``nn.Module`` and ``fx.GraphModule`` instances and classes (a child or a
    parameter of that name would replace them or be refused by ``add_module``)."""
    from torch import fx, nn

    names = set(dir(nn.Module)) | set(vars(nn.Module()))
    names |= set(dir(fx.GraphModule)) | set(vars(fx.GraphModule(nn.Module(), fx.Graph())))
    return frozenset(names)


def _fail(value: object, field: str, why: str, hint: str, implementation: str | None, node: str | None) -> None:
    shown = repr(value)
    if len(shown) > 80:
        shown = shown[:77] + "..."
    raise UnsafeNameError(f"{field} {shown} {why}", implementation=implementation, node=node, key=field, hint=hint)


def is_identifier(value: object) -> bool:
    """True for an ASCII identifier that is not a keyword, a dunder name or ``self``."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_NAME_LENGTH
        and _IDENTIFIER.match(value) is not None
        and not keyword.iskeyword(value)
        and not (value.startswith("__") and value.endswith("__"))
        and value != "self"
    )


def check_identifier(
    value: object, field: str, *, implementation: str | None = None, node: str | None = None,
    forbidden: frozenset[str] = frozenset(),
) -> str:
    """Return ``value`` if it is a plain identifier (see :func:`is_identifier`) not in ``forbidden``.

    Raises:
        UnsafeNameError: naming ``field`` and the offending value.
    """
    if not is_identifier(value):
        _fail(value, field, "is not a plain Python identifier",
              "use ASCII letters, digits and '_' (not starting with a digit); no keyword, dunder name or 'self'",
              implementation, node)
    if value in forbidden:
        _fail(value, field, "would shadow a name the generated code uses", f"rename it; reserved: "
              f"{', '.join(sorted(forbidden))}", implementation, node)
    return value  # type: ignore[return-value]


def is_component(value: object) -> bool:
    """True for one component of an attribute path (``layers``, ``0``, ``q_proj``, ``block1-0``)."""
    return (
        isinstance(value, str)
        and len(value) <= MAX_NAME_LENGTH
        and _COMPONENT.match(value) is not None
        and not keyword.iskeyword(value)
        and value not in module_attributes()
        and value not in _ATTR_NAMES
        and not (value.startswith("__") and value.endswith("__"))
    )


def check_attr_path(value: object, field: str, *, implementation: str | None = None, node: str | None = None) -> str:
    """Return ``value`` if it is a dotted path of safe components (see :func:`is_component`).

    Raises:
        UnsafeNameError: naming ``field``, the offending value and the bad component.
    """
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_LENGTH:
        _fail(value, field, "is not a non-empty attribute path", "use a dotted path such as 'encoder.layer.0'",
              implementation, node)
    for part in value.split("."):  # type: ignore[union-attr]
        if not is_component(part):
            if keyword.iskeyword(part):
                _fail(value, field, f"has component {part!r}, which is a Python keyword", "rename it",
                      implementation, node)
            if part in _ATTR_NAMES:
                _fail(value, field, f"has component {part!r}, which would be hidden by an attribute ir2torch "
                      "keeps on rebuilt modules", f"rename it; reserved: {', '.join(sorted(_ATTR_NAMES))}",
                      implementation, node)
            if _COMPONENT.match(part) or part.startswith("__"):
                _fail(value, field, f"has component {part!r}, which would shadow an attribute of nn.Module",
                      "rename the module or tensor; forward, training, _modules, graph, ... are reserved",
                      implementation, node)
            _fail(value, field, f"has component {part!r}, which is not made of ASCII letters, digits, '_' and '-'",
                  "use a dotted path such as 'encoder.layer.0'", implementation, node)
    return value  # type: ignore[return-value]


def check_forward_arg_names(names: object, *, implementation: str | None = None,
                            field: str = "forward_arg_names") -> list[str]:
    """Forward-argument names: distinct identifiers that shadow no name generated code spells as it is
    (:data:`ARGUMENT_RESERVED_NAMES`).

    Raises:
        UnsafeNameError: naming the field and the offending value.
    """
    if not isinstance(names, list):
        raise UnsafeNameError(f"{field} must be a list of names", implementation=implementation, key=field)
    for name in names:
        check_identifier(name, field, implementation=implementation, forbidden=ARGUMENT_RESERVED_NAMES)
    if len(set(names)) != len(names):
        raise UnsafeNameError(f"{field} {names!r} repeats a name", implementation=implementation, key=field,
                              hint="forward arguments need distinct names")
    return names


def sanitize(name: str) -> str:
    """An identifier derived from any string, for names the rebuilder makes (not unique by itself)."""
    if len(name) <= MAX_NAME_LENGTH and name.isascii() and name.isidentifier():
        return name  # what the character walk below gives for an ASCII identifier: itself
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name[:MAX_NAME_LENGTH])
    if not cleaned or cleaned[0].isdigit():
        cleaned = f"n_{cleaned}"
    return cleaned


_COUNTER = re.compile(r"_\d+\Z")


def without_counter(name: str) -> str:
    """``name`` without a trailing ``_<digits>`` counter (``add_252`` -> ``add``; ``_3`` stays ``_3``).

    Export numbers its nodes across the whole model; torch2ir names IR nodes from the rest, numbered within each
    graph, and ir2torch names fx nodes the same way, so identical layers get identical names (and shared code).
    """
    return _COUNTER.sub("", name) or name


__all__ = ["ARGUMENT_RESERVED_NAMES", "CODEGEN_NAMES", "GENERATED_ATTRS", "GENERATED_CALLS", "GENERATED_CALL_MODULE",
           "GENERATED_GLOBALS", "MAX_NAME_LENGTH", "RESPELLED_NAMES", "UnsafeNameError", "check_attr_path",
           "check_forward_arg_names", "check_identifier", "generated_global", "generated_names", "is_component",
           "is_identifier", "module_attributes", "sanitize", "without_counter"]
