"""The long op-level fuzz of the default operator surface (issue 50): ``python scripts/op_fuzz.py --per-op 500``.

Runs ``tests/security/op_fuzz_child.py`` as ``tests/security/test_op_fuzz.py`` does (its own folder, a 12 GiB
address-space limit, a watched folder no document may write into), with ``--per-op`` documents starting with each
operator of the default surface (:mod:`common.surface`), in ``--shards`` child processes one after another (each
with its own hypothesis seed, so a crash loses one shard, not the run), and prints the figures: operators,
documents, cases per operator, outcomes, seconds, and every finding (a signal or a hang with the document that
was running, an exception that is not an ``IRError``, a changed process-wide state, a file written).
Exit status 1 when there is a finding. Each run adds a row to ``benchmarks/results-op-fuzz.md`` (``--output``; the
earlier runs are kept: the file is the log of the long runs, which the docs quote).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADDRESS_SPACE = 12 * 2**30
#: the columns of ``benchmarks/results-op-fuzz.md``: one row per run
COLUMNS = ["run", "when and where", "command", "operators", "documents per operator", "documents", "seconds",
           "findings", "ran", "ExecutionError", "ArgumentMismatchError", "UnsafeTargetError", "ResourceBudgetError",
           "other IRErrors"]
_NAMED = COLUMNS[9:13]


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
    parser.add_argument("--label", help="the run's name in the results file (default: its operators and count)")
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results-op-fuzz.md"),
                        help="results file the run adds a row to (default benchmarks/results-op-fuzz.md; '-' prints "
                             "only)")
    options = parser.parse_args(argv)
    load = os.getloadavg()[0]
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
    _record(options, sys.argv[1:] if argv is None else argv, load, ops, per_shard * options.shards, examples,
            round(seconds), len(findings), outcomes)
    return int(bool(findings))


def _record(options: argparse.Namespace, argv: list[str], load: float, ops: int, per_op: int, documents: int,
            seconds: int, findings: int, outcomes: Counter) -> None:
    """Add the run's row to the results file (``--output``)."""
    sys.path.insert(0, str(ROOT))
    from benchmarks import results_file

    named = [outcomes.get(name, 0) for name in _NAMED]
    other = sum(n for k, n in outcomes.items() if k not in (*_NAMED, "ok", "not-an-IRError"))
    label = options.label or (f"{ops} operator{'s' * (ops != 1)}"
                              + (f" ({options.ops})" if options.ops else " of the surface"))
    row = [label, results_file.machine(load), "`" + " ".join(["python scripts/op_fuzz.py",
                                                             *map(shlex.quote, argv)]) + "`",
           *map(str, (ops, per_op, documents, seconds, findings, outcomes.get("ok", 0), *named, other))]
    intro = ("One row per run of `python scripts/op_fuzz.py` (the long op-level fuzz, issue 50), each added by the "
             "script; outcomes count the documents by how their load, rebuild and call ended.")
    results_file.append_row(options.output, "The long op-level fuzz of the default operator surface", intro,
                            COLUMNS, row)


if __name__ == "__main__":
    sys.exit(main())
