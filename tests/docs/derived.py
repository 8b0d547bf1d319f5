"""What the figures of :data:`tests.docs.figures.FIGURES` are compared with, where a row needs more than one source
function of :mod:`tests.docs.sources`: a figure derived from a constant, a results table's cells, or several
sources at once. Each returns the figures as the page writes them (strings)."""

from __future__ import annotations

import re
import sys

from tests.docs import sources as s


def opaque(row: str) -> tuple[str, ...]:
    """A row of the opaque-leaves sweep table (``benchmarks/results-sweep-opaque.md``, which performance.md copies):
    (zoo version, export cannot trace, exact with auto, equal to export's modules) read from its cells; a row
    re-measured after a change keeps the figures before it as ``(N before)`` / ``(before: N of M, ...)``."""
    cells = {c: s.cell("results-sweep-opaque.md", None, row + "...", c)
             for c in ("export cannot trace", 'exact with `opaque="auto"`')}
    auto = cells['exact with `opaque="auto"`']
    exact = re.match(r"\*\*(\d+)[ *(]", auto) or re.search(r"before: (\d+) of", auto)
    equal = re.search(r"\+(\d+) equal", auto)
    cannot = re.search(r"\((\d+) before\)", cells["export cannot trace"])
    return (re.search(r"(\d+\.\d+)\.\d+", row).group(1) if "transformers" in row else "",
            cannot.group(1) if cannot else cells["export cannot trace"], exact.group(1) if exact else "",
            equal.group(1) if equal else "")


def transformers_opaque() -> tuple[str, ...]:
    """README's transformers figures: exact with opaque leaves, export cannot trace, version, equal to export's."""
    version, cannot, exact, equal = opaque("transformers 5.24.0")
    return exact, cannot, version, equal


def transformers_real_share() -> tuple[str]:
    """README's median share of parameters inside opaque leaves at transformers 5.24's default dimensions."""
    text = s.cell("results-sweep-opaque.md", None, "transformers 5.24.0...",
                  "the same at the default configuration's dimensions")
    return (re.match(r"median ([\d.]+) %", text).group(1),)


def brevitas_opaque() -> tuple[str, ...]:
    """README's brevitas figure: how many examples export could not trace (all of them exact with opaque leaves
    then, and by default now)."""
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
    """The registry sweeps the surface probe read and the models their overloads made exact (timm: a sample, then
    the whole registry, whose models within the size limit are those not skipped); the one model the page names as
    still refused (mask2former, by the memory checks) is counted as refused before."""
    exact = s.swept_surface_models()
    return (*s.sweep("transformers", "models"), str(exact["transformers"] + 1),
            str(exact["timm"]), *s.sweep("timm, default surface", "models"),
            *s.sweep("timm, whole registry", "models"),
            str(sum(int(n) for n in s.sweep("timm, whole registry", "exact", "refused"))),
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
