"""Benchmarks of torch2ir / ir2torch against torch.export, unflatten, eager PyTorch and ONNX (issue #8).

Usage::

    python benchmarks/run.py --quick               # a reduced run, under a minute
    python benchmarks/run.py                       # the full run (about 7 minutes on 2 cores)
    python benchmarks/run.py --only convert,forward --models gpt2,resnet

Every task (a scenario on one model, or one operation whose memory is measured) runs in a fresh child
process (``python -m benchmarks.run --child ...``) that reports its timings and its own peak RSS
(``VmHWM``); ``--quick`` runs all its tasks in one child. Every figure is
timed interleaved with its reference in the same child and reported as a ratio. The Markdown report
is printed and written atomically to ``benchmarks/results.md`` (full run) or
``benchmarks/results-quick.md`` (``--quick`` or ``--only``); the raw numbers go beside it as ``.json``.
Nothing here asserts a timing: targets are reported as met or missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import report, results_file
from benchmarks.measure import RESULT_MARK, ROOT, run_child

SCENARIOS = ("convert", "scale", "scale70", "rebuild_load", "forward", "onnx", "sweep")
ALL_MODELS = ("bert", "gpt2", "llama", "resnet", "mobilenet_v2")
#: Mixture-of-experts decoders with their default experts kernel (the transformers operator opted in).
MOE_MODELS = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")

#: Parameters of each scenario in the full and the quick run.
FULL: dict[str, dict[str, Any]] = {
    "convert": {"models": ALL_MODELS + MOE_MODELS, "rounds": 7, "warmup": 1},
    "scale": {"layers": 32, "rounds": 3, "warmup": 1, "rss_ops": ("export", "convert", "lower")},
    "scale70": {"layers": 80, "rounds": 3, "warmup": 1, "rss_ops": ("export", "convert", "lower")},
    "rebuild_load": {"layers": 12, "rounds": 5, "warmup": 1},
    "forward": {"models": ALL_MODELS + MOE_MODELS, "batches": [1, 8], "rounds": 15},
    "onnx": {"models": ALL_MODELS, "rounds": 3, "warmup": 1},
    "sweep": {"layers": [2, 8, 32, 80], "rounds": 5, "warmup": 1},
}
QUICK: dict[str, dict[str, Any]] = {
    "convert": {"models": ("gpt2", "resnet"), "rounds": 3, "warmup": 1},
    "scale": {"layers": 2, "rounds": 1, "warmup": 0, "rss_ops": ()},
    "scale70": {"layers": 1, "rounds": 1, "warmup": 0, "rss_ops": ()},
    "rebuild_load": {"layers": 2, "rounds": 2, "warmup": 0},
    "forward": {"models": ("gpt2",), "batches": [1, 8], "rounds": 3},
    "onnx": {"models": ("resnet",), "rounds": 2, "warmup": 1},
    "sweep": {"layers": [1, 2, 4], "rounds": 1, "warmup": 1},
}


#: The scenario each task's results belong to.
SCENARIO_OF_TASK = {"convert": "convert", "scale": "scale", "scale_rss": "scale", "scale70": "scale70",
                    "scale70_rss": "scale70", "rebuild_load": "rebuild_load",
                    "forward": "forward", "onnx": "onnx", "sweep": "sweep"}


def plan(scenario: str, params: dict[str, Any], models: Sequence[str] | None) -> list[dict[str, Any]]:
    """The task specs of one scenario (one per model, or per measured operation)."""
    if scenario in ("convert", "forward", "onnx"):
        names = [m for m in params["models"] if models is None or m in models]
        extra = {"batches": params["batches"]} if scenario == "forward" else {"warmup": params["warmup"]}
        return [{"task": scenario, "model": m, "rounds": params["rounds"], **extra} for m in names]
    if scenario in ("scale", "scale70"):
        return [{"task": scenario, "layers": params["layers"], "rounds": params["rounds"], "warmup": params["warmup"]},
                *({"task": f"{scenario}_rss", "op": op, "layers": params["layers"]} for op in params["rss_ops"])]
    return [{"task": scenario, "layers": params["layers"], "rounds": params["rounds"], "warmup": params["warmup"]}]


def _label(spec: dict[str, Any]) -> str:
    return f"{spec['task']}:{spec.get('model', spec.get('op', spec.get('layers', '')))}"


def run_children(children: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Run each list of task specs in its own fresh child, in turn; returns every task's result.

    A child's peak RSS is copied into each of its results (a task that reports its own keeps it).
    A failed child gives one ``{"task", "error"}`` result per task it held.
    """
    results: list[dict[str, Any]] = []
    for specs in children:
        print(f"  running {', '.join(_label(s) for s in specs)} ...", file=sys.stderr, flush=True)
        out = run_child("batch", {"specs": specs})
        if "error" in out:
            results += [{"task": s["task"], "error": out["error"]} for s in specs]
            print(f"    failed: {out['error']}", file=sys.stderr)
            continue
        for result in out["results"]:
            result.setdefault("peak_rss_mb", out["peak_rss_mb"])
            results.append(result)
        print(f"    done in {out['wall_s']:.1f} s (peak RSS {out['peak_rss_mb']:.0f} MB)", file=sys.stderr)
    return results


def machine_lines(quick: bool, elapsed: float, load: tuple[float, float]) -> list[str]:
    """Description of the machine and software the numbers were taken on."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return [
        f"- mode: {'quick (`--quick`)' if quick else 'full'}; wall time {elapsed:.0f} s; "
        f"load average (1 min) {load[0]:.2f} at start, {load[1]:.2f} at end",
        f"- CPU: {cpu}, {os.cpu_count()} logical cores; {platform.system()} {platform.release()}",
        f"- Python {platform.python_version()}, torch {version('torch')}, transformers {version('transformers')}, "
        f"networkx {version('networkx')}, safetensors {version('safetensors')}, onnx {version('onnx')}, "
        f"onnxscript {version('onnxscript')}, onnx2torch {version('onnx2torch')}",
        "- times are medians over rounds; ratios are medians of per-round ratios, the candidate and its reference "
        "timed interleaved in the same child process; forward passes single-threaded (`torch.set_num_threads(1)`)",
    ]


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def build_report(results: dict[str, list[dict[str, Any]]], machine: list[str]) -> str:
    """The Markdown document of a run."""
    sections: list[tuple[str, list[str], list[report.Check]]] = []
    if "convert" in results:
        sections.append(("convert: torch2ir.convert vs torch.export.export vs export + unflatten (small configs)",
                         *report.section_convert(results["convert"])))
    for scenario, label in (("scale", "Llama-2-7B"), ("scale70", "Llama-3-70B")):
        if scenario in results:
            main = [r for r in results[scenario] if r["task"] == scenario]
            rss = [r for r in results[scenario] if r["task"] == f"{scenario}_rss"]
            sections.append((f"weight-free scale: {label} dimensions on meta", *report.section_scale(main, rss)))
    if "rebuild_load" in results:
        sections.append(("rebuild + load: GPT-2-small from IR on meta + memory-mapped .safetensors",
                         *report.section_rebuild_load(results["rebuild_load"])))
    if "forward" in results:
        sections.append(("forward: rebuilt vs eager vs unflatten vs ExportedProgram.module() (1 thread, no_grad)",
                         *report.section_forward(results["forward"])))
    if "onnx" in results:
        sections.append(("round trip vs ONNX (small configs)", *report.section_onnx(results["onnx"])))
    if "sweep" in results:
        sections.append(("scaling: convert time vs layer count (small Llama, hidden 64, on meta)",
                         *report.section_sweep(results["sweep"])))
    corpus = ROOT / "benchmarks" / "results-corpus.json"
    if corpus.exists() and "forward" in results:  # a separate run (about 20 minutes): its latest results
        saved = json.loads(corpus.read_text())
        sections.append(("forward over the whole real corpus (`python -m benchmarks.corpus`, batch 1 and 8)",
                         *report.section_corpus(saved["rows"], saved.get("machine", []))))
    footer = ["Rerun: `python benchmarks/run.py --quick` (under a minute) or `python benchmarks/run.py` (full); "
              "see docs/performance.md."]
    return report.render("torch2ir / ir2torch benchmarks", machine, sections, footer)


def child_main(spec_json: str) -> None:
    """Child process: run the task specs and print one result line (see :func:`benchmarks.measure.run_child`)."""
    from benchmarks.measure import peak_rss_mb
    from benchmarks.scenarios import run_task

    spec = json.loads(spec_json)
    specs = spec["specs"] if spec["task"] == "batch" else [spec]
    results = [run_task(s) for s in specs]
    print(RESULT_MARK + json.dumps({"results": results, "peak_rss_mb": peak_rss_mb()}), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="reduced run (fewer models, rounds, layers): < 1 min")
    parser.add_argument("--only", help=f"comma-separated scenarios among {', '.join(SCENARIOS)}")
    parser.add_argument("--models", help=f"comma-separated small models among {', '.join(ALL_MODELS + MOE_MODELS)}")
    parser.add_argument("--output", type=Path, help="Markdown file to write (default: benchmarks/results.md, "
                        "or benchmarks/results-quick.md for --quick / --only)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child_main(args.child)
        return 0
    only = [s.strip() for s in args.only.split(",")] if args.only else list(SCENARIOS)
    unknown = sorted(set(only) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; choose among {', '.join(SCENARIOS)}")
    models = [m.strip() for m in args.models.split(",")] if args.models else None
    if models and set(models) - set(ALL_MODELS + MOE_MODELS):
        parser.error(f"unknown model(s) {', '.join(sorted(set(models) - set(ALL_MODELS + MOE_MODELS)))}")
    config = QUICK if args.quick else FULL
    output = args.output or ROOT / "benchmarks" / ("results.md" if not (args.quick or args.only or models)
                                                   else "results-quick.md")
    start, load0 = time.perf_counter(), os.getloadavg()[0]
    specs = [spec for scenario in SCENARIOS if scenario in only for spec in plan(scenario, config[scenario], models)]
    # full run: one child per task, so each peak RSS belongs to one measurement; quick run: a single child
    # (one interpreter start-up and one warm-up of torch.export instead of a dozen)
    results: dict[str, list[dict[str, Any]]] = {s: [] for s in SCENARIOS if s in only}
    for result in run_children([specs] if args.quick else [[s] for s in specs]):
        results[SCENARIO_OF_TASK[result["task"]]].append(result)
    machine = machine_lines(args.quick, time.perf_counter() - start, (load0, os.getloadavg()[0]))
    text = build_report(results, machine)
    print(text)
    write_atomic(output, text)
    write_atomic(output.with_suffix(".json"), json.dumps({"machine": machine, "results": results}, indent=1) + "\n")
    print(f"written {output.relative_to(ROOT) if output.is_relative_to(ROOT) else output}", file=sys.stderr)
    results_file.update_pages()  # docs/performance.md copies results.md's tables
    return 0


if __name__ == "__main__":
    sys.exit(main())
