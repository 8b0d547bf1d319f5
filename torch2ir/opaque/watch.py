"""What an opaque leaf's own code does with the children traced on their own, in the eager call of the model's
copy (:func:`torch2ir.opaque.recording.record`): a use the rebuilt child cannot repeat identically keeps the child
opaque; the uses it can repeat are carried to it (:mod:`common.opaque_reads`)."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
from collections.abc import Callable, Iterable, Iterator
from types import FunctionType
from typing import Any

from torch import fx, nn

from common.opaque import is_attribute_name
from common.opaque_reads import SubmoduleAccessor, plain_scalar

#: Instance attributes every ``nn.Module`` has: not the module's own.
_MODULE_ATTRIBUTES = frozenset({*vars(nn.Module()), "_compiled_call_impl"})

#: sha256 of the ``inspect.getsource`` of methods reviewed to take no argument and return a module inside their
#: module chosen by its module tree (and class attributes) only, never changing anything: transformers'
#: ``EmbeddingAccessMixin.get_input_embeddings`` (the same source in 5.23.0 and 5.24.0).
SUBMODULE_METHODS = frozenset({"f3deb746a992f6a22a8941cdd3968c4c0d44887bb8d11bab8b113ddad3ea06fd"})

_HASHES: dict[Any, str | None] = {}

#: Names a module rebuilt from its graph (an ``fx.GraphModule``) has already: a read of one is not carried (the
#: rebuild would refuse to shadow it), the child stays opaque.
_GRAPH_MODULE_NAMES = frozenset({*dir(fx.GraphModule), *vars(fx.GraphModule(nn.Module(), fx.Graph()))})


def reviewed_method(function: Any) -> bool:
    """Whether ``function`` (a plain function) has one of the reviewed sources of :data:`SUBMODULE_METHODS`."""
    if not isinstance(function, FunctionType):
        return False
    code = function.__code__
    if code not in _HASHES:
        try:
            _HASHES[code] = hashlib.sha256(inspect.getsource(function).encode()).hexdigest()
        except (OSError, TypeError):
            _HASHES[code] = None
    return _HASHES[code] in SUBMODULE_METHODS


class Watch:
    """What an opaque leaf's own code does with each watched child (in the eager call of the model's copy) besides
    calling it. A rebuilt child has its real class's methods and attributes only as far as ``nn.Module`` defines
    them, and a module inside it was traced for the child's call only, so the child is kept opaque (its own
    children traced in turn) when the opaque code reads a method, property or own attribute of it or of a module
    inside it that is rebuilt from a graph (``.dtype``, ``.config``), sets an attribute of one (a value its next
    call reads, which its graph would hold as a constant), or calls a graph module inside it directly.

    The uses a rebuild repeats identically do not (:mod:`common.opaque_reads`): reading an instance attribute of the
    child holding a plain scalar that nothing sets during the call (``carried``), calling a reviewed method of it
    that returns a module inside it (``modules``: transformers' ``get_input_embeddings()``), and calling a module
    inside it that is rebuilt as its own class with everything below it (``exact_leaf``: an ``nn.Embedding``).

    ``uses``: ``{path: the first use that keeps it opaque}``; :meth:`reads` gives what the others carry.
    """

    def __init__(self, twin: nn.Module, paths: Iterable[str],
                 keeps_class: Callable[[nn.Module], bool] = lambda m: False,
                 exact_leaf: Callable[[nn.Module], bool] = lambda m: False) -> None:
        self.twin = twin
        self.paths = list(paths)
        #: whether a module inside a child is rebuilt as its own class (a handled leaf, a container)
        self.keeps_class = keeps_class
        #: whether a module inside a child is rebuilt as its own class with everything below it (a handled leaf):
        #: the opaque code may call it directly
        self.exact_leaf = exact_leaf
        self.uses: dict[str, str] = {}
        self.depth: dict[str, int] = dict.fromkeys(self.paths, 0)
        self.carried: dict[str, dict[str, Any]] = {p: {} for p in self.paths}
        self.modules: dict[str, dict[str, str]] = {p: {} for p in self.paths}
        #: reviewed methods read but not (yet) called, and attributes the child's own code set
        self.pending: dict[str, set[str]] = {p: set() for p in self.paths}
        self.own_sets: dict[str, set[str]] = {p: set() for p in self.paths}
        self.inside: dict[str, dict[int, str]] = {}

    def reads(self) -> dict[str, dict[str, dict[str, Any]]]:
        """``{path: {"attributes": {...}, "modules": {...}}}`` of each watched child without a use that keeps it
        opaque and with something to carry (:mod:`common.opaque_reads`). Notes, as uses, a reviewed method read and
        never called and an attribute read that the child's own code set."""
        for path in self.paths:
            if self.pending[path]:
                self.uses.setdefault(path, f"the opaque leaf's own code reads {path}.{min(self.pending[path])} "
                                           "without calling it")
            both = self.own_sets[path] & set(self.carried[path])
            if both:
                self.uses.setdefault(path, f"the opaque leaf's own code reads {path}.{min(both)}, which its own "
                                           "code sets")
        out = {}
        for path in self.paths:
            if path in self.uses:
                continue
            record = {k: v for k, v in (("attributes", self.carried[path]), ("modules", self.modules[path])) if v}
            if record:
                out[path] = record
        return out

    def _enter(self, path: str) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            self.depth[path] += 1
        return hook

    def _leave(self, path: str) -> Any:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self.depth[path] -= 1
        return hook

    def _inside(self, path: str, sub: str) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            if not self.depth[path]:
                self.uses.setdefault(path, f"the opaque leaf's own code calls {sub} inside it")
        return hook

    def _read(self, obj: nn.Module, cls: type, path: str, name: str) -> tuple[bool, Any]:
        """A read by the opaque code of ``name`` of the child at ``path`` itself: ``(True, what to give)`` when the
        rebuild can repeat it, ``(False, None)`` otherwise."""
        own = object.__getattribute__(obj, "__dict__")
        if not is_attribute_name(name) or name in _GRAPH_MODULE_NAMES:
            return False, None
        if name in own:
            value = own[name]
            if plain_scalar(value):
                self.carried[path].setdefault(name, value)
                return True, value
            if isinstance(value, SubmoduleAccessor) and value.owner is obj:  # a rebuild's, converted again
                return True, self._method(path, name, value)
            return False, None
        static = inspect.getattr_static(obj, name, None)
        if reviewed_method(static):
            return True, self._method(path, name, cls.__getattribute__(obj, name))
        return False, None

    def _method(self, path: str, name: str, method: Callable[[], Any]) -> Callable[..., Any]:
        """``method`` (a reviewed one, bound to the child at ``path``), noting the module it returns."""
        self.pending[path].add(name)

        def call(*args: Any, **kwargs: Any) -> Any:
            if args or kwargs:
                self.uses.setdefault(path, f"the opaque leaf's own code calls {path}.{name} with arguments")
                return method(*args, **kwargs)
            self.depth[path] += 1  # what it reads of the child is its own business
            try:
                result = method()
            finally:
                self.depth[path] -= 1
            where = self.inside[path].get(id(result)) if isinstance(result, nn.Module) else None
            if where is None:
                self.uses.setdefault(path, f"the opaque leaf's own code calls {path}.{name}, which returns no "
                                           "module inside it")
            elif self.modules[path].setdefault(name, where) != where:
                self.uses.setdefault(path, f"the opaque leaf's own code calls {path}.{name}, which returns "
                                           "different modules")
            self.pending[path].discard(name)
            return result
        return call

    def _recording(self, module: nn.Module, path: str, where: str) -> type:
        """A subclass of ``module``'s class noting, while the child at ``path`` is not running, a read of an
        attribute its class defines beyond ``nn.Module``'s or of its own instance attributes."""
        cls = type(module)
        names = {n for k in cls.__mro__ if k not in nn.Module.__mro__ for n in vars(k)
                 if not n.startswith("__") and n != "forward"}
        names |= {n for n in vars(module) if n not in _MODULE_ATTRIBUTES}
        watch = self

        def __getattribute__(obj: Any, name: str) -> Any:
            if name in names and not watch.depth[path]:
                if where == path:
                    carried, value = watch._read(obj, cls, path, name)
                    if carried:
                        return value
                watch.uses.setdefault(path, f"the opaque leaf's own code reads {where}.{name}")
            return cls.__getattribute__(obj, name)

        def __setattr__(obj: Any, name: str, value: Any) -> None:
            # a value set on it from outside (a flag for its next call) would be a constant of its graph
            if not name.startswith("__"):
                if not watch.depth[path]:
                    watch.uses.setdefault(path, f"the opaque leaf's own code sets {where}.{name}")
                elif where == path:  # by its own code: a value the opaque code reads would not be carried
                    watch.own_sets[path].add(name)
            cls.__setattr__(obj, name, value)

        def __call__(obj: Any, *args: Any, **kwargs: Any) -> Any:
            # the call itself, from its first step: a rebuilt module's call reads its own attributes (its
            # generated call, its lifted constants) before its forward hooks run
            watch.depth[path] += 1
            try:
                return cls.__call__(obj, *args, **kwargs)
            finally:
                watch.depth[path] -= 1

        body = {"__getattribute__": __getattribute__, "__setattr__": __setattr__, "__module__": cls.__module__,
                "__qualname__": cls.__qualname__}
        if where == path:  # the child itself (a module inside it called directly is the opaque code's use)
            body["__call__"] = __call__
        return type(cls.__name__, (cls,), body)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        handles: list[Any] = []
        swapped: list[tuple[nn.Module, type]] = []
        try:
            for path in self.paths:
                child = self.twin.get_submodule(path)
                self.inside[path] = {id(m): sub for sub, m in child.named_modules(remove_duplicate=False)}
                handles.append(child.register_forward_pre_hook(self._enter(path)))
                handles.append(child.register_forward_hook(self._leave(path), always_call=True))
                for sub, module in child.named_modules(prefix=path):
                    if sub != path and self.exact_leaf(module):
                        # rebuilt as it is: the opaque code may call it, and what it runs is its own
                        handles.append(module.register_forward_pre_hook(self._enter(path)))
                        handles.append(module.register_forward_hook(self._leave(path), always_call=True))
                    elif sub != path:
                        handles.append(module.register_forward_pre_hook(self._inside(path, sub)))
                    if sub == path or not self.keeps_class(module):
                        cls = type(module)
                        try:
                            module.__class__ = self._recording(module, path, sub)
                        except TypeError:  # a class whose instances cannot change class: not watched, so kept
                            self.uses.setdefault(path, f"the opaque leaf's use of {sub} cannot be watched")
                            continue
                        swapped.append((module, cls))
            yield
        finally:
            for handle in handles:
                handle.remove()
            for module, cls in swapped:
                module.__class__ = cls


__all__ = ["SUBMODULE_METHODS", "Watch", "reviewed_method"]
