"""Op-level fuzzing: documents built from *allowed* operators with hostile arguments, run as a user would.

A child process (``tests/security/op_fuzz_child.py``) draws FlatIR documents of one to three operators the
default allow-list accepts (the default surface, :mod:`common.surface`; :data:`PER_OP` documents start with each of
them, then more start anywhere), with arguments built from each operator's schema (negative, zero and huge sizes,
out-of-range indices and dims, odd strides, mixed dtypes, empty tensors, NaN and infinite floats, paths into a
watched folder), and runs each through save, load, rebuild and one call, under an address-space limit, in a
folder of its own. The parent checks that the child ended normally (no signal: no segfault, no abort; no example
running longer than the child's ``EXAMPLE_SECONDS``, which ends it with status 1), that no
file appeared in the watched folder or the child's working folder, that every outcome was a result or an
``IRError``, and that no process-wide state changed (grad mode, default dtype, thread count, inference and
deterministic modes, the working folder, and the default generator's state wherever no operator of the document
draws random numbers). ``HYPOTHESIS_PROFILE=long`` runs ten times as many examples; ``scripts/op_fuzz.py`` is
the long run (hundreds of cases per operator).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]
#: Address space of the child: room for torch and the budget's largest allowed call, far below a runaway.
ADDRESS_SPACE = 12 * 2**30
#: Documents starting with each operator of the default surface (x10 under ``HYPOTHESIS_PROFILE=long``).
PER_OP = 3


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.slow
@pytest.mark.xdist_group("op_fuzz")
def test_allowed_ops_with_hostile_arguments_give_only_ir_errors(tmp_path: Path) -> None:
    watched, work, out = tmp_path / "watched", tmp_path / "work", tmp_path / "summary.json"
    watched.mkdir()
    work.mkdir()
    count, per_op = examples(50), examples(PER_OP)
    derandomize = "1" if os.environ.get("HYPOTHESIS_PROFILE", "default") == "ci" else "0"
    tools = tmp_path / "tools"  # hypothesis' storage and torch's temporary files: not what a document writes
    tools.mkdir()
    env = {**os.environ, "HOME": str(work), "TMPDIR": str(tools), "PYTHONPATH": str(ROOT),
           "HYPOTHESIS_STORAGE_DIRECTORY": str(tools / ".hypothesis")}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.security.op_fuzz_child", str(out), str(count), str(watched), derandomize,
         str(per_op)], cwd=work, env=env, capture_output=True, text=True, timeout=max(3600, count), preexec_fn=_limit)
    current = Path(f"{out}.current")
    assert proc.returncode == 0, (f"the child ended with {proc.returncode} (a negative code is a signal, 1 with "
                                  "'Timeout' on stderr an example that ran too long) running "
                                  f"{current.read_text() if current.exists() else '?'}\n{proc.stderr[-3000:]}")
    summary = json.loads(out.read_text())
    print(f"op fuzz: {summary['examples']} examples over {summary['ops']} allowed ops in {summary['seconds']} s: "
          f"{summary['outcomes']}")
    from tests.security.op_fuzz_child import _allowed_ops

    assert summary["ops"] == len(_allowed_ops()) > 200  # the default surface's operators (but aten.to.device)
    assert summary["examples"] >= count + per_op * summary["ops"]
    assert summary["cases_per_op_min"] >= per_op
    assert summary["failures"] == [], json.dumps(summary["failures"][:5], indent=1)
    assert summary["state_changes"] == [], json.dumps(summary["state_changes"][:5], indent=1)
    assert list(watched.iterdir()) == []
    assert sorted(p.name for p in work.iterdir()) == []
    assert sum(n for k, n in summary["outcomes"].items() if k != "ok") > 0  # hostile arguments were refused
