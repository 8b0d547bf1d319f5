"""The long op-level fuzz of the default operator surface (issue 50): ``python scripts/op_fuzz.py --per-op 500``.

Runs ``tests/security/op_fuzz_child.py`` as ``tests/security/test_op_fuzz.py`` does (its own folder, a 12 GiB
address-space limit, a watched folder no document may write into), with ``--per-op`` documents starting with each
operator of the default surface (:mod:`common.surface`), in ``--shards`` child processes one after another (each
with its own hypothesis seed, so a crash loses one shard, not the run), and prints the figures: operators,
documents, cases per operator, outcomes, seconds, and every finding (a signal or a hang with the document that
was running, an exception that is not an ``IRError``, a changed process-wide state, a file written).
Exit status 1 when there is a finding.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADDRESS_SPACE = 12 * 2**30


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def shard(per_op: int, folder: Path) -> dict:
    """One child run of ``per_op`` documents per operator; its summary, with ``finding`` when it ended badly."""
    watched, work, tools = folder / "watched", folder / "work", folder / "tools"
    for path in (watched, work, tools):
        path.mkdir(parents=True)
    out = folder / "summary.json"
    env = {**os.environ, "HOME": str(work), "TMPDIR": str(tools), "PYTHONPATH": str(ROOT),
           "HYPOTHESIS_STORAGE_DIRECTORY": str(tools / ".hypothesis")}
    proc = subprocess.run([sys.executable, "-m", "tests.security.op_fuzz_child", str(out), "0", str(watched), "0",
                           str(per_op)], cwd=work, env=env, capture_output=True, text=True, preexec_fn=_limit)
    summary = json.loads(out.read_text()) if out.exists() else {"examples": 0, "outcomes": {}, "failures": [],
                                                                 "state_changes": []}
    if proc.returncode != 0:
        current = Path(f"{out}.current")
        summary["finding"] = {"returncode": proc.returncode, "stderr": proc.stderr[-2000:],
                              "doc": current.read_text()[:4000] if current.exists() else None}
    written = [str(p) for p in (*watched.iterdir(), *work.iterdir())]
    if written:
        summary["written"] = written
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-op", type=int, default=500, help="documents starting with each operator, in all")
    parser.add_argument("--shards", type=int, default=10, help="child processes the documents are split over")
    parser.add_argument("--ops", help="only documents starting with these overloads (comma-separated, e.g. the "
                                      "ones a change adds to the surface)")
    options = parser.parse_args(argv)
    if options.ops:
        os.environ["OP_FUZZ_ONLY"] = options.ops
    per_shard = max(1, options.per_op // options.shards)
    started = time.perf_counter()
    outcomes: Counter = Counter()
    findings: list = []
    examples = ops = 0
    with tempfile.TemporaryDirectory(prefix="op-fuzz-") as tmp:
        for index in range(options.shards):
            summary = shard(per_shard, Path(tmp) / f"shard{index}")
            examples += summary["examples"]
            ops = summary.get("ops", ops)
            outcomes.update(summary["outcomes"])
            findings += summary["failures"] + summary["state_changes"]
            findings += [summary[k] for k in ("finding", "written") if k in summary]
            print(f"shard {index}: {summary['examples']} documents, {summary.get('seconds', '?')} s, "
                  f"{len(findings)} findings so far", flush=True)
    seconds = time.perf_counter() - started
    print(json.dumps({"ops": ops, "documents": examples, "cases_per_op": per_shard * options.shards,
                      "seconds": round(seconds), "outcomes": dict(outcomes), "findings": findings[:20]}, indent=1))
    return int(bool(findings))


if __name__ == "__main__":
    sys.exit(main())
