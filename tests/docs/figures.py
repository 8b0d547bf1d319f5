"""The figures README.md and docs/*.md quote, each tied to where it comes from: one row per figure (or group of
figures read by one phrase) of :data:`FIGURES`, checked by ``tests/docs/test_figures.py``.

A row is ``Figure(page, what, pattern, source)``: ``pattern`` is a regular expression searched in the page's
prose with its whitespace collapsed (a phrase may break across lines); each of its groups is a figure, and every
match must read exactly the strings ``source()`` returns (:mod:`tests.docs.sources`: the registries, tables and
pin files the code reads, or the benchmark results kept in ``benchmarks/``). A page that no longer says the
phrase fails too, so a rewritten sentence is re-tied here rather than dropped.

``python -m tests.docs.figures`` lists every number in the pages' prose (outside code blocks, inline code and
link targets) and marks those a row checks: the inventory of issue 52 point 5.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from tests.docs import sources as s


@dataclass(frozen=True)
class Figure:
    """One phrase of a page and where its figures come from."""

    page: str
    what: str
    pattern: str
    source: Callable[[], tuple[str, ...]]

    @property
    def id(self) -> str:
        return f"{self.page}: {self.what}"


def _opaque(row: str) -> tuple[str, ...]:
    """A row of performance.md's opaque-leaves sweep table: (zoo version, export cannot trace, exact with auto,
    equal to export's modules) read from its cells."""
    cells = {c: s.cell("docs/performance.md", "| zoo | models | exact by default", row + "...", c)
             for c in ("export cannot trace", 'exact with `opaque="auto"`')}
    exact = re.match(r"\*\*(\d+)[ *(]", cells['exact with `opaque="auto"`'])
    equal = re.search(r"\+(\d+) equal", cells['exact with `opaque="auto"`'])
    return (re.search(r"(\d+\.\d+)\.\d+", row).group(1) if "transformers" in row else "",
            cells["export cannot trace"], exact.group(1) if exact else "", equal.group(1) if equal else "")


def _transformers_opaque() -> tuple[str, ...]:
    version, cannot, exact, equal = _opaque("transformers 5.24.0")
    return exact, cannot, version, equal


def _brevitas_opaque() -> tuple[str, ...]:
    _, cannot, exact, _ = _opaque("brevitas examples")
    return (cannot,) if cannot == exact else (f"{exact} of {cannot}",)


def _ir_load_70b() -> tuple[str, str]:
    """The IR file of the 70B-dims Llama and the bound its ``IR.load`` time is measured under."""
    size, = s.target("results-quick.md", "IR file, Llama-3-70B dims (80 layers; issue 32)")
    name = "IR.load, Llama-3-70B dims (80 layers; issue 32)"
    limit = s.cell("results-quick.md", "Targets", name, "limit").removeprefix("<= ").removesuffix(" s")
    met = s.cell("results-quick.md", "Targets", name, "met")
    return size, limit if met == "yes" else f"not met: {s.target('results-quick.md', name)[0]}"


def _power_of_ten(n: int) -> str:
    assert n == 10 ** (len(str(n)) - 1), n
    return str(len(str(n)) - 1)


def _flop_budget() -> tuple[str, str]:
    """``max_flops="auto"``: FLOPs per parameter (thin-space thousands, as the page writes them) and the floor."""
    from ir2torch.run_safety import flops

    return f"{flops.FLOPS_PER_PARAMETER:,}".replace(",", " "), _power_of_ten(flops.MIN_FLOPS)


def _fan_out() -> tuple[str]:
    from common import expansion

    return (_power_of_ten(expansion.MAX_EXPANDED_NODES),)


_FOLD_ROWS = {"ResNet (basic)": "resnet", "ResNet (bottleneck)": "resnet_bottleneck", "RegNet": "regnet",
              "MobileNetV1": "mobilenet_v1", "MobileNetV2": "mobilenet_v2", "EfficientNet": "efficientnet",
              "MobileViT": "mobilevit", "SegFormer": "segformer", "LeViT": "levit"}
_TIMM_FOLD = [("LCNet-050", "lcnet_050", ""), ("MobileNetV3-small-050", "mobilenetv3_small_050", ""),
              ("EfficientNet-B0", "efficientnet_b0", ""), ("RegNetX-002", "regnetx_002", ""),
              ("RepVGG-A0", "repvgg_a0", r" \(the identity branch's (\d+) follow no layer\)"),
              ("FastViT-T8", "fastvit_t8", r" \((\d+) normalize a block's input\)"),
              ("DenseNet-121", "densenet121", r" \((\d+) follow a concatenation\)")]


def _fold(key: str) -> tuple[str, str]:
    """Batch norms of a corpus CNN and how many fold (``tests/rewrite/test_batchnorm.py`` asserts every one)."""
    n = str(s.literal("tests/rewrite/test_batchnorm.py", "FOLDED")[key])
    return n, n


def _timm_fold() -> tuple[str, ...]:
    """Folded of all batch norms, and those left, of the timm CNNs ``tests/ecosystems/test_timm_fold.py`` asserts."""
    cases = s.literal("tests/ecosystems/test_timm_fold.py", "CASES")
    out: list[str] = []
    for _, key, left in _TIMM_FOLD:
        folded, kept, _ = cases[key]
        out += [str(folded), str(folded + kept), *([str(kept)] if left else [])]
    return tuple(out)


def _lazy_nodes() -> tuple[str]:
    from ir2torch.codegen.lazy import LAZY_NODES

    return (f"{LAZY_NODES:,}".replace(",", " "),)


def _thousands(n: str) -> str:
    """``9365`` as the pages write it: ``9 365``."""
    return f"{int(n):,}".replace(",", " ")


def _view_open() -> tuple[str, ...]:
    """The layout library's size (kB) and the view's load figures (``benchmarks/results-view.md``)."""
    dagre = (s.ROOT / "common" / "htmlview" / "dagre.min.js").stat().st_size
    return (str(round(dagre / 1000)), *s.view("open", "block 41 + graph of model", "runs", "cores"))


def _view_overlay() -> tuple[str, ...]:
    entries, with_mb, without_mb = s.view("overlay entries", "MB + overlay", "MB")
    return (_thousands(entries), with_mb, without_mb.removesuffix(" MB"),
            *s.view("open + overlay", "open", "block 41 + graph of model + overlay", "block 41 + graph of model"))


def _overlay_bounds() -> tuple[str, str]:
    from common.htmlview import overlay

    return str(overlay.MAX_BYTES >> 20), _power_of_ten(overlay.MAX_ENTRIES)


def _random_models() -> tuple[str, ...]:
    """Examples of the eval- and train-mode random-model property tests, by default and under the long profile."""
    source = (s.ROOT / "tests" / "property" / "test_random_models.py").read_text(encoding="utf-8")
    counts = re.findall(r"max_examples=examples\((\d+)\)", source)
    scale = re.search(r"^SCALE = (\d+) if", (s.ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"),
                      flags=re.M)
    return (*counts[:2], *(str(int(c) * int(scale.group(1))) for c in counts[:2]))


def _python_tested() -> tuple[str]:
    return (f"{sys.version_info.major}.{sys.version_info.minor}",)


_TORCHVISION_OTHER = "torchvision segmentation, quantization, video"
_SURFACE_PHRASES = [("README.md", r"the (\d+) overloads real models' conversions emit"),
                    ("docs/ir-spec.md", r"the surface is \*\*(\d+) overloads\*\*"),
                    ("docs/ir-spec.md", r"the (\d+) overloads real models' conversions emit"),
                    ("docs/limitations.md", r"the (\d+) overloads real models' conversions emit")]

FIGURES: list[Figure] = [
    # -- counts from the code ------------------------------------------------------------------------------------
    Figure("README.md", "handled classes", r"(\d+) `torch\.nn` and `torch\.ao` classes", s.handled_classes),
    Figure("docs/concepts.md", "handled classes", r"\.\.\. (\d+) classes\)", s.handled_classes),
    Figure("docs/supported.md", "handled classes", r"(\d+) `torch\.nn` and `torch\.ao` quantization classes",
           s.handled_classes),
    *(Figure(page, f"default surface size ({i})", rx, s.surface_size) for i, (page, rx) in enumerate(_SURFACE_PHRASES)),
    Figure("docs/ir-spec.md", "surface out of the allowed overloads",
           r"\*\*\d+ overloads\*\* of the (\d+) the classes allow",
           partial(s.op_classes, "2.13", "allowed")),
    Figure("docs/ir-spec.md", "op table size", r"For torch (\S+) \((\d+) overloads\)",
           lambda: (s.pin("torch")[0], *s.op_classes("2.13", "all"))),
    *(Figure("docs/ir-spec.md", f"op class {c}", rf"\| `{c}` \| (\d+) \|", partial(s.op_classes, "2.13", c))
      for c in ("pure", "allocating", "refused")),
    Figure("docs/ir-spec.md", "surface from the corpus", r"whose class is allowed \((\d+) overloads\)",
           partial(s.surface_origin, "corpus")),
    Figure("docs/ir-spec.md", "surface extras", r"with a reason each \((\d+)\)", partial(s.surface_origin, "extra")),
    Figure("docs/ir-spec.md", "surface from the sweeps", r"surface_sweeps\.json`, (\d+) overloads",
           partial(s.surface_origin, "sweep")),
    Figure("docs/ir-spec.md", "surface corpus entries", r"a few common layers: (\d+) entries\)",
           s.surface_corpus_entries),
    Figure("docs/limitations.md", "surface corpus entries", r"measured on the corpus' (\d+) models",
           s.surface_corpus_entries),
    Figure("README.md", "torch 2.14 table changes", r"(\d+) overloads new in it, [^;]*; (\d+) gone",
           partial(s.op_table_changes, "2.13", "2.14")),
    Figure("README.md", "hand-written models", r"configs\) and (\d+) hand-written models",
           lambda: s.zoo_sizes()[:1]),
    Figure("docs/concepts.md", "zoo and transformers models", r"On the (\d+) zoo and `transformers` models",
           s.zoo_total),
    Figure("docs/concepts.md", "code at first use", r"A graph of (\d[\d ]*) nodes or more gets its code", _lazy_nodes),
    Figure("docs/limitations.md", "corpus models", r"from graphs \((\d+) models\)", s.corpus_size),
    Figure("docs/supported.md", "timm sample families",
           r"one model per timm family \((\d+), `tests/ecosystems/timm_sample\.py`; (\d+) more", s.timm_sample),
    Figure("docs/testing.md", "test-newest selection", r"runs the (\d+) test ids of `SELECTION`", s.newest_selection),
    Figure("docs/limitations.md", "FLOP budget per parameter",
           r"default (\d+ \d+) FLOPs per parameter, at least 10\*\*(\d+)",
           _flop_budget),
    Figure("docs/limitations.md", "call fan-out bound", r"the call fan-out \(10\*\*(\d+) graph nodes",
           _fan_out),
    *(Figure("docs/extending.md", f"batch norms folded, {row}", rf"\| {re.escape(row)} \| (\d+) \| (\d+)[ |]",
             partial(_fold, key)) for row, key in _FOLD_ROWS.items()),
    Figure("docs/extending.md", "batch norms folded, timm",
           ", ".join(rf"{re.escape(name)} (\d+) of (\d+){left}" for name, _, left in _TIMM_FOLD), _timm_fold),
    # -- pinned versions -----------------------------------------------------------------------------------------
    Figure("README.md", "torch pin", r"\*\*torch (\S+)\*\* is supported: every test runs on torch (\S+) \(",
           lambda: (*s.minor("torch"), *s.pin("torch"))),
    Figure("README.md", "transformers pin", r"transformers (\S+) \(pinned\)", partial(s.pin, "transformers")),
    Figure("README.md", "ecosystem pins",
           r"timm (\S+), diffusers (\S+), torchao (\S+), brevitas (\S+), torchvision (\S+): the table",
           partial(s.pin, "timm", "diffusers", "torchao", "brevitas", "torchvision")),
    Figure("README.md", "requires-python", r"`requires-python >= (\S+)`", s.requires_python),
    Figure("README.md", "Python tested", r"Python (\S+) is the version tested", _python_tested),
    Figure("docs/supported.md", "torch pin", r"torch (\d+\.\d+)\b", partial(s.minor, "torch")),
    # -- benchmark results ---------------------------------------------------------------------------------------
    Figure("README.md", "70B-dims IR file and load", r"is a (\S+ MB) file that loads in under (\S+) s\.",
           _ir_load_70b),
    Figure("README.md", "70B-dims convert and lower / export",
           r"takes (\S+x) the time of one `torch\.export` of it, and lowering it as well (\S+x);",
           partial(s.target, "results-quick.md", "convert / export, Llama-3-70B dims (80 layers, meta; issue 32)",
                   "(convert + lower) / export, Llama-3-70B dims (80 layers, meta; issue 32)")),
    Figure("README.md", "corpus convert / export",
           r"the (\d+) models of the test corpus converts in at most (\S+x) of its export \(median (\S+x)\)",
           s.trace_once_corpus),
    Figure("README.md", "opaque transformers",
           r"(\d+) of the (\d+) transformers (\S+) types export cannot trace then rebuild exactly, (\d+) more equal",
           _transformers_opaque),
    Figure("README.md", "opaque brevitas", r"all (\d+) brevitas examples export cannot trace", _brevitas_opaque),
    Figure("docs/flat-ir.md", "7B-dims lowering peak RSS", r"lowers on `meta` at (\d+ MB) peak RSS",
           lambda: (s.cell("results.md", "weight-free scale: Llama-2-7B dimensions on meta", "peak RSS of lower...",
                           "value"),)),
    Figure("docs/generation.md", "generate benchmark's settings",
           r"\(median of (\d+) runs, (\d+) thread; small configs: (\d+) layers, hidden size (\d+)\)",
           lambda: (s.option_default("benchmarks/generate.py", "--repeats"),
                    s.option_default("benchmarks/generate.py", "--threads"),
                    *(str(s.literal("benchmarks/generate.py", "_SIZES")[k])
                      for k in ("num_hidden_layers", "hidden_size")))),
    Figure("docs/cli.md", "view of the 70B-dims Llama: size",
           r"\(80 layers, (\d+) implementations, converted on `meta`\) gives a ([\d.]+ MB) file",
           partial(s.view, "implementations", "MB")),
    Figure("docs/cli.md", "view of the 70B-dims Llama: load",
           r"the layout library is (\d+) kB of it\) that opens in (\d+ ms) in headless Chromium, root graph drawn, and "
           r"in (\d+ ms) with block 41 expanded and the 80-layer `model` graph laid out \(the page's own measure, "
           r"median of (\d+), (\d+) cores;", _view_open),
    Figure("docs/cli.md", "view of the 70B-dims Llama: overlay",
           r"\((\d[\d ]*) entries, ([\d.]+ MB) instead of ([\d.]+)\) opened in (\d+ ms), (\d+ ms) without; with block "
           r"41 and the `model` graph, (\d+ ms) and (\d+ ms)", _view_overlay),
    Figure("docs/cli.md", "view of the 70B-dims Llama: compare",
           r"fused \(([\d.]+ MB)\) opens in (\d+ ms), and in (\d+ ms) with block 41",
           partial(s.view, "MB + compare (QKV fused)", "open + compare (QKV fused)",
                   "block 41 + graph of model + compare (QKV fused)")),
    Figure("docs/cli.md", "Model Explorer graph of the 70B-dims Llama",
           r"expands to (\d[\d ]*) nodes in (\d+) layers \(([\d.]+ MB) as Model Explorer's JSON, built in ([\d.]+ s);",
           lambda: (_thousands(s.view("explorer nodes")[0]), *s.view("explorer layers", "explorer MB", "explorer s"))),
    Figure("docs/cli.md", "view: simpler layering above", r"A graph of more than (\d+) nodes",
           lambda: (s.js_constant("BIG"),)),
    Figure("docs/cli.md", "view: smallest text on screen", r"at (\d+) px or more on screen \(zoom ([\d.]+) at least\)",
           lambda: (f"{10 * float(s.js_constant('READABLE')):g}", s.js_constant("READABLE"))),
    Figure("docs/cli.md", "view: link bounds", r"read their first (\d+) entries, `search` its first (\d+)\s+characters",
           lambda: (s.js_constant("LINK_ITEMS"), s.js_constant("LINK_TEXT"))),
    Figure("docs/cli.md", "overlay bounds", r"strict JSON of at most (\d+) MB and 10\^(\d+) entries", _overlay_bounds),
    Figure("docs/testing.md", "random models", r"(\d+) random models in eval mode and (\d+) in\s+train mode",
           lambda: _random_models()[:2]),
    Figure("docs/testing.md", "random models, long profile", r"ten times as many examples \((\d+) \+ (\d+) models\)",
           lambda: _random_models()[2:]),
    Figure("docs/testing.md", "test-newest budget", r"It stops itself after\s+([\d.]+) minutes \(`--budget`\)",
           lambda: (f"{float(s.option_default('scripts/newest_site.py', '--budget')) / 60:g}",)),
    Figure("docs/testing.md", "torchvision sweeps",
           r"`benchmarks/results-sweep\.md`: torchvision's (\d+) classification models exact, (\d+) of its (\d+) "
           r"segmentation, quantizable and video models",
           lambda: (*s.sweep("torchvision", "exact"), *s.sweep(_TORCHVISION_OTHER, "exact", "models"))),
    Figure("docs/testing.md", "timm sweeps", r"\((\d+) of (\d+) and (\d+) of (\d+); the rest",
           lambda: _timm_sweeps()),
    Figure("docs/testing.md", "diffusers sweep", r"(\d+) diffusers backbones exact",
           partial(s.sweep, "diffusers", "exact")),
    Figure("docs/limitations.md", "swept surface models",
           r"torchvision's (\d+) classification models and (\d+) timm models \(`benchmarks\.surface_probe`\)",
           lambda: (*s.sweep("torchvision", "models"), *s.sweep("timm, default surface", "models"))),
    Figure("docs/limitations.md", "whole timm sweep", r"its last whole sweep, (\d+) exact",
           partial(s.sweep, "timm, whole registry", "exact")),
]


def _timm_sweeps() -> tuple[str, ...]:
    """The two seeded timm samples of results-sweep.md: exact of models, in the file's order."""
    out: list[str] = []
    for title, models, counts in s.sweeps():
        if title == "timm":
            out += [str(counts.get("exact", 0)), str(models)]
    return tuple(out)


_NUMBER = re.compile(r"(?<![\w.-])(?:\d{1,3}(?: \d{3})+|\d+(?:\.\d+)?(?:e-?\d+)?)(?:x|%| ?[kMG]B| ?m?s)?(?![\w-]|\.\d)")


def _prose(text: str) -> str:
    """``text`` with code blocks, inline code and link targets blanked (same length, so offsets still match)."""
    text = re.sub(r"^```.*?^```", lambda m: " " * len(m.group(0)), text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", lambda m: " " * len(m.group(0)), text)
    return re.sub(r"\]\([^)]*\)", lambda m: "]" + " " * (len(m.group(0)) - 1), text)


def inventory() -> dict[str, tuple[int, int]]:
    """``{page: (numbers in the page's prose, figures a row of FIGURES checks)}``; with ``-v`` prints each number."""
    out = {}
    for path in [s.ROOT / "README.md", *sorted((s.ROOT / "docs").glob("*.md"))]:
        page = str(path.relative_to(s.ROOT))
        raw = path.read_text(encoding="utf-8")
        flat = " ".join(raw.split())
        checked = sum(match.lastindex or 0 for figure in FIGURES if figure.page == page
                      for match in re.finditer(figure.pattern, flat))
        prose = " ".join(_prose(raw).split())
        numbers = list(_NUMBER.finditer(prose))
        if "-v" in sys.argv:
            for m in numbers:
                print(f"{page}: {m.group(0)!r}: ...{prose[max(0, m.start() - 50):m.end() + 30]}...")
        out[page] = (len(numbers), checked)
    return out


if __name__ == "__main__":
    counts = inventory()
    for page, (found, hit) in counts.items():
        print(f"{page:24} {found:5} numbers in prose, {hit:4} checked")
    print(f"{'total':24} {sum(f for f, _ in counts.values()):5} numbers in prose, "
          f"{sum(h for _, h in counts.values()):4} checked")
