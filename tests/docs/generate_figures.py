"""What the pages say of ``generate()``'s speed, computed from ``benchmarks/results-generate.md`` (which
``benchmarks/generate.py`` writes and docs/performance.md copies): counts of rows within issue 52's 1.05x, spans of
ratios and their spread between runs, read from every table of the file (one per run kept), so a rerun that
rewrites the file tells which prose figures moved. Each function returns the figures as the pages write them."""

from __future__ import annotations

import re
import statistics

from tests.docs import sources as s

RESULTS = "results-generate.md"
TARGET = 1.05  # issue 52: at most 1.05x of the original per token
DENSE = ("llama", "gpt2", "qwen2", "gemma2")
DEFAULT, NO_BUDGETS, FIRST = "rebuilt (default)", "no budgets", "default, first run"
UNFOLDED = "`fold_constants=False`"


def runs() -> list[list[dict[str, str]]]:
    """The rows of each table of the results file, one table per run; a ``ratio`` column is keyed
    ``"<the column before it> ratio"``."""
    out: list[list[dict[str, str]]] = []
    lines = (s.BENCH / RESULTS).read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines[:-1]):
        if not (line.startswith("| model |") and lines[i + 1].startswith("|--")):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        keys = [f"{cells[j - 1]} ratio" if c == "ratio" else c for j, c in enumerate(cells)]
        rows = []
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            rows.append(dict(zip(keys, (c.strip() for c in row.strip("|").split("|")))))
        out.append(rows)
    assert out, f"{RESULTS} holds no table"
    return out


def ratio(row: dict[str, str], column: str) -> float:
    """A row's ratio of ``column`` (``1.05x`` -> 1.05)."""
    return float(row[f"{column} ratio"].removesuffix("x"))


def listing(items: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def _span(values: list[float], unit: str = "x", digits: int = 2) -> str:
    """``"1.06-1.14x"``: the least and the greatest (one value when equal; ``"none"`` without values)."""
    if not values:
        return "none"
    low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


def _within(column: str, models: tuple[str, ...] | None = None) -> str:
    """``"12 of 20 and 16 of 20"``: rows within the target, run by run."""
    found = []
    for rows in runs():
        kept = [r for r in rows if models is None or r["model"] in models]
        found.append(f"{sum(ratio(r, column) <= TARGET for r in kept)} of {len(kept)}")
    return listing(found)


def _above(models: tuple[str, ...], column: str = DEFAULT) -> list[dict[str, str]]:
    return [r for rows in runs() for r in rows if r["model"] in models and ratio(r, column) > TARGET]


def _mixtral() -> list[float]:
    return [ratio(r, c) for rows in runs() for r in rows if r["model"] == "mixtral" for c in (DEFAULT, NO_BUDGETS)]


def moves() -> tuple[str, str]:
    """How far the default rebuild's ratio of a row ranged over the processes measuring it (the ``range`` column of
    the latest run): the most and the median."""
    rows = runs()[0]
    assert rows and "range" in rows[0], "the latest run has no range over processes"
    widths = []
    for row in rows:
        low, high = (float(v) for v in row["range"].removesuffix("x").split("-"))
        widths.append(high - low)
    return f"{max(widths):.2f}", f"{statistics.median(widths):.2f}"


def counts() -> tuple[str, ...]:
    """Rows within 1.05x without budgets (all rows, then the dense decoders'), with the default budgets; the dense
    rows above it with the default budgets: their span, how many at batch 1 of how many; Mixtral's span (default
    and no budgets), and whether any Mixtral row is within."""
    above = _above(DENSE)
    mixtral = _mixtral()
    return (_within(NO_BUDGETS), _within(NO_BUDGETS, DENSE), _within(DEFAULT),
            _span([ratio(r, DEFAULT) for r in above]), str(sum(r["batch"] == "1" for r in above)), str(len(above)),
            _span(mixtral), "is not" if min(mixtral) > TARGET else "may be")


def summary() -> tuple[str, ...]:
    """:func:`counts`, then the spread between runs (:func:`moves`)."""
    return (*counts(), *moves())


def limitations() -> tuple[str, ...]:
    """docs/limitations.md's row: :func:`summary` without the Mixtral verdict, then the first run's span."""
    figures = summary()
    return (*figures[:7], *figures[8:], first_run()[0])


def first_run() -> tuple[str, str]:
    """The default rebuild's first run against the original (whole times) and its per-token time (tens of ms)."""
    tables = runs()
    ratios = [ratio(r, FIRST) for rows in tables for r in rows]
    ms = [float(r[FIRST]) for rows in tables for r in rows]
    return (f"{min(ratios):.0f}-{max(ratios):.0f}x",
            f"{round(min(ms), -1):.0f}-{round(max(ms), -1):.0f}")


def unfolded() -> tuple[str, str, str, str]:
    """The ``fold_constants=False`` rebuild's ratios over the runs: Llama's and Qwen2's batch-1 dynamic rows (and that
    batch), every Mixtral row."""
    def span(model: str, batch: str | None = None) -> str:
        return _span([ratio(r, UNFOLDED) for rows in runs() for r in rows if r["model"] == model and
                      (batch is None or (r["batch"], r["cache"]) == (batch, "dynamic"))])

    return span("llama", "1"), "1", span("qwen2", "1"), span("mixtral")


def budget_lookup() -> tuple[str, str]:
    """The default rebuild against no budgets, row by row (ratio of the ratios, in %): the median and the span."""
    changes = [100 * (ratio(r, DEFAULT) / ratio(r, NO_BUDGETS) - 1) for rows in runs() for r in rows]
    return f"{statistics.median(changes):+.0f}", f"{min(changes):+.0f} to {max(changes):+.0f}"


def gemma_no_budgets() -> tuple[str]:
    """Gemma-2's rows without budgets."""
    return (_span([ratio(r, NO_BUDGETS) for rows in runs() for r in rows if r["model"] == "gemma2"]),)


def verdict() -> tuple[str, str]:
    """docs/generation.md: whether most dense rows (default) are within 1.05x, and whether Mixtral's are not."""
    dense = [ratio(r, DEFAULT) for rows in runs() for r in rows if r["model"] in DENSE]
    most = "most" if 2 * sum(v <= TARGET for v in dense) > len(dense) else "few"
    return most, "Mixtral's are not" if min(_mixtral()) > TARGET else "Mixtral's too on some"


def settings() -> tuple[str, ...]:
    """``benchmarks/generate.py``'s defaults as performance.md describes them: new tokens, rounds, processes, threads,
    prompt,
    layers, hidden size, vocabulary; the past's lengths; key/value heads and head size; decoding steps of a run."""
    def option(name: str) -> str:
        return s.option_default("benchmarks/generate.py", name)

    sizes = s.literal("benchmarks/generate.py", "_SIZES")
    return (option("--tokens"), option("--repeats"), option("--processes"), option("--threads"), option("--prompt"),
            *(str(sizes[k]) for k in ("num_hidden_layers", "hidden_size", "vocab_size")),
            str(int(option("--tokens")) - 1))


def gqa_shapes() -> tuple[str, ...]:
    """The past's lengths over a run (prompt to prompt + new tokens), key/value heads and head size."""
    tokens, prompt = (int(s.option_default("benchmarks/generate.py", o)) for o in ("--tokens", "--prompt"))
    sizes = s.literal("benchmarks/generate.py", "_SIZES")
    return (str(prompt), str(prompt + tokens), str(sizes["num_key_value_heads"]),
            str(sizes["hidden_size"] // sizes["num_attention_heads"]))


def gqa_cases() -> tuple[str]:
    """The cases ``ir2torch/codegen/grouped_attention.py``'s docstring says were compared bit for bit."""
    text = (s.ROOT / "ir2torch" / "codegen" / "grouped_attention.py").read_text(encoding="utf-8")
    return (re.search(r"same order: ([\d,]+) cases", text).group(1),)


STEP = "results-generate-step.md"  # benchmarks/generate_step.py: one decoding step, timed and counted
STEP_OPS = "Ops of one step"  # the line above its ops table
ALL_OFF, MASK_BUILT = "fast paths off (diagnostic)", "no budgets, mask built"
SIZES_OFF, EXPERTS_OFF = "no budgets, sizes by `sym_size`", "no budgets, experts' Python loop"
INDICES_READ = "no budgets, indices read"


def step_ratios(model: str, *columns: str) -> tuple[str, ...]:
    """The step timing's ratios of ``model``'s rebuilds ``columns``, as the table writes them (``"1.05x"``)."""
    head = (s.BENCH / STEP).read_text(encoding="utf-8").split(STEP_OPS)[0]
    rows = [dict(zip(keys, cells)) for keys, cells in _keyed(head) if cells[0] == model]
    assert len(rows) == 1, (model, rows)
    return tuple(rows[0][f"{column} ratio"] for column in columns)


def _keyed(text: str) -> list[tuple[list[str], list[str]]]:
    """The rows of the Markdown tables of ``text``, each with its table's keys (a ``ratio`` column keyed
    ``"<the column before it> ratio"``)."""
    out, keys = [], None
    for line in text.splitlines():
        if not line.startswith("|") or line.startswith("|--"):
            keys = None if not line.startswith("|") else keys
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if keys is None:
            keys = [f"{cells[j - 1]} ratio" if c == "ratio" else c for j, c in enumerate(cells)]
        else:
            out.append((keys, cells))
    return out


def step_ops(model: str, *cells: tuple[str, str]) -> tuple[str, ...]:
    """Cells ``(run, column)`` of the step's ops table for ``model``."""
    rows = {row["run"]: row for row in s.table(STEP, STEP_OPS) if row["model"] == model}
    return tuple(rows[run][column] for run, column in cells)


def step_llama() -> tuple[str, str, str, str]:
    """The ATen ops the mask adds to a Llama step (mask built against no budgets), its ``sym_size`` reads with the
    fast paths off, the ATen ops of the no-budget rebuild and of the original."""
    built, bare, sizes, original = step_ops("llama", (MASK_BUILT, "ATen ops"), (NO_BUDGETS, "ATen ops"),
                                            (ALL_OFF, "`sym_size` reads"), ("original", "ATen ops"))
    return str(int(built) - int(bare)), sizes, bare, original
