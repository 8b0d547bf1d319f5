"""``Torch2Ir``: convert an ``nn.Module`` into the module-level IR.

Leaf handlers are keyed by module **class** (exact class, never a subclass or a class
of the same name): a handler maps a module instance to a JSON-able dict of constructor
arguments, and the implementation's IR ``type`` is the lowercased class name unless
registered with ``type=``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from torch import nn

from common.collector import collector_paused
from common.errors import DuplicateHandlerError, RegistryError
from common.flat import FlatIR
from common.ir import IR, NODE_KINDS
from common.opaque import OPAQUE_TYPE
from common.registry import Registry
from common.safety import Allowlist
from torch2ir.hierarchy.build import build_ir
from torch2ir.hierarchy.modules import CONTAINER_TYPES, GRAPH_TYPE

Handler = Callable[[nn.Module], dict[str, Any]]

#: IR types a handler may not take: node kinds, and the types the converter gives graph
#: implementations and containers (a class named ``Output`` would otherwise become
#: type ``"output"`` and its call nodes would read as the graph's output), and opaque leaves' (``opaque=``; a class
#: named ``Opaque`` would otherwise be rebuilt by the opaque builder).
RESERVED_TYPES = frozenset({*NODE_KINDS, GRAPH_TYPE, *CONTAINER_TYPES.values(), OPAQUE_TYPE})


def _check_type(cls: type, itype: str) -> None:
    if itype in RESERVED_TYPES:
        raise RegistryError(
            f"IR type {itype!r} of handler class {cls.__qualname__} is reserved",
            key=cls.__qualname__,
            hint=f"register it with another type=..., not one of {', '.join(sorted(RESERVED_TYPES))}",
        )


class Torch2Ir:
    """Converts models to IRs; owns its handler registry (copies are independent)."""

    def __init__(self) -> None:
        self.handlers: Registry[type, Handler] = Registry("module class")
        self._types: dict[type, str] = {}
        #: handlers of classes named by their qualified name, registered when a model first holds one
        self._by_name: dict[str, tuple[Handler, str]] = {}
        #: operators an IR of this converter may call (the defaults; opt in with ``.allowlist.allow("ns::op")``)
        self.allowlist = Allowlist()

    def register(self, cls: type[nn.Module], handler: Handler | None = None, *, type: str | None = None) -> Any:
        """Add the handler of module class ``cls``; refuses a class that already has one.

        Args:
            cls: the exact module class (subclasses are not matched).
            handler: ``module -> attributes``; omit to use as a decorator.
            type: the IR type string (default: ``cls.__name__.lower()``).

        Raises:
            RegistryError: the IR type is reserved (see :data:`RESERVED_TYPES`).
            DuplicateHandlerError: ``cls`` already has a handler.
        """
        self._check_class(cls)
        itype = type or cls.__name__.lower()
        _check_type(cls, itype)

        def add(fn: Handler) -> Handler:
            self.handlers.register(cls, fn)
            self._types[cls] = itype
            return fn

        return add if handler is None else add(handler)

    def register_by_name(self, qualname: str, handler: Handler, *, type: str) -> None:
        """Add the handler of the class named ``qualname`` (``"module.Class"``), registered as :meth:`register`
        does when a converted model first holds an instance of exactly that class: for a class of an optional
        library, which is never imported for it.

        Raises:
            RegistryError: the IR type is reserved (see :data:`RESERVED_TYPES`).
            DuplicateHandlerError: ``qualname`` already has a handler.
        """
        _check_type(nn.Module, type)
        if qualname in self._by_name:
            raise DuplicateHandlerError(f"{qualname} already has a handler (by name)", key=qualname)
        self._by_name[qualname] = (handler, type)

    def _named(self, cls: type) -> bool:
        """Register the name-registered handler of ``cls``, if it has one; True when it did."""
        found = self._by_name.get(f"{cls.__module__}.{cls.__qualname__}") if self._by_name else None
        if found is None or cls in self.handlers:
            return False
        self.register(cls, found[0], type=found[1])
        return True

    def register_override(
        self, cls: type[nn.Module], handler: Handler | None = None, *, type: str | None = None
    ) -> Any:
        """Replace the handler of a class that has one (and optionally its IR type)."""
        self._check_class(cls)
        if type is not None:
            _check_type(cls, type)

        def add(fn: Handler) -> Handler:
            self.handlers.register_override(cls, fn)
            if type is not None:
                self._types[cls] = type
            return fn

        return add if handler is None else add(handler)

    @staticmethod
    def _check_class(cls: Any) -> None:
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise TypeError(f"handlers are keyed by nn.Module subclasses, got {cls!r}")

    def has_handler(self, module: nn.Module) -> bool:
        """True when ``type(module)`` (exactly) has a handler."""
        return type(module) in self.handlers or self._named(type(module))

    def type_of(self, cls: type[nn.Module]) -> str:
        """The IR type string of a handled class."""
        return self._types[cls]

    def types(self) -> Mapping[type, str]:
        """``{module class: IR type}`` of every registered handler."""
        return dict(self._types)

    def named_types(self) -> Mapping[str, str]:
        """``{qualified class name: IR type}`` of every handler registered by name (:meth:`register_by_name`)."""
        return {name: itype for name, (_, itype) in self._by_name.items()}

    def attributes(self, module: nn.Module) -> dict[str, Any]:
        """Run the handler of ``type(module)``."""
        return self.handlers.get(type(module))(module)

    def convert(
        self,
        model: nn.Module,
        args: tuple | Any,
        kwargs: Mapping[str, Any] | None = None,
        *,
        strict: bool = False,
        dynamic_shapes: Any = None,
        allow: Iterable[str] | None = None,
        trace_once: bool | Collection[str] = True,
        opaque: str | Collection[type | str] | None = None,
    ) -> IR:
        """Convert ``model`` called as ``model(*args, **kwargs)`` into the module-level IR.

        Works on models and inputs on the ``meta`` device (no weight is allocated). ``allow``: operators
        of other namespaces to accept besides this converter's allow-list (``"transformers::*"``). ``trace_once``
        (on by default): trace each group of alike blocks once and make the others instances of it
        (:mod:`torch2ir.trace_once.trace`; blocks differing only in an index such as ``layer_idx`` are grouped with the
        index watched, :mod:`torch2ir.trace_once.watch`; a group whose blocks do not behave alike is traced in
        full, listed in ``ir.capture.trace_once_fallbacks``); ``ir.lower()`` copies the traced block's ops for
        every instance. ``False`` traces every block; a collection of attribute names allows those to differ
        between alike blocks unwatched (the caller vouches that they do not change the computation). Ignored
        with ``strict=True``.

        ``opaque`` (opt-in, see ``docs/opaque.md``): ``"auto"`` keeps each smallest module whose trace makes the
        export fail as an *opaque leaf* (a node of type ``"opaque"`` run by the module's own forward when rebuilt;
        every instance of its class), one class at a time while the export fails, and then the class of each
        module whose own code calls a custom ``torch.autograd.Function`` (a straight-through estimator: export
        records its forward only), so that a rebuild trains as the original; a list of ``nn.Module`` classes (or
        their qualified names) keeps every instance of those, and with ``"auto"`` in it does both (``["auto",
        TensorNorm]``). ``ir.capture.opaque`` lists
        ``(path, qualified class, why)``; ``ir.lower()`` refuses such an IR; ``trace_once`` is off with it.

        Raises:
            ConversionError: torch.export failed, or the model has constructs the IR cannot
                hold; every construct found is listed, with its module path (operators outside the
                allow-list are listed with the ``allow=`` to pass).
        """
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, not {type(model).__name__}")
        args = args if isinstance(args, tuple) else (args,)
        with collector_paused():  # building the IR allocates much and frees nothing (see common.collector)
            return build_ir(self, model, args, kwargs, strict=strict, dynamic_shapes=dynamic_shapes,
                            allowlist=self.allowlist.extended(allow), trace_once=trace_once, opaque=opaque)

    def lower(
        self,
        target: nn.Module | IR,
        args: tuple | Any = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        decompose: bool | Mapping[Any, Any] = False,
        dynamic_shapes: Any = None,
        allow: Iterable[str] | None = None,
    ) -> FlatIR:
        """The ATen-level :class:`~common.flat.FlatIR` of an IR this converter produced (from its capture, no
        second export) or of a model (converted with this converter's handlers and lowered from the one export);
        see :func:`torch2ir.lowering.capture.lower`. The ops must be on this converter's allow-list or in ``allow``.

        Raises:
            IRError: as :func:`torch2ir.lowering.capture.lower`.
        """
        from torch2ir.lowering.capture import lower

        if isinstance(target, IR):
            return lower(target, args, kwargs, decompose=decompose, dynamic_shapes=dynamic_shapes, allow=allow)
        return lower(target, args, kwargs, decompose=decompose, dynamic_shapes=dynamic_shapes, allow=allow,
                     allowlist=self.allowlist, converter=self)

    def copy(self) -> Torch2Ir:
        new = type(self)()
        new.handlers = self.handlers.copy()
        new._types = dict(self._types)
        new._by_name = dict(self._by_name)
        new.allowlist = self.allowlist.copy()
        return new


_DEFAULTS: list[Torch2Ir] = []  # the converter with the default handlers, built on first use and only copied


def get_default_converter() -> Torch2Ir:
    """A fresh converter with every default handler (registering on it changes only it)."""
    if not _DEFAULTS:
        from torch2ir.handlers import register_defaults

        converter = Torch2Ir()
        register_defaults(converter)
        _DEFAULTS.append(converter)
    return _DEFAULTS[0].copy()


def convert(
    model: nn.Module,
    args: tuple | Any,
    kwargs: Mapping[str, Any] | None = None,
    *,
    strict: bool = False,
    dynamic_shapes: Any = None,
    allow: Iterable[str] | None = None,
    trace_once: bool | Collection[str] = True,
    opaque: str | Collection[type | str] | None = None,
) -> IR:
    """Convert ``model`` with a default converter (see :meth:`Torch2Ir.convert`)."""
    return get_default_converter().convert(model, args, kwargs, strict=strict, dynamic_shapes=dynamic_shapes,
                                           allow=allow, trace_once=trace_once, opaque=opaque)
