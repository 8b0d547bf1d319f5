"""Default torch2ir handlers, one module per op family.

``register_defaults(converter)`` registers them explicitly; importing has no side effect.
"""

from __future__ import annotations

from typing import Any


def register_defaults(converter: Any) -> None:
    """Register every default handler on ``converter`` (a ``Torch2Ir``)."""
    return None
