"""Shared checks of the hostile-file tests: a rebuild refused with an ``IRError`` that imported nothing new."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import ir2torch
from common.errors import IRError

#: A module no file may make the rebuild import (``import this`` prints the Zen of Python): planted as a name.
NEVER = "this"
#: Prefixes of the modules a refused rebuild may still import (the library and torch's own lazy imports).
_OWN = ("torch", "ir2torch", "common", "encodings")


def refused(path: Path, state: dict, allow: list[str]) -> IRError:
    """The ``IRError`` of ``ir2torch.convert(path, state, allow=allow)``; fails when it imported :data:`NEVER` or
    any other module outside the library and torch."""
    before = set(sys.modules)
    with pytest.raises(IRError) as info:
        ir2torch.convert(path, state, allow=allow)
    assert NEVER not in sys.modules
    assert not {m for m in set(sys.modules) - before if not m.startswith(_OWN)}
    return info.value
