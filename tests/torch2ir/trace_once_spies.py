"""Spies on a conversion that traces alike blocks once: the instances it made, the exports it ran."""

from __future__ import annotations

import pytest

from torch2ir import build


def instances(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, str]]:
    """The ``{instance key: traced key}`` of every conversion from now on (an empty list: none stood in)."""
    made: list[dict[str, str]] = []
    original = build.instantiate

    def spy(*args: object, **kwargs: object) -> dict[str, str]:
        made.append(original(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(build, "instantiate", spy)
    return made


def exports(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The model of every ``torch.export`` a conversion runs from now on."""
    calls: list[object] = []
    original = build.export

    def spy(*args: object, **kwargs: object) -> object:
        calls.append(args[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(build, "export", spy)
    return calls
