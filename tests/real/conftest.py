"""The tests of one corpus architecture run one after the other.

They share the architecture's eval-mode conversion (see ``shared.py``): the tests of this folder that take an
``arch`` are ordered by architecture (corpus order, stable otherwise). Under ``make test`` they also run in one
xdist worker (see ``tests/scheduling.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _arch_name(item: pytest.Item) -> str | None:
    callspec = getattr(item, "callspec", None)
    arch = callspec.params.get("arch") if callspec is not None else None
    return getattr(arch, "name", None)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Group this folder's per-architecture tests by architecture, in the slots they already occupy."""
    slots = [i for i, item in enumerate(items) if HERE in Path(item.path).parents and _arch_name(item)]
    order: dict[str, int] = {}
    for i in slots:
        order.setdefault(_arch_name(items[i]), len(order))
    grouped = sorted((items[i] for i in slots), key=lambda item: order[_arch_name(item)])  # stable
    for i, item in zip(slots, grouped, strict=True):
        items[i] = item
