"""Reading the pytree specs of a file (``in_spec`` / ``out_spec``) without importing anything.

``torch.utils._pytree.treespec_loads`` is not safe on untrusted text: a ``defaultdict`` node
makes it ``importlib.import_module`` a module named in the text, and an ``{"__enum__": ...}``
object in a context does the same and then indexes whatever it found. :func:`load_spec` reads
the same format (protocol 1, written by ``treespec_dumps``) with three rules:

- a node's type must be a container (``tuple``, ``list``, ``dict``, ``OrderedDict``, a
  named tuple) or a type some imported library registered with torch's pytree (transformers'
  ``ModelOutput`` classes), looked up by its serialized name only; an allow-listed key/value cache
  class (:data:`common.caches.CACHE_TYPES`: transformers' ``DynamicCache``) is registered first;
- contexts are parsed as strict JSON data (no object hooks); only named tuples may use their
  registered decoder, which looks a name up in the same table;
- nesting and size are bounded, and every failure is an :class:`~common.errors.IRFormatError`.

:func:`kwarg_names` returns the keyword-argument names of an input spec, which become names in
the rebuilt ``forward``'s source and are therefore checked as identifiers. :func:`exact_leaves` reads a value's
leaves against a spec it is known to have (the rebuilt models' fast paths).
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import json
from collections import namedtuple
from collections.abc import Iterator
from typing import Any

from .caches import CACHE_TYPES, cache_context_problem, register_cache_type
from .errors import IRFormatError
from .names import check_identifier

#: Deepest spec accepted (a model's inputs and outputs nest a few levels).
MAX_SPEC_DEPTH = 32
#: Longest spec text accepted (the 70B-parameter Llama's specs are under 2 kB).
MAX_SPEC_LENGTH = 1 << 20

_NAMEDTUPLE = "collections.namedtuple"
#: Types with a custom context decoder that is a pure table lookup.
_SAFE_DECODERS = frozenset({_NAMEDTUPLE})
#: Types whose decoder imports or resolves names from the text: never read from a file.
_REFUSED = frozenset({"collections.defaultdict", "collections.deque"})


#: Whether unknown output types are read as :class:`UnknownType` placeholders (:func:`viewing`).
_VIEWING: contextvars.ContextVar[bool] = contextvars.ContextVar("torch2ir_viewing_specs", default=False)


class UnknownType:
    """Stands in a spec for a type no imported library registered (a ``transformers`` output class in a file opened
    without transformers): only while :func:`viewing`. A spec holding one describes the structure (the type's
    name is the node's context) and cannot rebuild a model: a rebuild reads the spec again, strictly."""


@contextlib.contextmanager
def viewing() -> Iterator[None]:
    """Within this context, :func:`load_spec` reads a node naming an unregistered type as an :class:`UnknownType`
    placeholder (its name kept as data, nothing imported) instead of refusing it; for looking at a file whose
    model's library is not installed (``ir2torch show`` / ``view`` / ``diff``, ``IR.load(..., for_viewing=True)``).
    Refused types (``defaultdict``, ``deque``) stay refused."""
    token = _VIEWING.set(True)
    try:
        yield
    finally:
        _VIEWING.reset(token)


def is_viewing() -> bool:
    """Whether :func:`viewing` is in effect."""
    return _VIEWING.get()


def _fail(message: str, field: str, implementation: str | None, hint: str | None = None) -> IRFormatError:
    return IRFormatError(message, implementation=implementation, key=field, hint=hint)


def _no_hooks(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if "__enum__" in out:
        raise ValueError("enum values in pytree contexts are not read from files")
    return out


def _json(text: Any, field: str, implementation: str | None) -> Any:
    if not isinstance(text, str) or len(text) > MAX_SPEC_LENGTH:
        raise _fail("is not a pytree spec string of reasonable size", field, implementation)
    try:
        return json.loads(text, object_pairs_hook=_no_hooks)
    except (ValueError, RecursionError) as exc:
        raise _fail(f"is not readable: {exc}", field, implementation) from None


def load_spec(text: Any, field: str = "in_spec", *, implementation: str | None = None) -> Any:
    """The ``TreeSpec`` that ``treespec_dumps`` wrote as ``text``, read without importing anything.

    Raises:
        IRFormatError: malformed, too deep, or naming a type no imported library registered.
    """
    from torch.utils import _pytree as pytree

    doc = _json(text, field, implementation)
    if not (isinstance(doc, list) and len(doc) == 2 and doc[0] == 1):
        raise _fail("is not a protocol-1 pytree spec ([1, {...}])", field, implementation)
    return _node(doc[1], pytree, field, implementation, 0)


def _node(schema: Any, pytree: Any, field: str, implementation: str | None, depth: int) -> Any:
    if depth > MAX_SPEC_DEPTH:
        raise _fail(f"nests more than {MAX_SPEC_DEPTH} levels", field, implementation)
    if not (isinstance(schema, dict) and set(schema) == {"type", "context", "children_spec"}
            and isinstance(schema["children_spec"], list)):
        raise _fail("has a node that is not {type, context, children_spec}", field, implementation)
    name, context, children = schema["type"], schema["context"], schema["children_spec"]
    if name is None and context is None and not children:
        return pytree._LEAF_SPEC
    if isinstance(name, str) and name in CACHE_TYPES and name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE and \
            not _VIEWING.get():
        _register_cache(name, field, implementation)
    if isinstance(name, str) and name not in _REFUSED and name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE and \
            _VIEWING.get():
        kids = [_node(child, pytree, field, implementation, depth + 1) for child in children]
        return pytree.TreeSpec(UnknownType, name[:200], kids)
    if not isinstance(name, str) or name in _REFUSED or name not in pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE:
        module = name.rpartition(".")[0] if isinstance(name, str) else ""
        raise _fail(f"names type {str(name)[:80]!r}, which is not a container registered with torch's pytree",
                    field, implementation,
                    hint=(f"import {module[:80]} first (the module defining the model's output class); " if module
                          else "") + "to only look at the file, IR.load(path, for_viewing=True) or ir2torch "
                    "show/view/diff read it without; defaultdict and deque specs are not read from files")
    typ = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE[name]
    decoder = pytree.SUPPORTED_SERIALIZED_TYPES[typ].from_dumpable_context
    if decoder is None:
        value = _json(context, field, implementation)
    elif name in _SAFE_DECODERS:
        try:
            value = decoder(context)
        except Exception as exc:  # noqa: BLE001 - the decoder raises several types for unknown names
            raise _fail(f"names an unknown named tuple: {exc}", field, implementation) from None
    else:
        raise _fail(f"type {name!r} has a context decoder that is not read from files", field, implementation)
    if name in CACHE_TYPES and (problem := cache_context_problem(name, value, children)) is not None:
        raise _fail(problem, field, implementation)
    kids = [_node(child, pytree, field, implementation, depth + 1) for child in children]
    try:
        return pytree.TreeSpec(typ, value, kids)
    except Exception as exc:  # noqa: BLE001 - TreeSpec validates arity and context in several ways
        raise _fail(f"has an inconsistent node of type {name!r}: {exc}", field, implementation) from None


def _register_cache(name: str, field: str, implementation: str | None) -> None:
    """Register the allow-listed key/value cache class ``name`` (:mod:`common.caches`): the file names it."""
    try:
        register_cache_type(name)
    except ImportError as exc:
        raise _fail(f"names the cache class {name!r}, whose library cannot be imported ({exc})", field,
                    implementation, hint="install transformers to rebuild this model; to only look at the file, "
                    "IR.load(path, for_viewing=True)") from None


def kwarg_names(spec: Any, field: str = "in_spec", *, implementation: str | None = None) -> list[str]:
    """Keyword-argument names of an ``(args, kwargs)`` input spec, each checked as an identifier.

    Raises:
        UnsafeNameError: a keyword name is not a plain identifier.
    """
    if not (spec.type is tuple and spec.num_children == 2 and spec.child(1).type is dict):
        return []
    names = list(spec.child(1).context)
    for name in names:
        check_identifier(name, f"{field} keyword argument", implementation=implementation)
    return names


_BRACKETS = {tuple: ("(", ")"), list: ("[", "]"), dict: ("{", "}"), collections.OrderedDict: ("OrderedDict{", "}")}


def describe_spec(spec: Any, limit: int = 200) -> str:
    """A short text of a pytree structure for messages: ``*`` for a leaf, ``(*, [*, *])`` for a tuple holding a list,
    ``OrderedDict{'low': *, 'high': *}``, ``Point(*, *)``; cut at ``limit`` characters. Never a value: a TreeSpec's
    own text is as long as the structure (and fx's errors print the object flattened, tensor values included)."""
    parts: list[str] = []
    size = 0

    def walk(node: Any) -> None:
        nonlocal size
        if size > limit:
            return
        if node.is_leaf():
            parts.append("*")
            size += 1
            return
        kind = node.type
        keyed = kind in (dict, collections.OrderedDict) and isinstance(node.context, list)
        if kind is type(None):
            opening, closing = "None", ""
        elif kind in _BRACKETS:
            opening, closing = _BRACKETS[kind]
        elif kind is UnknownType:  # read while viewing: the file's type name, cut
            opening, closing = f"{str(node.context).rpartition('.')[2][:60]}(", ")"
        else:  # a named tuple's spec holds its class as the context
            named = node.context if isinstance(node.context, type) else kind
            opening, closing = f"{getattr(named, '__qualname__', named)}(", ")"
        parts.append(opening)
        size += len(opening)
        for i, child in enumerate(node.children()):
            if i:
                parts.append(", ")
            if keyed:
                key = repr(node.context[i])
                parts.append(f"{key}: ")
                size += len(key) + 2
            walk(child)
        if kind is tuple and node.num_children == 1:
            parts.append(",")
        parts.append(closing)

    walk(spec)
    text = "".join(parts)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def spec_difference(found: Any, spec: Any, limit: int = 200) -> str | None:
    """Where two pytree structures first differ, for a message whose :func:`describe_spec` texts are the same (the
    texts show no context but a dict's keys: a cache class's layer layout, a named tuple's fields):
    ``"at [1][0]: DynamicCache with context [...], converted with [...]"``, or ``None`` when they are equal. Contexts
    are shown as ``repr`` text, cut at ``limit`` characters each (they are structure, never tensor values)."""

    def cut(value: Any) -> str:
        if isinstance(value, type):  # a named tuple's class: where it is defined, and its fields
            fields = getattr(value, "_fields", None)
            text = f"{value.__module__}.{value.__qualname__}" + (f"{tuple(fields)}" if fields is not None else "")
        else:
            text = repr(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def name(kind: Any, context: Any = None) -> str:
        named = context if isinstance(context, type) else kind
        return getattr(named, "__qualname__", None) or str(named)

    def walk(a: Any, b: Any, path: str) -> str | None:
        where = path or "the top"
        if a.is_leaf() or b.is_leaf():
            if a.is_leaf() and b.is_leaf():
                return None
            return f"at {where}: {'a leaf' if a.is_leaf() else name(a.type)}, converted with " \
                   f"{'a leaf' if b.is_leaf() else name(b.type)}"
        if a.type is not b.type:
            return f"at {where}: {name(a.type)}, converted with {name(b.type)}"
        kind = name(a.type, a.context)
        if a.context != b.context:
            return f"at {where}: {kind} with context {cut(a.context)}, converted with {cut(b.context)}"
        if a.num_children != b.num_children:
            return f"at {where}: {kind} of {a.num_children} children, converted with {b.num_children}"
        for i in range(a.num_children):
            found_here = walk(a.child(i), b.child(i), f"{path}[{i}]")
            if found_here is not None:
                return found_here
        return None

    return walk(found, spec, "")


def exact_leaves(value: Any, spec: Any) -> list[Any] | None:
    """The leaves of ``value`` in ``spec``'s order when its structure is ``spec`` exactly (every node of the same
    type, with the same context and number of children; any value where ``spec`` has a leaf), else ``None``.

    One walk over the value against ``spec`` read once (:func:`_program`), no ``TreeSpec`` built: the fast path of
    the structure check and of the flattening of nested arguments (:func:`ir2torch.guards.check.check_structure`,
    :class:`ir2torch.codegen.arguments.ArgumentFlattener`) and of the forward budget's signatures. ``None`` means
    "not identical", not "refused": those then apply their own rule (a list for a tuple, dict keys in another
    order) and their error messages. The leaves are those ``torch.fx``'s ``tree_flatten_spec`` gives for the same
    value and spec (each node's children in its flatten order, which is the spec's when the contexts are equal).
    """
    out: list[Any] = []
    program = _program(spec)
    if program is None:
        return [value]
    return out if _exact_walk(value, program, out) else None


#: ``id(spec) -> (spec, program)`` of the specs read by :func:`_program` (the spec is held: its id stays its own).
_PROGRAMS: dict[int, tuple[Any, Any]] = {}
_MAX_PROGRAMS = 4096


def _program(spec: Any) -> Any:
    """``spec`` as nested ``(type, flatten_fn, context, children)`` tuples (``None`` for a leaf), made once."""
    entry = _PROGRAMS.get(id(spec))
    if entry is not None and entry[0] is spec:
        return entry[1]
    if len(_PROGRAMS) >= _MAX_PROGRAMS:
        _PROGRAMS.clear()
    program = _compile(spec)
    _PROGRAMS[id(spec)] = (spec, program)
    return program


def _compile(spec: Any) -> Any:
    from torch.utils import _pytree as pytree

    if spec.is_leaf():
        return None
    typ = spec.type
    node = pytree.SUPPORTED_NODES.get(typ)
    flatten = node.flatten_fn if node is not None else None
    if typ is namedtuple:  # a named tuple's node: its class is the context
        typ = spec.context
    return typ, flatten, spec.context, tuple(_compile(child) for child in spec.children())


def _exact_walk(value: Any, program: Any, out: list[Any]) -> bool:
    typ, flatten, context, kids = program
    if type(value) is not typ or flatten is None:
        return False
    children, found = flatten(value)
    if len(children) != len(kids) or found != context:
        return False
    for child, kid in zip(children, kids):
        if kid is None:
            out.append(child)
        elif not _exact_walk(child, kid, out):
            return False
    return True


__all__ = ["MAX_SPEC_DEPTH", "describe_spec", "exact_leaves", "kwarg_names", "load_spec", "spec_difference"]
