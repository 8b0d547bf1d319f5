"""The generate() figures the pages quote are computed from the results file's tables as they stand: a planted file
of two runs gives its own counts and spans, its latest run's range over processes the spread, and a run without
that range (one process, as before 2026-11-30) has no spread to quote."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs import generate_figures as g
from tests.docs import sources

HEAD = ("| model | batch | cache | original ms/token | rebuilt (default) | ratio | range | no budgets | ratio | "
        "run-time checks off (diagnostic) | ratio | `fold_constants=False` | ratio | default, first run | ratio | "
        "tokens equal |\n" + "|---" * 16 + "|\n")


def _row(model: str, batch: int, default: float, bare: float, first: float, spread: tuple[float, float] | None = None,
         ) -> str:
    """A row; ``spread``: the default ratio's range over the processes (``None``: a table without that column)."""
    low, high = spread or (0.0, 0.0)
    ranged = f" {low:.2f}-{high:.2f}x |" if spread is not None else ""
    return (f"| {model} | {batch} | dynamic | 2.00 | 2.2 | {default:.2f}x |{ranged} 2.1 | {bare:.2f}x | 2.1 | 1.00x | "
            f"2.1 | 1.00x | {first * 2:.2f} | {first:.2f}x | yes |\n")


def _plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *tables: list[str], head: str = HEAD) -> None:
    (tmp_path / g.RESULTS).write_text("# generate()\n\n" + "\nthen:\n\n".join(head + "".join(t) for t in tables),
                                      encoding="utf-8")
    monkeypatch.setattr(sources, "BENCH", tmp_path)


def test_two_runs_give_their_counts_spans_and_spread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = [_row("llama", 1, 1.10, 1.04, 40, (1.05, 1.15)), _row("gpt2", 4, 1.02, 1.01, 30, (1.00, 1.03)),
             _row("mixtral", 1, 1.40, 1.50, 20, (1.30, 1.55))]
    second = [_row("llama", 1, 1.04, 1.02, 35, (1.0, 1.1)), _row("gpt2", 4, 1.03, 1.00, 31, (1.0, 1.1)),
              _row("mixtral", 1, 1.20, 1.25, 17, (1.0, 1.9))]
    _plant(tmp_path, monkeypatch, first, second)
    assert len(g.runs()) == 2
    # within 1.05x without budgets, of them the dense ones, with the default budgets; the dense rows above it (their
    # span, at batch 1 of all); Mixtral (both columns, both runs); the widest and the median range of the latest run
    assert g.summary() == ("2 of 3 and 2 of 3", "2 of 2 and 2 of 2", "1 of 3 and 2 of 3", "1.10x", "1", "1",
                           "1.20-1.50x", "is not", "0.25", "0.10")
    assert g.first_run() == ("17-40x", "30-80")
    assert g.verdict() == ("most", "Mixtral's are not")


def test_a_run_without_its_range_has_no_spread_to_quote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    head = HEAD.replace(" range |", "").replace("|---" * 16, "|---" * 15)
    _plant(tmp_path, monkeypatch, [_row("llama", 1, 1.04, 1.03, 30), _row("mixtral", 4, 1.04, 1.05, 20)], head=head)
    assert g.counts() == ("2 of 2", "1 of 1", "2 of 2", "none", "0", "0", "1.04-1.05x", "may be")
    with pytest.raises(AssertionError, match="no range over processes"):
        g.moves()
    assert g.verdict()[1] == "Mixtral's too on some"


def test_step_figures_read_the_step_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The step timing's ratios are keyed by the column before them; the ops table is read by run; the mask's ops
    are the mask-built row's ATen ops over the no-budget row's."""
    columns = ["rebuilt (default)", g.NO_BUDGETS, g.MASK_BUILT, g.SIZES_OFF, g.EXPERTS_OFF, g.ALL_OFF]
    head = "| model | original us/step | " + " | ".join(f"{c} | ratio" for c in columns) + " | logits equal |\n"
    times = "".join(f"| {model} | 100 | " + " | ".join(f"1{i} | 1.0{i}x" for i in range(6)) + " | yes |\n"
                    for model in ("llama", "mixtral"))
    ops = {"original": (240, 0, 0), g.NO_BUDGETS: (250, 1, 0), g.MASK_BUILT: (276, 1, 0), g.SIZES_OFF: (262, 13, 0),
           g.EXPERTS_OFF: (250, 1, 8), g.ALL_OFF: (290, 15, 8)}
    rows = "".join(f"| {model} | {run} | {n} | 0 | {sizes} | {loop} | 0 |\n" for model in ("llama", "mixtral")
                   for run, (n, sizes, loop) in ops.items())
    (tmp_path / g.STEP).write_text(
        f"# generate(): one decoding step\n\nBatch 1.\n\n{head}|---|---|{'---|---|' * 6}---|\n{times}\n"
        f"{g.STEP_OPS} (`torch.profiler`).\n\n| model | run | ATen ops | mask comparisons (`le`) | `sym_size` reads | "
        f"experts' Python loop | `_grouped_mm` |\n|---|---|---|---|---|---|---|\n{rows}", encoding="utf-8")
    monkeypatch.setattr(sources, "BENCH", tmp_path)
    assert g.step_ratios("mixtral", g.MASK_BUILT, g.NO_BUDGETS) == ("1.02x", "1.01x")
    assert g.step_llama() == ("26", "15", "250", "240")
    assert g.step_ops("mixtral", (g.EXPERTS_OFF, "experts' Python loop")) == ("8",)
