"""Which tests run together in one pytest-xdist worker (``make test`` passes ``--dist loadgroup``).

Some tests share work made once per process: a corpus architecture's eval-mode conversion (``tests/real``, see
``tests/real/shared.py``) and the quantized models of ``tests/quant/test_pt2e.py``. They only save that work
when they run in the same worker, so the scheduler hands each such group to one worker as a unit; every other
test is its own unit, handed out one at a time to whichever worker is free.

pytest-xdist's own ``xdist_group`` marks do not take effect with this pytest (its workers rename the tests'
node ids, which pytest 9 no longer lets them do), so the groups are read from the node ids here.
"""

from __future__ import annotations

import re

from xdist.scheduler import LoadGroupScheduling

#: node id -> group name (the ``group`` match); a node id that matches none is a group of its own.
GROUPS = (
    re.compile(r"^tests/real/test_(?:corpus|lower_corpus|swaps|gradients)\.py::test_\w+\[(?P<group>[^\]]+)\]$"),
    re.compile(r"^(?P<group>tests/quant/test_pt2e\.py)::"),
)


def group_of(nodeid: str) -> str | None:
    """The group ``nodeid`` belongs to, or ``None``."""
    for pattern in GROUPS:
        match = pattern.match(nodeid)
        if match is not None:
            return f"group:{match.group('group')}"
    return None


class GroupScheduling(LoadGroupScheduling):
    """``--dist loadgroup`` with the groups of :data:`GROUPS` (and any ``@group`` suffix xdist adds)."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid) or super()._split_scope(nodeid)
