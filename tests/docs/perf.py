"""What docs/performance.md's prose figures are compared with (rows of :data:`tests.docs.figures.FIGURES`): spans,
counts and settings read from the results files its tables are copied from (``scripts/doc_blocks.py``) and from the
benchmark scripts' own constants. Each returns the figures as the page writes them (strings)."""

from __future__ import annotations

import math
import re
import statistics

from tests.docs import derived as d
from tests.docs import sources as s


def _span(cells: list[str], unit: str = "x") -> str:
    """``"0.44-0.88x"`` from cells ``"0.62x"``, ...: the least and the greatest, as the table writes them (one value
    when they are equal)."""
    ordered = sorted(cells, key=lambda c: float(c.removesuffix(unit)))
    low, high = ordered[0].removesuffix(unit), ordered[-1].removesuffix(unit)
    return f"{low}{unit}" if low == high else f"{low}-{high}{unit}"


SMALL = ("bert", "gpt2", "llama", "resnet", "mobilenet_v2")
MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "olmoe")


def _column(path: str, section: str, column: str, models: tuple[str, ...]) -> list[str]:
    return [row[column] for row in s.table(path, section) if next(iter(row.values())) in models]


def status() -> tuple[str, ...]:
    """The Status paragraph: targets met of all, convert / export on the small configs, the MoE decoders, the 7B and
    70B dimensions, and the missed target's measure and limit (``benchmarks/results.md``)."""
    rows = s.table("results.md", "Targets")
    missed = [r for r in rows if r["met"] != "yes"]
    assert len(missed) == 1, missed
    convert = {r["target"].removeprefix("convert / export, "): r["measured"] for r in rows}
    return (str(len(rows) - len(missed)), str(len(rows)), _span([convert[m] for m in SMALL]),
            _span([convert[m] for m in MOE]), convert["Llama-2-7B dims (32 layers, meta)"],
            convert["Llama-3-70B dims (80 layers, meta)"], missed[0]["measured"],
            missed[0]["limit"].removeprefix("<= "))


def unflatten_spans() -> tuple[str, str]:
    """(export + unflatten) / export and convert / (export + unflatten) over the small configs."""
    section = "## convert:"
    return (_span(_column("results.md", section, "(export + unflatten) / export", SMALL)),
            _span(_column("results.md", section, "convert / (export + unflatten)", SMALL)))


def forward_spans(models: tuple[str, ...] = SMALL) -> tuple[str, str]:
    """unflatten / eager and ep.module() / eager over ``models``' rows of the forward table."""
    section = "## forward:"
    return (_span(_column("results.md", section, "unflatten / eager", models)),
            _span(_column("results.md", section, "ep.module() / eager", models)))


def moe() -> tuple[str, ...]:
    """The MoE decoders' rows of the full run: convert / export, rebuilt / eager, ep.module() and unflatten."""
    convert = _span(_column("results.md", "## convert:", "convert / export", MOE))
    rebuilt = _span(_column("results.md", "## forward:", "rebuilt / eager", MOE))
    unflatten, module = forward_spans(MOE)
    return convert, rebuilt, module, unflatten


def trace_once_scale() -> tuple[str, ...]:
    """convert / export at 70B dimensions (with lower, file, load) and at 7B dimensions (with lower)."""
    return s.target("results.md", "convert / export, Llama-3-70B dims (80 layers, meta)",
                    "(convert + lower) / export, Llama-3-70B dims (80 layers, meta)",
                    "IR file, Llama-3-70B dims (80 layers; issue 32)",
                    "IR.load, Llama-3-70B dims (80 layers; issue 32)",
                    "convert / export, Llama-2-7B dims (32 layers, meta)",
                    "(convert + lower) / export, Llama-2-7B dims (32 layers, meta)")


def slope() -> tuple[str, str, str]:
    """Conversion's and export's per-layer slopes (the scaling section's bullets) and their ratio (its target)."""
    text = (s.BENCH / "results.md").read_text(encoding="utf-8")
    match = re.search(r"convert slope \(least squares\): \*\*([\d.]+) ms/layer\*\* \(export: ([\d.]+) ms/layer", text)
    assert match, "results.md no longer states the slopes"
    ratio, = s.target("results.md", "convert's per-layer slope / export's (issue 32)")
    return match.group(1), match.group(2), ratio.replace("%", " %")


def once_lean() -> tuple[str, str, str]:
    """once / lean export over the corpus: median, max and entries above 1.05x."""
    cells = [float(r["once/lean"]) for r in s.table("results-trace-once-corpus.md")]
    return f"{statistics.median(cells):.2f}x", f"{max(cells):.2f}x", str(sum(c > 1.05 for c in cells))


def deepseek_alike() -> tuple[str]:
    """DeepSeek-V3's MoE layers: its layers but the first dense ones (``benchmarks/moe_frontier.py``)."""
    config = s.literal("benchmarks/moe_frontier.py", "DEEPSEEK_V3")
    return (str(config["num_hidden_layers"] - config["first_k_dense_replace"]),)


def compile_corpus() -> tuple[str, str, str]:
    """``results-compile.md``: models compiled as one graph of all, and the largest max abs diff (its model)."""
    rows = s.table("results-compile.md")
    ok = [r for r in rows if r["result"].startswith("ok")]
    worst = max(ok, key=lambda r: float(r["result"].rsplit(" ", 1)[1]))
    return str(len(ok)), str(len(rows)), worst["result"].rsplit(" ", 1)[1]


def large_files() -> tuple[str, str]:
    """``results-large-files.md``: the one-call time of the graph-module document as saved, and what a separate
    ``IR.load`` + ``convert(ir)`` costs more, least and most over the documents."""
    rows = s.table("results-large-files.md")
    one_call = [r["`ir2torch.convert(path)` (s)"].strip("*") for r in rows]
    extra = [float(r["IR.load + rebuild (s)"]) - float(c) for r, c in zip(rows, one_call)]
    modules = [c for r, c in zip(rows, one_call) if r["document"].startswith("10**5 small graph modules, as saved")]
    return modules[0], f"{min(extra):.2f}-{max(extra):.2f}"


def large_files_bound() -> tuple[str]:
    """``results-large-files.md``: the whole seconds the one-call load of every document ``IR.save`` writes stays
    under, the all-graph-modules one aside."""
    saved = re.compile(r"as `IR\.save` writes it|as saved")
    rows = [r for r in s.table("results-large-files.md") if saved.search(r["document"])]
    rows = [r for r in rows if "graph modules, as saved" not in r["document"]]
    assert rows, "results-large-files.md no longer has documents as saved"
    return (str(math.ceil(max(float(r["`ir2torch.convert(path)` (s)"].strip("*")) for r in rows))),)


def forward_budget() -> tuple[str]:
    """``results-forward-budget.md``: the first-call probe against an eager call, least and most over its
    models."""
    rows = s.table("results-forward-budget.md")
    return (_span([r["probe / eager call"] for r in rows]),)


def run_safety() -> tuple[str, str]:
    """``results-run-safety.md``: the default rebuild against ``bare`` (least-most, as the table writes it) and a
    checked call against ``bare`` (least-most, in whole times)."""
    rows = s.table("results-run-safety.md")

    def ratio(cell: str) -> str:
        return re.search(r"\(([\d.]+x)\)", cell).group(1)

    default = _span([ratio(r["default"]) for r in rows])
    checked = sorted(float(ratio(r["checked (data-dependent)"])[:-1]) for r in rows)
    return default.removesuffix("x"), f"{checked[0]:.0f}-{checked[-1]:.0f}"


def run_rounds() -> tuple[str, ...]:
    """Rounds of the full run of ``benchmarks/run.py`` (its ``FULL`` scenarios, read as text): convert, 7B scale
    (and its warm-up), rebuild + load, forward, ONNX, the layer sweep."""
    text = (s.ROOT / "benchmarks" / "run.py").read_text(encoding="utf-8")
    full = text[text.index("FULL"):text.index("QUICK")]

    def field(scenario: str, name: str) -> str:
        return re.search(rf'"{scenario}": {{[^}}]*"{name}": (\d+)', full).group(1)

    return (field("convert", "rounds"), field("scale", "rounds"), field("scale", "warmup"),
            field("rebuild_load", "rounds"), field("forward", "rounds"), field("onnx", "rounds"),
            field("sweep", "rounds"))


def small_configs() -> tuple[str, ...]:
    """The small configs of ``benchmarks/models.py``: MobileNetV2's depth multiplier, the image side (twice) and
    the text inputs' length."""
    text = (s.ROOT / "benchmarks" / "models.py").read_text(encoding="utf-8")
    image = str(s.literal("benchmarks/models.py", "IMAGE"))
    return (re.search(r"depth_multiplier=([\d.]+)", text).group(1), image, image,
            str(s.literal("benchmarks/models.py", "SEQ")))


def opaque_counts(row: str, share: bool = False) -> tuple[str, ...]:
    """A row of the opaque-leaves sweep: exact with ``opaque="auto"`` of those export cannot trace (and the median
    share of parameters in opaque leaves)."""
    _, cannot, exact, _ = d.opaque(row)
    median = re.search(r"median ([\d.]+) %", s.cell("results-sweep-opaque.md", None, row + "...",
                                                     "parameters inside opaque leaves (exact ones)"))
    return (exact, re.match(r"\d+", cannot).group(0), *([median.group(1)] if share else []))


def brevitas_whole_sweep() -> tuple[str, str]:
    """The brevitas row of the opaque-leaves sweep: exact by default of all its models (the whole sweep re-run)."""
    default = s.cell("results-sweep-opaque.md", None, "brevitas examples...", "exact by default")
    models = s.cell("results-sweep-opaque.md", None, "brevitas examples...", "models")
    exact = re.search(r"whole sweep re-run .*?: (\d+) exact, none `export failed`", default)
    assert exact, "the brevitas row no longer reports the whole sweep's re-run"
    return exact.group(1), models


def lean_step() -> tuple[str, str, str]:
    """``results-trace-once-corpus.md``: once / export's median before ``lean_export`` (the run the file names) and
    now, and the highest entry now."""
    text = (s.BENCH / "results-trace-once-corpus.md").read_text(encoding="utf-8")
    before = re.search(r"had once/export median\s+([\d.]+x), max", text)
    assert before, "results-trace-once-corpus.md no longer names the run before lean_export"
    _, worst, median = s.trace_once_corpus()
    return before.group(1), median, worst


def guarded_run() -> tuple[str]:
    """Models of the guarded corpus run (``results-corpus-guarded.md``'s first line)."""
    text = (s.BENCH / "results-corpus-guarded.md").read_text(encoding="utf-8")
    return (re.search(r"^- (\d+) corpus models", text, flags=re.M).group(1),)


def small_sizes() -> tuple[str, ...]:
    """``benchmarks/models.py``: BERT's layers and hidden size (the text models share them), ResNet's channels, and
    Mixtral's experts and experts per token (the MoE decoders share them)."""
    text = (s.ROOT / "benchmarks" / "models.py").read_text(encoding="utf-8")
    bert = re.search(r"BertConfig\(num_hidden_layers=(\d+), hidden_size=(\d+)", text)
    resnet = re.search(r"hidden_sizes=\[(\d+), (\d+)\]", text)
    moe = re.search(r"num_local_experts=(\d+), num_experts_per_tok=(\d+)", text)
    return (*bert.groups(), *resnet.groups(), *moe.groups())


def quick_run() -> tuple[str, ...]:
    """``benchmarks/run.py --quick``: the layers of its scale scenario against the full run's scale and rebuild
    ones, and its sweep's layers."""
    text = (s.ROOT / "benchmarks" / "run.py").read_text(encoding="utf-8")
    full, quick = text[text.index("FULL"):text.index("QUICK")], text[text.index("QUICK"):]

    def layers(part: str, scenario: str) -> str:
        return re.search(rf'"{scenario}": {{"layers": ([\d, \[\]]+?),? "', part).group(1)

    sweep = "/".join(re.findall(r"\d+", layers(quick, "sweep")))
    return layers(quick, "scale"), layers(full, "scale"), layers(full, "rebuild_load"), sweep


def corpus_rounds() -> tuple[str, str, str]:
    """Warm-up rounds, timed rounds and sample length of the corpus run (``results-corpus.md``'s first line)."""
    text = (s.BENCH / "results-corpus.md").read_text(encoding="utf-8")
    match = re.search(r"(\d+) timed rounds \(~(\d+ ms) samples\) after (\d+) warm-up rounds", text)
    return match.group(3), match.group(1), match.group(2)


def rebuild_model() -> tuple[str, str]:
    """GPT-2 small's parameters and file size in the rebuild + load scenario (``results.md``)."""
    text = (s.BENCH / "results.md").read_text(encoding="utf-8")
    match = re.search(r"\(([\d.]+) M parameters, (\d+ MB) \.safetensors\)", text)
    return match.group(1), match.group(2)


def sweep_model() -> tuple[str]:
    """The hidden size of the full run's layer sweep (its heading in ``results.md``)."""
    return (re.search(r"small Llama, hidden (\d+)", (s.BENCH / "results.md").read_text(encoding="utf-8")).group(1),)


def guards_inputs() -> tuple[str, str]:
    """``benchmarks/guards.py``'s default batch and the text inputs' length (``benchmarks/models.py``)."""
    return s.option_default("benchmarks/guards.py", "--batch"), str(s.literal("benchmarks/models.py", "SEQ"))
