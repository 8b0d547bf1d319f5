"""Default builders of ir2torch, one module per op family.

``register_defaults(converter)`` registers them explicitly; importing this package has
no side effect on any converter.
"""

from __future__ import annotations

from typing import Any


def register_defaults(converter: Any) -> None:
    """Register every default builder on ``converter`` (an ``Ir2Torch``)."""
    return None
