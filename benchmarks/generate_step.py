"""One decoding step of ``generate()``, timed and counted op by op: where a rebuild's extra time per token goes
(issue 52; the per-token times of whole ``generate()`` runs are ``benchmarks/generate.py``'s).

For Llama and Mixtral at batch 1 (``benchmarks/generate.py``'s configs and builders: 4 layers, hidden size 256,
random weights), one step as ``generate()`` calls it (one new token, a past of ``--past`` tokens in a fresh
``DynamicCache``, nothing padded, ``logits_to_keep=1``) is run by the original and by the rebuilds of its
``torch2ir.generation.convert_for_generation`` IR:

- **rebuilt (default)**: ``ir2torch.convert(ir, state)``;
- **no budgets**: ``max_bytes=None, max_flops=None``;
- **no budgets, mask built** / **sizes by `sym_size`** / **experts' Python loop**: the no-budget rebuild built with
  one of the decoding step's fast paths switched off: :mod:`ir2torch.codegen.causal_mask`'s all-true mask made in
  one op (off: the folded forward builds the mask), :mod:`ir2torch.codegen.fast_paths`' size reads as
  ``Tensor.size`` (off: ``aten.sym_size.int`` through the dispatcher) and experts' product as ``torch._grouped_mm``
  (off: transformers' operator and its Python loop, as the graph calls it; Llama has no experts: its column is
  the no-budget rebuild built again);
- **no budgets, indices read**: the no-budget rebuild with no index bound proven from the graph
  (:mod:`ir2torch.run_safety.index_provenance`: the experts' sort indices are read at every call, as before it;
  Llama has none);
- **fast paths off (diagnostic)**: the no-budget rebuild with all four off, as the rebuild ran before them.

The fast paths are switched off by replacing their functions while the rebuild is built and first called
(:func:`fast_paths_off`); no API offers this (they are exact and checked at each call:
``tests/ir2torch/test_decoding_fast_paths.py``).

Each step is timed as the thread's CPU time (``time.thread_time_ns``: the other jobs of the machine are kept out of
it) around the model's call alone (the cache is made before it). The models alternate, ``--rounds`` rounds of
``--steps`` steps each (the order reversed every other round); a model's us/step is the median of all its steps, its
ratio the median over the rounds of its round's median over the original's of the same round. The ops of one step
are counted with ``torch.profiler`` (no dispatch mode: the folded forward runs as when timed): the ATen ops called
from Python or from a non-ATen op (ops that an ATen op calls are not counted again), then the mask's comparison
(``aten::le``), the ``aten::sym_size`` reads and the experts' products::

    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/generate_step.py            # writes results-generate-step.md
    PYTHONPATH=. HF_HUB_OFFLINE=1 python benchmarks/generate_step.py llama --rounds 5 --output -

No threshold is asserted here (timings depend on the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
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

from benchmarks import generate, results_file
from common.caches import forward_cache_name

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODELS = ("llama", "mixtral")
#: The rebuilds: key -> (column, forward budgets, the fast paths switched off while it is built).
REBUILDS: dict[str, tuple[str, bool, frozenset[str]]] = {
    "budgeted": ("rebuilt (default)", True, frozenset()),
    "trusted": ("no budgets", False, frozenset()),
    "mask": ("no budgets, mask built", False, frozenset({"mask"})),
    "sizes": ("no budgets, sizes by `sym_size`", False, frozenset({"sizes"})),
    "experts": ("no budgets, experts' Python loop", False, frozenset({"experts"})),
    "indices": ("no budgets, indices read", False, frozenset({"indices"})),
    "slow": ("fast paths off (diagnostic)", False, frozenset({"mask", "sizes", "experts", "indices"})),
}
#: Ops of a step counted by name (``torch.profiler``'s keys), with the column saying them.
COUNTED = {"aten::le": "mask comparisons (`le`)", "aten::sym_size": "`sym_size` reads",
           "transformers::grouped_mm_fallback": "experts' Python loop", "aten::_grouped_mm": "`_grouped_mm`"}


@contextlib.contextmanager
def fast_paths_off(paths: frozenset[str]) -> Iterator[None]:
    """(Diagnostic) rebuilds built meanwhile do not take the fast paths of ``paths``: ``"mask"`` (no all-true mask
    made in one op: none is found), ``"sizes"`` (size reads stay ``aten.sym_size.int``), ``"experts"`` (the experts'
    product stays transformers' operator, as the graph calls it: none is found), ``"indices"`` (no index bound is
    proven from the graph: every index's values are read, :mod:`ir2torch.run_safety.index_provenance`)."""
    from ir2torch.codegen import causal_mask, fast_paths
    from ir2torch.run_safety import node_checks

    replaced: list[tuple[Any, str, Any]] = []
    if "mask" in paths:
        replaced += [(causal_mask, "find", lambda graph: False),
                     (causal_mask, "skipping", lambda graph, compile_graph: None)]
    if "sizes" in paths:
        replaced.append((fast_paths, "tensor_size", torch.ops.aten.sym_size.int))
    if "experts" in paths:
        replaced.append((fast_paths, "find", lambda graph: []))
    if "indices" in paths:
        replaced.append((node_checks, "proven_indices", lambda node: ()))
    originals = [(module, name, getattr(module, name)) for module, name, _ in replaced]
    for module, name, replacement in replaced:
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


def _inputs(model: nn.Module, config: Any, past: int, eager: bool) -> dict[str, Any]:
    """A step's keyword arguments as ``generate()`` passes them: one token after ``past`` (seeded), a fresh cache."""
    from transformers import DynamicCache

    generator = torch.Generator().manual_seed(past)
    heads = config.num_key_value_heads
    dim = config.hidden_size // config.num_attention_heads
    cache = DynamicCache(config=config) if eager else DynamicCache()
    for layer in range(config.num_hidden_layers):
        cache.update(torch.randn(1, heads, past, dim, generator=generator),
                     torch.randn(1, heads, past, dim, generator=generator), layer)
    ids = torch.randint(3, config.vocab_size, (1, 1), generator=generator)
    return {"input_ids": ids, forward_cache_name(model) or "past_key_values": cache,
            "position_ids": torch.full((1, 1), past),
            "attention_mask": torch.ones(1, past + 1, dtype=torch.long), "logits_to_keep": 1}


def _step_us(model: nn.Module, config: Any, past: int, eager: bool) -> tuple[float, torch.Tensor]:
    """One step's thread CPU time (us) and its logits."""
    kwargs = _inputs(model, config, past, eager)
    start = time.thread_time_ns()
    out = model(**kwargs)
    return (time.thread_time_ns() - start) / 1e3, out.logits


def count_ops(model: nn.Module, config: Any, past: int, eager: bool) -> dict[str, int]:
    """The ATen ops of one step called from Python or a non-ATen op (``"ops"``), and each of :data:`COUNTED`."""
    kwargs = _inputs(model, config, past, eager)
    with torch.profiler.profile() as prof:
        model(**kwargs)
    events = prof.events()
    counts = {key: 0 for key in ("ops", *COUNTED)}
    for event in events:
        if event.name in COUNTED:
            counts[event.name] += 1
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if event.name.startswith("aten::") and parent is None:
            counts["ops"] += 1
    return counts


def measure(name: str, make: Callable[[], nn.Module], past: int, rounds: int, steps: int) -> dict[str, Any]:
    """us/step and ratios of the original and the rebuilds of model ``name``, their ops, whether logits are equal."""
    import ir2torch

    original, ir = generate._converted(name, make)
    config, state = original.config, original.state_dict()
    models: dict[str, nn.Module] = {"original": original}
    for key, (_, budgets, off) in REBUILDS.items():
        limits = {} if budgets else {"max_bytes": None, "max_flops": None}
        with fast_paths_off(off), torch.inference_mode():
            models[key] = ir2torch.convert(ir, state, **limits)
            _step_us(models[key], config, past, False)  # anything made at the first call, made as it is built
    times: dict[str, list[float]] = {key: [] for key in models}
    medians: dict[str, list[float]] = {key: [] for key in models}
    logits: dict[str, torch.Tensor] = {}
    with torch.inference_mode():
        for key, model in models.items():  # warm-up: first calls, the default rebuild's probe of the signature
            for _ in range(3):
                _step_us(model, config, past, key == "original")
        for round_ in range(rounds):
            order = list(models.items())
            for key, model in order if round_ % 2 == 0 else order[::-1]:
                timed = []
                for _ in range(steps):
                    us, logits[key] = _step_us(model, config, past, key == "original")
                    timed.append(us)
                times[key].extend(timed)
                medians[key].append(statistics.median(timed))
        ops = {key: count_ops(model, config, past, key == "original") for key, model in models.items()}
    return {"model": name, "us": {key: statistics.median(values) for key, values in times.items()},
            "ratio": {key: statistics.median(m / o for m, o in zip(medians[key], medians["original"], strict=True))
                      for key in models},
            "ops": ops, "equal": all(torch.equal(logits["original"], logits[key]) for key in models)}


def tables(rows: list[dict[str, Any]]) -> str:
    """The time table and the ops table of :func:`measure`'s rows."""
    lines = ["| model | original us/step | " + " | ".join(f"{column} | ratio" for column, _, _ in REBUILDS.values())
             + " | logits equal |", "|---|---|" + "---|---|" * len(REBUILDS) + "---|"]
    for row in rows:
        cells = [f"{row['us'][key]:.0f} | {row['ratio'][key]:.2f}x" for key in REBUILDS]
        lines.append(f"| {row['model']} | {row['us']['original']:.0f} | {' | '.join(cells)} | "
                     f"{'yes' if row['equal'] else 'NO'} |")
    lines += ["", "Ops of one step (`torch.profiler`): ATen ops called from Python or a non-ATen op, then the ops "
              "counted by name.", "", "| model | run | ATen ops | " + " | ".join(COUNTED.values()) + " |",
              "|---|---|---|" + "---|" * len(COUNTED)]
    for row in rows:
        for key, column in {"original": "original", **{k: v[0] for k, v in REBUILDS.items()}}.items():
            counts = row["ops"][key]
            lines.append(f"| {row['model']} | {column} | {counts['ops']} | "
                         + " | ".join(str(counts[op]) for op in COUNTED) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark and write its tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"models of {', '.join(MODELS)} (default: both)")
    parser.add_argument("--past", type=int, default=20, help="tokens in the cache before the step")
    parser.add_argument("--rounds", type=int, default=20, help="alternating rounds of each model")
    parser.add_argument("--steps", type=int, default=20, help="steps a round")
    parser.add_argument("--output", default=str(results_file.BENCH / "results-generate-step.md"),
                        help=results_file.output_help("results-generate-step.md"))
    options = parser.parse_args(argv)
    if set(options.names) - set(MODELS):
        parser.error(f"models: {', '.join(MODELS)}")
    load = os.getloadavg()[0]
    torch.set_num_threads(1)
    builders = generate.models()
    rows = [measure(name, builders[name], options.past, options.rounds, options.steps)
            for name in (options.names or MODELS)]
    intro = (f"Batch 1, one new token after a past of {options.past}, 1 thread; {options.rounds} alternating rounds "
             f"of {options.steps} steps: us = median of all steps' thread CPU time, ratio = median over the rounds of "
             "(the round's median / the original's median of the same round).")
    results_file.write(options.output, "generate(): one decoding step (issue 52)", sys.argv[1:] if argv is None
                       else argv, load, f"{intro}\n\n{tables(rows)}")


if __name__ == "__main__":
    main()
