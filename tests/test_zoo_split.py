"""The ``zoo`` split of the suite (``tests/conftest.py``): every entry of ``ZOO`` names a test file, folder or test
that exists, so a rename cannot move a long test into ``make test`` or drop it from ``make test-zoo`` unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ZOO

ROOT = Path(__file__).resolve().parent.parent


def test_every_zoo_entry_names_an_existing_test() -> None:
    for entry in ZOO:
        path, _, name = entry.partition("::")
        target = ROOT / path
        if path.endswith("/"):
            assert target.is_dir(), entry
            continue
        assert target.is_file(), entry
        if name:
            assert re.search(rf"^def {re.escape(name)}\(", target.read_text(), re.M), entry


def test_the_makefile_runs_both_halves_and_ci_runs_both_targets_then_the_newest_releases() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert '-m "not zoo"' in makefile and "-m zoo" in makefile and "scripts/newest_site.py" in makefile
    ci = (ROOT / ".ci" / "run").read_text().split()
    assert ci[-6:] == ["make", "test", "make", "test-zoo", "make", "test-newest"]
