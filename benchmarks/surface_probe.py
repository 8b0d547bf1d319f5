"""The operators a registry sweep's models need beyond the default surface, measured (issue 50).

Usage::

    python -m benchmarks.sweep --zoo transformers --limit 0 --rows tf.jsonl       # the sweep, rows kept
    python -m benchmarks.surface_probe tf.jsonl --rows probe.jsonl                  # each surface refusal again
    python -m benchmarks.surface_probe --merge probe.jsonl ... --write            # the measured table

A model the sweep refused with an ``OperatorSurfaceError`` is built again (the same builder and input), converted,
and every ATen overload outside the default surface the refusal names is recorded; then the model is converted and
rebuilt with exactly those opted in, and compared with eager (and, where it differs, with ``torch.export``'s own
module, as the sweep does). ``--write`` keeps, for every such overload whose
model came out exact, the models that need it in ``tests/security/surface_sweeps.json``: the measured part of the
default surface (``python -m tests.security.op_corpus --write-surface`` adds it to ``common/default_ops.txt``, for
the overloads whose operator class is allowed; a reviewer reads the diff). Each model runs under a time limit in
this one process; rows are appended as they come.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import warnings
from pathlib import Path
from typing import Any

SWEEPS_TABLE = Path(__file__).resolve().parent.parent / "tests" / "security" / "surface_sweeps.json"
_LIST = re.compile(r"common/default_ops\.txt\): ([^\n]*)")


def refused_for_surface(rows: list[dict[str, Any]]) -> list[str]:
    """The names of the sweep rows refused for operators outside the default surface."""
    return [r["name"] for r in rows if "outside the default operator surface" in r.get("status", "")]


def probe(zoo: str, name: str, size: int, seconds: int) -> dict[str, Any]:
    """One model: the overloads outside the surface its conversion names, and its result with them allowed."""
    import torch

    import ir2torch
    import torch2ir
    from benchmarks.sweep import _export_agrees
    from benchmarks.sweep_compare import max_diff
    from benchmarks.sweep_registries import build
    from common.surface import opt_in

    def out_of_time(*_: Any) -> None:
        raise TimeoutError(f"over {seconds} s")

    row: dict[str, Any] = {"zoo": zoo, "model": name}
    previous = signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(seconds)
    try:
        torch.manual_seed(0)
        model, args, kwargs = build(zoo, name, size)
        model.eval()
        torch.manual_seed(0)
        with torch.no_grad():
            expected = model(*args, **kwargs)
        try:
            torch2ir.convert(model, args, kwargs)
            row["ops"] = []
        except Exception as error:  # noqa: BLE001 - the refusal's text is what is measured
            found = _LIST.search(str(error))
            row["ops"] = [o.strip() for o in found.group(1).split(",")] if found else []
            if not found:
                row["error"] = f"{type(error).__name__}: {str(error)[:200]}"
                return row
        allow = [opt_in(o) for o in row["ops"]]
        ir = torch2ir.convert(model, args, kwargs, allow=allow)
        rebuilt = ir2torch.convert(ir, model.state_dict(), allow=allow)
        torch.manual_seed(0)
        with torch.no_grad():
            got = rebuilt(*args, **kwargs)
        row["diff"] = max_diff(got, expected)
        if row["diff"] != 0:  # as the sweep: does the rebuild equal torch.export's own module exactly?
            row["export_differs"] = _export_agrees(model, args, kwargs, got)
    except BaseException as error:
        if isinstance(error, KeyboardInterrupt):
            raise
        row["error"] = f"{type(error).__name__}: {str(error)[:200]}"
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return row


def measured(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """``overload -> ["<zoo> <model>", ...]`` for the models that came out exact with their overloads allowed (or
    equal to ``torch.export``'s own module, the sweep's "export differs")."""
    out: dict[str, set[str]] = {}
    for row in rows:
        if (row.get("diff") == 0 or row.get("export_differs")) and "error" not in row:
            for op in row.get("ops", []):
                out.setdefault(op, set()).add(f"{row['zoo']} {row['model']}")
    return {op: sorted(models) for op, models in sorted(out.items())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweep_rows", nargs="?", help="a sweep's --rows file")
    parser.add_argument("--zoo", default="transformers")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--timeout", type=int, default=180, help="seconds per model")
    parser.add_argument("--rows", help="append the probe's rows to this file")
    parser.add_argument("--merge", nargs="*", default=[], help="probe rows files to merge into the table")
    parser.add_argument("--write", action="store_true", help=f"write {SWEEPS_TABLE.name}")
    options = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    rows: list[dict[str, Any]] = [json.loads(line) for path in options.merge for line in
                                  Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if options.sweep_rows:
        sweep = [json.loads(line) for line in Path(options.sweep_rows).read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        for name in refused_for_surface(sweep):
            row = probe(options.zoo, name, options.size, options.timeout)
            print(json.dumps(row), flush=True)
            rows.append(row)
            if options.rows:
                with open(options.rows, "a", encoding="utf-8") as out:
                    out.write(json.dumps(row) + "\n")
    table = measured(rows)
    counted = [r for r in rows if (r.get("diff") == 0 or r.get("export_differs")) and "error" not in r]
    print(f"{len(table)} overloads needed by {len(counted)} models exact (or equal to torch.export's module) with "
          f"them allowed; {len(rows) - len(counted)} rows not counted (differ or fail)")
    if options.write:
        SWEEPS_TABLE.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
