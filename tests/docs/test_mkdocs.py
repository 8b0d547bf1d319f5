"""The documentation site builds with ``mkdocs build --strict`` (a link out of ``docs/`` or to a missing page fails)."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.cli.helpers import REPO, explain, run

MKDOCS = Path(sys.executable).parent / "mkdocs"  # the docs extra, pinned in constraints.txt


def test_mkdocs_build_strict(tmp_path):
    result = run([str(MKDOCS), "build", "--strict", "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")])
    assert result.returncode == 0, explain(result)
    page = (tmp_path / "site" / "performance" / "index.html").read_text(encoding="utf-8")
    assert "benchmarks/run.py" in page and 'href="../benchmarks' not in page


def test_mkdocs_strict_refuses_a_link_out_of_docs(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\nsee [the runner](../benchmarks/run.py)\n")
    (tmp_path / "mkdocs.yml").write_text("site_name: x\ndocs_dir: docs\n")
    result = run([str(MKDOCS), "build", "--strict", "-d", str(tmp_path / "site")], cwd=tmp_path)
    assert result.returncode == 1 and "../benchmarks/run.py" in result.stderr, explain(result)
