"""Per-token decoding time of ``generate()``: a rebuilt decoder (``ir2torch.generation.for_generation``) vs the
original transformers model (issue 52: at most 1.05x).

Each model is built from a small config with random weights (nothing is downloaded), converted with
``torch2ir.generation.convert_for_generation`` and rebuilt. Both generate greedily from the same prompts, the tokens
are compared. The time of each decoding step is read inside ``generate()`` (a stopping criterion that stops nothing
stamps the clock once a step: its differences are the steps after the first new token; the prompt step and
``generate()``'s setup are outside them). With ``--threads 1`` (the default) the clock is the thread's CPU time
(``time.thread_time``: every op runs on the calling thread, and the other jobs of the machine are kept out of it, as
in ``benchmarks/generate_step.py``); with more threads, whose work it would miss, the wall clock. The models'
``generate()`` calls alternate, ``--repeats`` rounds (the order
reversed every other round); a model's ms/token is the median of all its per-token times, its ratio the median over
the rounds of its run's median step over the original's of the same round (runs adjacent in time: the machine's
other load drifts less between them). Each model is measured so in ``--processes`` fresh processes, one after the
other (the models in turn), each building the original (from the seed of the converted one: the same weights) and the
rebuilds anew, in an order rotated by one place from the previous process's (with 5 processes each model is built
first once): two identical rebuilds in one process were measured 3-17% apart, steadily, and one rebuild's ratio moved
by 5% from one process to the next (where a process's objects land in memory: the same rebuild with and without its
budget's look-up differs by about 10 us a step), so the figures are the medians over the processes, with the least
and greatest default ratio::

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/generate.py            # all models, batch 1 and 4
    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/generate.py llama --batch 1 --tokens 64 --cache static

Prints a Markdown table: model, batch, cache, per-token ms of the original and of the rebuilds with their ratios,
and whether the tokens are equal. The rebuilds: ``ir2torch.convert(ir, state)`` (default budgets: each call of a new
input signature, i.e. every decoding step, is first probed on fake tensors;
:mod:`ir2torch.run_safety.forward_budget`), ``ir2torch.convert(ir, state, max_bytes=None, max_flops=None)`` (no
forward budget: a file you converted yourself; the data preconditions and the writes into the caller's tensors are
checked by the nodes that need them, :mod:`ir2torch.run_safety.node_checks`) and, as a diagnostic
only, the default rebuild with the forward budget's run-time checks switched off for the timed calls
(``ForwardBudget.call`` replaced by the plain call: what the rebuild costs besides those checks; no API offers
this), and the default rebuild with ``fold_constants=False`` (no constant folding, and attention on repeated
key/value heads runs the repeat: :mod:`ir2torch.codegen.grouped_attention`). The default rebuild's first timed run
is shown too: its decoding steps are new input signatures, each probed once, as in any first ``generate()`` of a
process. No threshold is asserted here (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from torch import nn

from benchmarks import results_file

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Config fields shared by the decoders (small sizes; random weights).
_SIZES = {"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 4,
          "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 512, "pad_token_id": 0,
          "bos_token_id": 1, "eos_token_id": 2}


def models() -> dict[str, Callable[[], nn.Module]]:
    """Name -> constructor of each benchmarked ``*ForCausalLM``."""
    import transformers as tf

    gpt2 = {"n_layer": 4, "n_embd": 256, "n_head": 8, "vocab_size": 1000, "n_positions": 512, "pad_token_id": 0,
            "bos_token_id": 1, "eos_token_id": 2}
    return {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**_SIZES)),
        "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(**gpt2)),
        "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**_SIZES)),
        "gemma2": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(**_SIZES, head_dim=32, sliding_window=256)),
        "mixtral": lambda: tf.MixtralForCausalLM(tf.MixtralConfig(**_SIZES, num_local_experts=4,
                                                                  num_experts_per_tok=2)),
    }


#: The per-token clock (:func:`main` sets it): the calling thread's CPU time with one torch thread.
CLOCK: list[Callable[[], float]] = [time.thread_time]


class _StepClock:
    """A stopping criterion that stops nothing and records when ``generate()`` asks it, once per decoding step:
    the differences of consecutive stamps are the per-token times (sampling, the criteria and the model's call of
    the step; ``generate()``'s setup and the prompt step are outside them), on :data:`CLOCK`."""

    def __init__(self) -> None:
        self.stamps: list[float] = []
        self.clock = CLOCK[0]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.stamps.append(self.clock())
        return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

    def per_token(self) -> list[float]:
        """Seconds of each step after the first new token."""
        return [b - a for a, b in zip(self.stamps, self.stamps[1:])]


def _generate(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: int, cache: str,
              ) -> tuple[list[float], torch.Tensor]:
    from transformers import StoppingCriteriaList

    options = {"cache_implementation": "static"} if cache == "static" else {}
    clock = _StepClock()
    out = model.generate(ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                         stopping_criteria=StoppingCriteriaList([clock]), **options)
    return clock.per_token(), out


@contextlib.contextmanager
def _without_run_checks(on: bool) -> Iterator[None]:
    """(Diagnostic) the forward budget's checks off: ``ForwardBudget.call`` calls the module and nothing else."""
    from ir2torch.run_safety import forward_budget

    if not on:
        yield
        return
    saved = forward_budget.ForwardBudget.call

    def plain(self: Any, obj: nn.Module, call: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        forward_budget.LOCAL.depth += 1
        try:
            return call(obj, *args, **kwargs)
        finally:
            forward_budget.LOCAL.depth -= 1

    forward_budget.ForwardBudget.call = plain
    try:
        yield
    finally:
        forward_budget.ForwardBudget.call = saved


@functools.lru_cache(maxsize=1)
def _converted(name: str, make: Callable[[], nn.Module]) -> tuple[nn.Module, Any]:
    """The original model ``name`` and its decoding step's IR (once per model: each row rebuilds it afresh)."""
    from torch2ir.generation import convert_for_generation

    torch.manual_seed(0)
    original = make().eval()
    return original, convert_for_generation(original)


def measure(name: str, make: Callable[[], nn.Module], batch: int, tokens: int, prompt: int, repeats: int,
            cache: str = "dynamic", turn: int = 0) -> dict[str, Any]:
    """Per-token ms of the original and the rebuild of model ``name``, and whether their tokens are equal. The timed
    original (built from the same seed as the converted one: the same weights) and the four rebuilds are built in
    an order rotated by ``turn``: where a model's objects land in memory moves its time by several percent, so each
    takes each place of the order in turn over the processes of :func:`main`."""
    import ir2torch
    from ir2torch.generation import for_generation

    converted, ir = _converted(name, make)
    state, config, generation = converted.state_dict(), converted.config, converted.generation_config

    def fresh_original() -> nn.Module:
        torch.manual_seed(0)  # (as _converted builds it)
        return make().eval()

    builders: dict[str, Callable[[], nn.Module]] = {
        "original": fresh_original,
        "budgeted": lambda: for_generation(ir2torch.convert(ir, state), config, generation),
        "trusted": lambda: for_generation(ir2torch.convert(ir, state, max_bytes=None, max_flops=None), config,
                                          generation),
        "unchecked": lambda: for_generation(ir2torch.convert(ir, state), config, generation),
        "unfolded": lambda: for_generation(ir2torch.convert(ir, state, fold_constants=False), config, generation),
    }
    keys = list(builders)
    built = {key: builders[key]() for key in keys[turn % len(keys):] + keys[:turn % len(keys)]}
    runs = {key: built[key] for key in keys}
    original, budgeted = runs["original"], runs["budgeted"]
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, original.config.vocab_size, (batch, prompt), generator=generator)
    mask = torch.ones_like(ids)
    if batch > 1:
        mask[1:, : prompt // 2] = 0  # left padding
        ids[mask == 0] = 0
    times: dict[str, list[float]] = {key: [] for key in runs}
    rounds: dict[str, list[float]] = {key: [] for key in runs}  # each run's median step
    outputs: dict[str, torch.Tensor] = {}
    with torch.inference_mode():
        first, _ = _generate(budgeted, ids, mask, tokens, cache)  # its steps' signatures are new: each is probed
        for key, model in runs.items():  # warm-up (the other rebuilds' probes)
            with _without_run_checks(key == "unchecked"):
                _generate(model, ids, mask, tokens, cache)
        for round_ in range(repeats):
            order = list(runs.items())
            for key, model in order if round_ % 2 == 0 else order[::-1]:  # alternate, each first in turn
                with _without_run_checks(key == "unchecked"):
                    steps, out = _generate(model, ids, mask, tokens, cache)
                times[key].extend(steps)
                rounds[key].append(statistics.median(steps))
                outputs[key] = out
    per_token = {key: statistics.median(values) * 1e3 for key, values in times.items()}
    # each rebuild against the original's run of the same round (adjacent in time): the machine's load drifts
    ratios = {key: statistics.median(r / o for r, o in zip(rounds[key], rounds["original"], strict=True))
              for key in runs}
    first_ms = statistics.mean(first) * 1e3
    return {"model": name, "batch": batch, "cache": cache,
            **{f"{key}_ms": value for key, value in per_token.items()}, "first_ms": first_ms,
            **{f"{key}_ms_ratio": value for key, value in ratios.items()},
            "first_ms_ratio": first_ms / per_token["original"],
            "equal": all(torch.equal(outputs["original"], outputs[key]) for key in runs)}


def _worker_rows(options: argparse.Namespace, name: str, turn: int) -> list[dict[str, Any]]:
    """The rows of model ``name`` measured in a fresh process (this script with ``--worker``): one process per model
    and round of :func:`main`, building the models in the order ``turn`` rotates (:func:`measure`)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), name, "--worker", "--turn", str(turn),
           "--batch", *map(str, options.batch),
           "--cache", *options.cache, "--tokens", str(options.tokens), "--prompt", str(options.prompt),
           "--repeats", str(options.repeats), "--threads", str(options.threads)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                                    os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith(_ROWS)]
    if done.returncode or not lines:
        raise SystemExit(f"{name}: the worker process failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1][len(_ROWS):])


#: The prefix of a worker process's line of rows (JSON).
_ROWS = "ROWS "


def combined(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One row from the same row measured in several processes: each figure's median over the processes, the
    default rebuild's ratio also as its least and greatest (``range``), tokens equal in all."""
    row = dict(runs[0])
    for key, value in runs[0].items():
        if isinstance(value, float):
            row[key] = statistics.median(run[key] for run in runs)
    ratios = [run["budgeted_ms_ratio"] for run in runs]
    row["range"] = (min(ratios), max(ratios))
    row["equal"] = all(run["equal"] for run in runs)
    return row


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="models (default: all)")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--tokens", type=int, default=24, help="new tokens a run")
    parser.add_argument("--prompt", type=int, default=16, help="prompt length")
    parser.add_argument("--repeats", type=int, default=10, help="alternating runs of each model in a process")
    parser.add_argument("--processes", type=int, default=5,
                        help="fresh processes measuring each model (figures: medians over them)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: steadier figures)")
    parser.add_argument("--cache", nargs="+", choices=["dynamic", "static"], default=["dynamic", "static"],
                        help="generate()'s cache: the default DynamicCache, cache_implementation='static'")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--turn", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(results_file.BENCH / "results-generate.md"),
                        help=results_file.output_help("results-generate.md"))
    options = parser.parse_args(argv)
    load = os.getloadavg()[0]
    torch.set_num_threads(options.threads)
    CLOCK[0] = time.thread_time if options.threads == 1 else time.perf_counter
    table = models()
    names = options.names or list(table)
    if options.worker:
        print(_ROWS + json.dumps([measure(name, table[name], batch, options.tokens, options.prompt, options.repeats,
                                          cache, options.turn) for name in names for batch in options.batch
                                  for cache in options.cache]))
        return
    measured: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for turn in range(options.processes):  # the models in turn, each process measuring one
        for name in names:
            for row in _worker_rows(options, name, turn):
                measured.setdefault((row["model"], row["batch"], row["cache"]), []).append(row)
    rows = [combined(runs) for runs in measured.values()]
    clock = "thread CPU time" if options.threads == 1 else "wall time"
    lines = [f"{options.threads} thread(s), prompt {options.prompt}, {options.tokens} new tokens a run, "
             f"{options.processes} processes a model, each with {options.repeats} alternating runs: ms = median "
             f"over the processes of the median of all per-token times ({clock}) in a process, ratio = median over "
             "the processes of the median over its rounds of (the run's median / the original's median of the same "
             "round); range: the least and the greatest of the default rebuild's ratio over the processes.", "",
             "| model | batch | cache | original ms/token | rebuilt (default) | ratio | range | no budgets | ratio | "
             "run-time checks off (diagnostic) | ratio | `fold_constants=False` | ratio | default, first run | ratio | "
             "tokens equal |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        base = row["original_ms"]
        cells = [f"{row[key]:.2f} | {row[key + '_ratio']:.2f}x"
                 for key in ("budgeted_ms", "trusted_ms", "unchecked_ms", "unfolded_ms", "first_ms")]
        cells[0] += f" | {row['range'][0]:.2f}-{row['range'][1]:.2f}x"
        lines.append(f"| {row['model']} | {row['batch']} | {row['cache']} | {base:.2f} | {' | '.join(cells)} | "
                     f"{'yes' if row['equal'] else 'NO'} |")
    results_file.write(options.output, "generate() per-token decoding time (issue 52)",
                       sys.argv[1:] if argv is None else argv, load, "\n".join(lines))


if __name__ == "__main__":
    main()
