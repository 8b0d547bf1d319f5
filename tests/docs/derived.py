"""What the figures of :data:`tests.docs.figures.FIGURES` are compared with, where a row needs more than one source
function of :mod:`tests.docs.sources`: a figure derived from a constant, a results table's cells, or several
sources at once. Each returns the figures as the page writes them (strings)."""

from __future__ import annotations

import re
import sys

from tests.docs import sources as s


def opaque(row: str) -> tuple[str, ...]:
    """A row of the opaque-leaves sweep table (``benchmarks/results-sweep-opaque.md``, which performance.md copies):
    (zoo version, export cannot trace, exact with auto, equal to export's modules) read from its cells."""
    cells = {c: s.cell("results-sweep-opaque.md", None, row + "...", c)
             for c in ("export cannot trace", 'exact with `opaque="auto"`')}
    exact = re.match(r"\*\*(\d+)[ *(]", cells['exact with `opaque="auto"`'])
    equal = re.search(r"\+(\d+) equal", cells['exact with `opaque="auto"`'])
    return (re.search(r"(\d+\.\d+)\.\d+", row).group(1) if "transformers" in row else "",
            cells["export cannot trace"], exact.group(1) if exact else "", equal.group(1) if equal else "")


def transformers_opaque() -> tuple[str, ...]:
    """README's transformers figures: exact with opaque leaves, export cannot trace, version, equal to export's."""
    version, cannot, exact, equal = opaque("transformers 5.24.0")
    return exact, cannot, version, equal


def brevitas_opaque() -> tuple[str, ...]:
    """README's brevitas figure: how many examples export cannot trace (all of them exact with opaque leaves)."""
    _, cannot, exact, _ = opaque("brevitas examples")
    return (cannot,) if cannot == exact else (f"{exact} of {cannot}",)


def ir_load_70b() -> tuple[str, str]:
    """The IR file of the 70B-dims Llama and the bound its ``IR.load`` time is measured under."""
    size, = s.target("results-quick.md", "IR file, Llama-3-70B dims (80 layers; issue 32)")
    name = "IR.load, Llama-3-70B dims (80 layers; issue 32)"
    limit = s.cell("results-quick.md", "Targets", name, "limit").removeprefix("<= ").removesuffix(" s")
    met = s.cell("results-quick.md", "Targets", name, "met")
    return size, limit if met == "yes" else f"not met: {s.target('results-quick.md', name)[0]}"


def power_of_ten(n: int) -> str:
    """The exponent of ``n``, a power of ten."""
    assert n == 10 ** (len(str(n)) - 1), n
    return str(len(str(n)) - 1)


def flop_budget() -> tuple[str, str]:
    """``max_flops="auto"``: FLOPs per parameter (thin-space thousands, as the page writes them) and the floor."""
    from ir2torch.run_safety import flops

    return f"{flops.FLOPS_PER_PARAMETER:,}".replace(",", " "), power_of_ten(flops.MIN_FLOPS)


def fan_out() -> tuple[str]:
    """The call fan-out bound (graph nodes per forward, expanded) as a power of ten."""
    from common import expansion

    return (power_of_ten(expansion.MAX_EXPANDED_NODES),)


FOLD_ROWS = {"ResNet (basic)": "resnet", "ResNet (bottleneck)": "resnet_bottleneck", "RegNet": "regnet",
              "MobileNetV1": "mobilenet_v1", "MobileNetV2": "mobilenet_v2", "EfficientNet": "efficientnet",
              "MobileViT": "mobilevit", "SegFormer": "segformer", "LeViT": "levit"}
TIMM_FOLD = [("LCNet-050", "lcnet_050", ""), ("MobileNetV3-small-050", "mobilenetv3_small_050", ""),
              ("EfficientNet-B0", "efficientnet_b0", ""), ("RegNetX-002", "regnetx_002", ""),
              ("RepVGG-A0", "repvgg_a0", r" \(the identity branch's (\d+) follow no layer\)"),
              ("FastViT-T8", "fastvit_t8", r" \((\d+) normalize a block's input\)"),
              ("DenseNet-121", "densenet121", r" \((\d+) follow a concatenation\)")]


def fold(key: str) -> tuple[str, str]:
    """Batch norms of a corpus CNN and how many fold (``tests/rewrite/test_batchnorm.py`` asserts every one)."""
    n = str(s.literal("tests/rewrite/test_batchnorm.py", "FOLDED")[key])
    return n, n


def timm_fold() -> tuple[str, ...]:
    """Folded of all batch norms, and those left, of the timm CNNs ``tests/ecosystems/test_timm_fold.py`` asserts."""
    cases = s.literal("tests/ecosystems/test_timm_fold.py", "CASES")
    out: list[str] = []
    for _, key, left in TIMM_FOLD:
        folded, kept, _ = cases[key]
        out += [str(folded), str(folded + kept), *([str(kept)] if left else [])]
    return tuple(out)


def lazy_nodes() -> tuple[str]:
    """The node count from which a rebuilt graph gets its code at first use, as the pages write it."""
    from ir2torch.codegen.lazy import LAZY_NODES

    return (f"{LAZY_NODES:,}".replace(",", " "),)


def thousands(n: str) -> str:
    """``9365`` as the pages write it: ``9 365``."""
    return f"{int(n):,}".replace(",", " ")


def view_open() -> tuple[str, ...]:
    """The layout library's size (kB) and the view's load figures (``benchmarks/results-view.md``)."""
    dagre = (s.ROOT / "common" / "htmlview" / "dagre.min.js").stat().st_size
    return (str(round(dagre / 1000)), *s.view("open", "block 41 + graph of model", "runs", "cores"))


def view_overlay() -> tuple[str, ...]:
    entries, with_mb, without_mb = s.view("overlay entries", "MB + overlay", "MB")
    return (thousands(entries), with_mb, without_mb.removesuffix(" MB"),
            *s.view("open + overlay", "open", "block 41 + graph of model + overlay", "block 41 + graph of model"))


def overlay_bounds() -> tuple[str, str]:
    from common.htmlview import overlay

    return str(overlay.MAX_BYTES >> 20), power_of_ten(overlay.MAX_ENTRIES)


def random_models() -> tuple[str, ...]:
    """Examples of the eval- and train-mode random-model property tests, by default and under the long profile."""
    source = (s.ROOT / "tests" / "property" / "test_random_models.py").read_text(encoding="utf-8")
    counts = re.findall(r"max_examples=examples\((\d+)\)", source)
    scale = re.search(r"^SCALE = (\d+) if", (s.ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"),
                      flags=re.M)
    return (*counts[:2], *(str(int(c) * int(scale.group(1))) for c in counts[:2]))


def surface_probe() -> tuple[str, ...]:
    """The registry sweeps the surface probe read and the models their overloads made exact; the one model the page
    names as still refused (mask2former, by the memory checks) is counted as refused before."""
    exact = s.swept_surface_models()
    return (*s.sweep("transformers", "models"), str(exact["transformers"] + 1),
            *s.sweep("timm, default surface", "models"), str(exact["timm"]),
            *s.sweep("torchvision", "models"), str(exact["torchvision"]),
            str(sum(exact.values())), str(sum(exact.values()) + 1))


def python_tested() -> tuple[str]:
    """The Python running the tests (the version the project tests)."""
    return (f"{sys.version_info.major}.{sys.version_info.minor}",)


def timm_sweeps() -> tuple[str, ...]:
    """The two seeded timm samples of results-sweep.md: exact of models, in the file's order."""
    out: list[str] = []
    for title, models, counts in s.sweeps():
        if title == "timm":
            out += [str(counts.get("exact", 0)), str(models)]
    return tuple(out)


def lower_rss_7b() -> tuple[str]:
    """Peak RSS of lowering the Llama-2-7B dims on meta (``benchmarks/results.md``)."""
    return (s.cell("results.md", "weight-free scale: Llama-2-7B dimensions on meta", "peak RSS of lower...", "value"),)


# -- docs/performance.md's prose: ranges and figures of the results files its tables are copied from -------------


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
    import statistics

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


def forward_budget() -> tuple[str, str]:
    """``results-forward-budget.md``: the rebuild with ``max_bytes=None`` against eager, and the first-call probe
    against an eager call, least and most over its models."""
    rows = s.table("results-forward-budget.md")
    return _span([r["None / eager"] for r in rows]), _span([r["probe / eager call"] for r in rows])


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
    _, cannot, exact, _ = opaque(row)
    median = re.match(r"median ([\d.]+) %", s.cell("results-sweep-opaque.md", None, row + "...",
                                                    "parameters inside opaque leaves (exact ones)"))
    return (exact, re.match(r"\d+", cannot).group(0), *([median.group(1)] if share else []))


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
