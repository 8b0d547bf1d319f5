"""Modules that compute in their methods, not in ``forward``: ``FloatFunctional`` and ``FXFloatFunctional``.

Eager quantization keeps an addition or a concatenation that must be quantized in a module of its own
(``self.skip_add = FloatFunctional()`` ... ``self.skip_add.add(x, y)``), so that ``prepare`` can give it an
observer (its child ``activation_post_process``) and ``torch.ao.quantization.convert`` can swap it for a
``QFunctional`` computing in int8. Their ``forward`` raises; every call goes through a method.

An IR carries such a module as a handled leaf of the type below (its observer a child implementation, as
every leaf's), and each call of it as a call node with a ``method`` field naming which method the call runs,
one of :data:`METHODS`. The rebuilt parent calls that method on whatever module is there at run time (the
``FloatFunctional`` it rebuilt, or the ``QFunctional`` ``convert`` put in its place), through the function of
:data:`METHODS` the name selects: the name is looked up, never written into code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: IR type of each class (``torch.ao.nn.quantized``'s), by class name; nothing is imported here.
TYPES: dict[str, str] = {"FloatFunctional": "float_functional", "FXFloatFunctional": "fx_float_functional"}


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

__all__ = ["METHODS", "TYPES"]
