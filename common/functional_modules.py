"""Modules that compute in their methods, not in ``forward``: ``FloatFunctional`` and ``FXFloatFunctional``.

Eager quantization keeps an addition or a concatenation that must be quantized in a module of its own
(``self.skip_add = FloatFunctional()`` ... ``self.skip_add.add(x, y)``), so that ``prepare`` can give it an
observer (its child ``activation_post_process``) and ``torch.ao.quantization.convert`` can swap it for a
``QFunctional`` computing in int8. Their ``forward`` raises; every call goes through a method.

An int8 model (after ``convert``) holds ``QFunctional``s, which compute in their methods too and are carried
the same way. An IR carries such a module as a handled leaf of the type below (its observer a child implementation, as
every leaf's), and each call of it as a call node with a ``method`` field naming which method the call runs,
one of :data:`METHODS`. The rebuilt parent calls that method on whatever module is there at run time (the
``FloatFunctional`` it rebuilt, or the ``QFunctional`` ``convert`` put in its place), through the function of
:data:`METHODS` the name selects: the name is looked up, never written into code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from .errors import IRValidationError

#: IR type of each class (``torch.ao.nn.quantized``'s), by class name; nothing is imported here.
TYPES: dict[str, str] = {"FloatFunctional": "float_functional", "FXFloatFunctional": "fx_float_functional",
                         "QFunctional": "int8_qfunctional"}


def _method(name: str) -> Callable[..., Any]:
    def call(module: Any, *args: Any, **kwargs: Any) -> Any:
        method = getattr(type(module), name, None)
        if method is None:  # a replacement without the method (a user's override): its forward
            return module(*args, **kwargs)
        return getattr(module, name)(*args, **kwargs)

    call.__name__ = call.__qualname__ = f"functional_{name}"
    call.__doc__ = f"``module.{name}(*args, **kwargs)`` (``module(*args, **kwargs)`` for a module without it)."
    return call


#: The methods a call node may name, each with the function rebuilt code calls it through.
METHODS: dict[str, Callable[..., Any]] = {name: _method(name) for name in (
    "add", "add_scalar", "mul", "mul_scalar", "cat", "add_relu", "matmul")}

def method_of(attrs: Mapping[str, Any], ntype: str, implementation: str, node: str) -> Callable[..., Any] | None:
    """The function a call node of type ``ntype`` runs its callee through (its ``method``, looked up in
    :data:`METHODS`), or ``None`` for a call of any other module, which names no method.

    Raises:
        IRValidationError: a call of a :data:`TYPES` module without one of :data:`METHODS`, or another call with a
            ``method``.
    """
    method = attrs.get("method")
    if ntype in TYPES.values():
        found = METHODS.get(method) if type(method) is str else None
        if found is None:
            raise IRValidationError(
                f"node calls a {ntype!r} module with method {method!r}", implementation=implementation, node=node,
                hint=f"'method' names what the call runs, one of {', '.join(METHODS)}")
        return found
    if "method" in attrs:
        raise IRValidationError(f"node calls a {ntype!r} module and names a method", implementation=implementation,
                                node=node, hint=f"only calls of {', '.join(TYPES.values())} modules name a 'method'")
    return None


__all__ = ["METHODS", "TYPES", "method_of"]
