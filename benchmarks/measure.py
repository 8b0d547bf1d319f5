"""Timing and memory primitives: interleaved medians, paired ratios, peak RSS, child processes.

Timings are noisy on a shared machine, so every figure is measured together with its reference:
the candidates of one comparison run in *rounds*, each round running every candidate once (the
order rotates from round to round), and a ratio is the median of the per-round ratios — two
calls measured seconds apart share the machine's load. Medians (never means) summarise rounds.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Prefix of the one stdout line a child prints its JSON result on.
RESULT_MARK = "BENCH-RESULT "


@dataclass
class Series:
    """The per-round samples (seconds per call) of one candidate."""

    samples: list[float] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)


def time_once(fn: Callable[[], Any], number: int = 1) -> float:
    """Seconds per call of ``fn`` over ``number`` back-to-back calls (``time.perf_counter``)."""
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def interleaved(candidates: Mapping[str, Callable[[], Any]], *, rounds: int, warmup: int = 1,
                number: int | Mapping[str, int] = 1, collect: bool = True) -> dict[str, Series]:
    """Time every candidate once per round, ``rounds`` times, after ``warmup`` untimed rounds.

    Args:
        candidates: ``{name: fn}``; a candidate may read state an earlier one left (``warmup >= 1``
            guarantees every candidate ran once before timing starts).
        rounds: timed rounds.
        warmup: untimed rounds first (caches, lazy imports, allocator).
        number: calls per sample (one number for all, or per candidate) for very short calls.
        collect: run ``gc.collect()`` before each sample, so one candidate's garbage is not
            collected during another's sample.

    Returns:
        ``{name: Series}`` with one sample per round.
    """
    names = list(candidates)
    counts = {n: (number if isinstance(number, int) else number.get(n, 1)) for n in names}
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    out = {n: Series() for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            if collect:
                gc.collect()
            out[name].samples.append(time_once(candidates[name], counts[name]))
    return out


def paired_ratio(series: Mapping[str, Series], numerator: str, denominator: str | list[str]) -> float:
    """Median over rounds of ``numerator / denominator`` (a list of denominators is summed per round)."""
    dens = [denominator] if isinstance(denominator, str) else denominator
    ratios = [
        num / sum(series[d].samples[i] for d in dens)
        for i, num in enumerate(series[numerator].samples)
    ]
    return statistics.median(ratios)


def calibrate(fn: Callable[[], Any], *, target: float = 0.02, limit: int = 1000) -> int:
    """Calls per sample so that one sample of ``fn`` lasts about ``target`` seconds."""
    once = max(time_once(fn), 1e-6)
    return max(1, min(limit, round(target / once)))


def time_modules(modules: Mapping[str, Callable[..., Any]], args: tuple[Any, ...], kwargs: Mapping[str, Any], *,
                 rounds: int, reference: str,
                 fresh: Callable[[], Callable[..., Any]]) -> tuple[dict[str, Series], float]:
    """Time ``modules`` called on ``(args, kwargs)`` under ``no_grad``, interleaved round by round (the number of
    calls per sample calibrated on ``reference``), and the first call's extra cost: the median over five
    modules made by ``fresh`` of their first call's time minus their second's (the one-time probe).
    Returns the series by name and that extra cost in seconds."""
    import torch

    with torch.no_grad():
        calls = {k: (lambda m=m: m(*args, **kwargs)) for k, m in modules.items()}
        series = interleaved(calls, rounds=rounds, warmup=2, number=calibrate(calls[reference]))
        first, later = [], []
        for _ in range(5):
            module = fresh()
            start = time.perf_counter()
            module(*args, **kwargs)
            first.append(time.perf_counter() - start)
            start = time.perf_counter()
            module(*args, **kwargs)
            later.append(time.perf_counter() - start)
    return series, statistics.median(first) - statistics.median(later)


def peak_rss_mb() -> float:
    """Peak resident set size of this process image so far, in MiB.

    On Linux it is ``VmHWM``: ``ru_maxrss`` of a child started by ``subprocess`` includes its parent's
    peak (recorded at exec), which would charge the parent's memory to every child task."""
    try:
        with open("/proc/self/status") as status:
            return int(next(line.split()[1] for line in status if line.startswith("VmHWM:"))) / 1024
    except (OSError, StopIteration):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def run_child(task: str, params: Mapping[str, Any], *, timeout: float = 1800) -> dict[str, Any]:
    """Run ``task`` in a fresh interpreter and return its JSON result.

    The child is ``python -m benchmarks.run --child '{"task": ..., **params}'``; it prints its result
    (with its own peak RSS) on one line starting with :data:`RESULT_MARK`. A child that crashes,
    times out or prints no result gives ``{"error": ...}`` with the tail of its stderr.
    """
    spec = json.dumps({"task": task, **params})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--child", spec], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "wall_s": time.perf_counter() - start}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK):])
            result["wall_s"] = time.perf_counter() - start
            return result
    tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
    return {"error": f"child exited with {proc.returncode}: {tail}", "wall_s": time.perf_counter() - start}
