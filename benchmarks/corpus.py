"""Rebuilt forward vs eager over the whole real corpus (issue #19).

Usage::

    python -m benchmarks.corpus                      # every model of tests/real, batch 1 and 8 (~15 min on 2 cores)
    python -m benchmarks.corpus --models llama,resnet --rounds 3 --output /tmp/c.md

For every :class:`tests.real.corpus.Arch` of ``CORPUS`` (MoE ones with their ``allow`` opt-ins, as in
``tests/real/test_corpus.py``): the model is built, converted with ``torch2ir`` and rebuilt with
``ir2torch.convert`` (input guards ON, the default) once per batch size, then eager and rebuilt are timed
interleaved (single thread, ``torch.no_grad()``, warm-up, a few rounds of calibrated call counts; see
:mod:`benchmarks.measure`). Batch 1 takes ``x[:1]`` of every tensor input, batch 8 repeats it along dim 0;
when eager refuses the resized inputs, the row uses the Arch's inputs as given (and says so). A deep copy of the
eager model, made after the rebuild, is timed in the same rounds as a control (``copy / eager``: identical code,
so its spread is the noise floor of a row; ``--no-control`` leaves it out). Models run
in groups, each group in a fresh child process. A model that fails anywhere is a row with its error: nothing
is left out. The report (median, p90, max, worst five of rebuilt / eager) goes to
``benchmarks/results-corpus.md`` (and ``.json``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.measure import ROOT, run_child

#: Models per child process: one interpreter start-up per group, a fresh process for every group.
GROUP = 6


def _resize(value: Any, batch: int) -> Any:
    """``value`` with every tensor leaf cut or repeated to ``batch`` along dim 0."""
    import torch
    from torch.utils import _pytree as pytree

    def one(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        if x.dim() == 0:
            raise ValueError("a 0-d tensor input has no batch dim")
        base = x[:1]
        return base.repeat(batch, *([1] * (x.dim() - 1))) if batch > 1 else base.clone()

    return pytree.tree_map(one, value)


def _inputs(arch: Any, batch: int) -> tuple[tuple, dict, str]:
    """``(args, kwargs, note)`` of ``arch`` at ``batch``; falls back to the inputs as given (noted)."""
    import torch

    args, kwargs = arch.inputs()
    try:
        rargs, rkwargs = _resize((args, kwargs), batch)
        with torch.no_grad():
            arch.build().eval()(*rargs, **rkwargs)
        return rargs, rkwargs, ""
    except Exception as exc:  # noqa: BLE001 - any refusal means "no batch dim here"
        return args, kwargs, f"inputs as given (resizing dim 0 fails: {type(exc).__name__})"


def _load_baseline(checkout: str) -> Any:
    """``ir2torch`` of another checkout (e.g. a ``git worktree`` of an older commit), imported as ``ir2torch_base``
    (its modules import each other relatively), so old and new rebuilt models are timed in the same rounds."""
    import importlib.util

    if "ir2torch_base" in sys.modules:
        return sys.modules["ir2torch_base"]
    init = Path(checkout) / "ir2torch" / "__init__.py"
    spec = importlib.util.spec_from_file_location("ir2torch_base", init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["ir2torch_base"] = module
    spec.loader.exec_module(module)
    return module


def _measure(arch: Any, batch: int, rounds: int, baseline: str | None = None, control: bool = True) -> dict[str, Any]:
    from copy import deepcopy

    import torch

    from benchmarks.measure import calibrate, interleaved, paired_ratio
    from benchmarks.scenarios import max_abs_diff
    from tests.real.test_corpus import _converters

    args, kwargs, note = _inputs(arch, batch)
    model = arch.build().eval()
    conv = _converters(arch)
    ir = conv["converter"].convert(model, args, kwargs)
    rebuilt = conv["rebuilder"].convert(ir, model.state_dict()).eval()
    if "input_guard" not in (getattr(rebuilt, "meta", None) or {}):  # a torch.nn root is rebuilt as itself
        note = "; ".join(filter(None, [note, f"root rebuilt as {type(rebuilt).__name__} (no generated code, "
                                             "no guard)"]))
    calls = {"eager": lambda: model(*args, **kwargs), "rebuilt": lambda: rebuilt(*args, **kwargs)}
    if control:  # the same model again, allocated after the rebuild: what identical code reads as (the noise floor)
        copy = deepcopy(model)
        calls["copy"] = lambda: copy(*args, **kwargs)
    if baseline:
        old = _load_baseline(baseline).get_default_converter()
        for pattern in arch.allow:
            old.allowlist.allow(pattern)
        before = old.convert(ir, model.state_dict()).eval()
        calls["before"] = lambda: before(*args, **kwargs)
    with torch.no_grad():
        diff = max_abs_diff(model(*args, **kwargs), rebuilt(*args, **kwargs))
        number = calibrate(calls["eager"], target=0.01, limit=200)
        interleaved(calls, rounds=5, warmup=0, number=number)  # warm-up: about 50 ms of calls each
        series = interleaved(calls, rounds=rounds, warmup=0, number=number)
    extra = {"before_ms": series["before"].median * 1e3, "before_ratio": paired_ratio(series, "before", "eager")} \
        if baseline else {}
    if control:
        extra["copy_ratio"] = paired_ratio(series, "copy", "eager")
    return {"eager_ms": series["eager"].median * 1e3, "rebuilt_ms": series["rebuilt"].median * 1e3,
            "ratio": paired_ratio(series, "rebuilt", "eager"), "calls_per_sample": number,
            "max_abs_diff": diff, "note": note, **extra}


def task_corpus(names: list[str], batches: list[int], rounds: int, baseline: str | None = None,
                control: bool = True) -> dict[str, Any]:
    """Child task: one row per (model, batch) of ``names``; a failure is a row with ``error``."""
    import torch

    from benchmarks.scenarios import _error
    from tests.real.corpus import CORPUS

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    archs = {a.name: a for a in CORPUS}
    rows = []
    for name in names:
        for batch in batches:
            start = time.perf_counter()
            try:
                row = _measure(archs[name], batch, rounds, baseline, control)
            except Exception as exc:  # noqa: BLE001 - reported as a row, never dropped
                row = {"error": _error(exc)}
            rows.append({"model": name, "batch": batch, "wall_s": time.perf_counter() - start, **row})
            print(f"    {name} b{batch}: {row.get('ratio', row.get('error'))}", file=sys.stderr, flush=True)
    return {"rows": rows}


def _quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (``q`` in 0..1)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def summary(rows: list[dict[str, Any]], key: str = "ratio") -> dict[str, Any]:
    """Median, p90, max of ``key`` (rebuilt / eager) over the rows that ran, and the worst five."""
    ok = [r for r in rows if key in r]
    ratios = [r[key] for r in ok]
    worst = sorted(ok, key=lambda r: r[key], reverse=True)[:5]
    return {"rows": len(rows), "ran": len(ok), "failed": len(rows) - len(ok),
            "median": statistics.median(ratios) if ratios else None,
            "p90": _quantile(ratios, 0.9) if ratios else None, "max": max(ratios) if ratios else None,
            "worst": [(r["model"], r["batch"], r[key]) for r in worst]}


def _distribution(label: str, s: dict[str, Any], target: bool = True) -> list[str]:
    if s["median"] is None:
        return [f"| {label} | - | - | - | - | no row ran |"]
    met = ("met" if s["median"] <= 1.0 and s["max"] <= 1.05 else "missed") if target else "-"
    worst = ", ".join(f"{m} b{b} {r:.3f}x" for m, b, r in s["worst"])
    return [f"| {label} | {s['median']:.3f}x | {s['p90']:.3f}x | {s['max']:.3f}x | {met} | {worst} |"]


def render(rows: list[dict[str, Any]], machine: list[str], pending: Sequence[str] = ()) -> str:
    """The Markdown report: the distribution (before / after when a baseline ran), then one line per row."""
    s = summary(rows)
    before = any("before_ratio" in r for r in rows)
    control = any("copy_ratio" in r for r in rows)
    out = ["# Rebuilt forward vs eager over the real corpus (issue #19)", "", *machine, "",
           f"{s['ran']} of {s['rows']} (model, batch) rows ran ({s['failed']} failed, listed below)."]
    if pending:
        out.append(f"Not measured (the run stopped before reaching them): {', '.join(pending)}.")
    out += ["", "| rebuilt / eager | median | p90 | max | target (median <= 1.0x, max <= 1.05x) | worst five |",
            "|---|---|---|---|---|---|"]
    if before:
        out += _distribution("before (baseline checkout)", summary(rows, "before_ratio"))
    out += _distribution("after (this checkout)" if before else "all rows", s)
    if control:
        out += _distribution("control: copy / eager (a deep copy of the eager model, timed in the same rounds)",
                             summary(rows, "copy_ratio"), target=False)
        out += ["", "The control row times identical code: a deep copy of the eager model made after the rebuild. "
                "Its spread is what placement in memory alone does to a row."]
    out += ["", "| model | batch | eager ms | rebuilt ms | rebuilt / eager |" + (" before / eager |" if before else "")
            + (" copy / eager |" if control else "") + " max abs diff | note |",
            "|---|---|---|---|---|---|" + ("---|" if before else "") + ("---|" if control else "") + "---|"]
    for r in sorted(rows, key=lambda r: (r["model"], r["batch"])):
        if "error" in r:
            out.append(f"| {r['model']} | {r['batch']} | - | - | failed |" + (" - |" if before else "")
                       + (" - |" if control else "") + f" - | {r['error']} |")
            continue
        diff = "-" if r["max_abs_diff"] is None else f"{r['max_abs_diff']:.1e}"
        old = f" {r['before_ratio']:.3f}x |" if "before_ratio" in r else (" - |" if before else "")
        ctl = f" {r['copy_ratio']:.3f}x |" if "copy_ratio" in r else (" - |" if control else "")
        out.append(f"| {r['model']} | {r['batch']} | {r['eager_ms']:.3f} | {r['rebuilt_ms']:.3f} | {r['ratio']:.3f}x "
                   f"|{old}{ctl} {diff} | {r['note']} |")
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    from benchmarks import results_file
    from benchmarks.run import machine_lines, write_atomic

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated corpus names (default: all)")
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--no-control", action="store_true", help="do not time a deep copy of the eager model "
                        "(the control row: identical code, placed in memory after the rebuild)")
    parser.add_argument("--group", type=int, default=GROUP, help="models per child process")
    parser.add_argument("--baseline", type=Path, help="a checkout (e.g. `git worktree add /tmp/base <commit>`) whose "
                        "ir2torch is timed too, in the same rounds: before / after columns")
    parser.add_argument("--shard", default="1/1", help="i/n: run every n-th model starting at the i-th (several "
                        "runners in parallel), see --merge")
    parser.add_argument("--merge", nargs="+", type=Path, help="only write the report of these shards' .json files")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results-corpus.md")
    options = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from tests.real.corpus import CORPUS

    names = [a.name for a in CORPUS]
    if options.models:
        unknown = sorted(set(options.models.split(",")) - set(names))
        if unknown:
            parser.error(f"unknown corpus model(s) {', '.join(unknown)}")
        names = options.models.split(",")
    batches = [int(b) for b in options.batches.split(",")]
    if options.merge:
        parts = [json.loads(p.read_text()) for p in options.merge]
        rows = [r for part in parts for r in part["rows"]]
        seen = {r["model"] for r in rows}
        machine = [*parts[0]["machine"], f"- merged from {len(parts)} shards run in parallel"]
        # the first line counts the shard's models: say how many the merged report has, and each shard's wall time
        walls = [re.search(r"wall time (\d+) s", part["machine"][0]) for part in parts]
        machine[0] = re.sub(r"^- \d+ corpus models", f"- {len(seen)} corpus models", machine[0])
        machine[0] = re.sub(r"wall time \d+ s", "wall time " + " / ".join(
            f"{w.group(1)} s" for w in walls if w) + " (per shard)", machine[0])
        text = render(rows, machine, [n for n in names if n not in seen])
        write_atomic(options.output, text)
        write_atomic(options.output.with_suffix(".json"), json.dumps(
            {"machine": machine, "summary": summary(rows), "rows": rows}, indent=1) + "\n")
        print(text)
        results_file.update_pages()
        return 0
    index, count = (int(v) for v in options.shard.split("/"))
    names = names[index - 1::count]
    start, load0 = time.perf_counter(), os.getloadavg()[0]
    rows: list[dict[str, Any]] = []
    params = {"batches": batches, "rounds": options.rounds, "control": not options.no_control,
              **({"baseline": str(options.baseline.resolve())} if options.baseline else {})}
    for i in range(0, len(names), options.group):
        group = names[i:i + options.group]
        print(f"  running {', '.join(group)} ...", file=sys.stderr, flush=True)
        out = run_child("corpus", {"names": group, **params}, timeout=1800)
        if "error" in out:
            rows += [{"model": n, "batch": b, "error": f"child failed: {out['error']}"} for n in group for b in batches]
        else:
            rows += out["results"][0]["rows"]
        # written after every group: an interrupted run still leaves what it measured (and names the rest)
        machine = machine_lines(False, time.perf_counter() - start, (load0, os.getloadavg()[0]))
        machine[0] = (f"- {len(names)} corpus models, batches {batches}, {options.rounds} timed rounds (~10 ms "
                      f"samples) after 5 warm-up rounds, {options.group} models per fresh child; input guards on; "
                      + machine[0][2:])
        text = render(rows, machine, names[i + options.group:])
        write_atomic(options.output, text)
        write_atomic(options.output.with_suffix(".json"),
                     json.dumps({"machine": machine, "summary": summary(rows), "rows": rows}, indent=1) + "\n")
    print(text)
    results_file.update_pages()
    return 0


if __name__ == "__main__":
    sys.exit(main())
