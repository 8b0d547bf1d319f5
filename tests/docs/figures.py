"""The figures README.md and docs/*.md quote, each tied to where it comes from: one row per figure (or group of
figures read by one phrase) of :data:`FIGURES`, checked by ``tests/docs/test_figures.py``.

A row is ``Figure(page, what, pattern, source)``: ``pattern`` is a regular expression searched in the page's
prose with its whitespace collapsed (a phrase may break across lines); each of its groups is a figure, and every
match must read exactly the strings ``source()`` returns (:mod:`tests.docs.sources`: the registries, tables and
pin files the code reads, or the benchmark results kept in ``benchmarks/``). A page that no longer says the
phrase fails too, so a rewritten sentence is re-tied here rather than dropped.

``python -m tests.docs.figures`` lists every number in the pages' prose (outside code blocks, inline code and
link targets) and marks those a row checks, or that stand in a block copied from a results file (``<!-- copied
from ... -->``, kept equal to its file by ``scripts/doc_blocks.py --check``, ``tests/docs/test_doc_blocks.py``):
the inventory of issue 52 point 5.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from scripts import doc_blocks
from tests.docs import derived as d
from tests.docs import perf as p
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
        """The test's name: the page and the figure."""
        return f"{self.page}: {self.what}"


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
    Figure("docs/ir-spec.md", "refused overloads by reason",
           r"none is produced by `torch\.export`\) (\d+); private kernels that `torch\.export` does not emit (\d+) .*?"
           r"`_nnpack_spatial_convolution` segfaults on hostile padding\) (\d+); unchecked memory (\d+) .*?optimizer "
           r"kernel over tensor lists, (\d+) overloads .*?every backward kernel, (\d+) overloads.*?process state (\d+) "
           r".*?test-only ops (\d+);\s+file I/O (\d+) .*?unbounded run time (\d+)",
           partial(s.refused_by_reason, "2.13", "TorchScript builtin", "private kernel", "device runtime",
                   "unchecked memory", "unchecked memory: optimizer kernel", "unchecked memory: backward kernel",
                   "process state", "test-only", "file I/O", "unbounded run time")),
    Figure("docs/ir-spec.md", "surface probe over the sweeps",
           r"registry \((\d+)\s+types, (\d+) refused before: .*?\), timm \((\d+) refused before: .*? in a sample of "
           r"(\d+) models, .*? in the whole registry of (\d+) models, (\d+) of them of at most 30 M parameters\) "
           r"and torchvision's (\d+) classification models \((\d+) refused before: .*?\), (\d+) of (\d+) exact with "
           r"them \(mask2former is refused", d.surface_probe),
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
    Figure("docs/concepts.md", "code at first use", r"A graph of (\d[\d ]*) nodes or more gets its code", d.lazy_nodes),
    Figure("docs/limitations.md", "corpus models", r"from graphs \((\d+) models\)", s.corpus_size),
    Figure("docs/supported.md", "timm sample families",
           r"one model per timm family \((\d+), `tests/ecosystems/timm_sample\.py`; (\d+) more", s.timm_sample),
    Figure("docs/testing.md", "test-newest selection", r"runs the (\d+) test ids of `SELECTION`", s.newest_selection),
    Figure("docs/limitations.md", "FLOP budget per parameter",
           r"default (\d+ \d+) FLOPs per parameter, at least 10\*\*(\d+)",
           d.flop_budget),
    Figure("docs/limitations.md", "call fan-out bound", r"the call fan-out \(10\*\*(\d+) graph nodes",
           d.fan_out),
    *(Figure("docs/extending.md", f"batch norms folded, {row}", rf"\| {re.escape(row)} \| (\d+) \| (\d+)[ |]",
             partial(d.fold, key)) for row, key in d.FOLD_ROWS.items()),
    Figure("docs/extending.md", "batch norms folded, timm",
           ", ".join(rf"{re.escape(name)} (\d+) of (\d+){left}" for name, _, left in d.TIMM_FOLD), d.timm_fold),
    # -- pinned versions -----------------------------------------------------------------------------------------
    Figure("README.md", "torch pin", r"\*\*torch (\S+)\*\* is supported: every test runs on torch (\S+) \(",
           lambda: (*s.minor("torch"), *s.pin("torch"))),
    Figure("README.md", "transformers pin", r"transformers (\S+) \(pinned\)", partial(s.pin, "transformers")),
    Figure("README.md", "ecosystem pins",
           r"timm (\S+), diffusers (\S+), torchao (\S+), brevitas (\S+), torchvision (\S+): the table",
           partial(s.pin, "timm", "diffusers", "torchao", "brevitas", "torchvision")),
    Figure("README.md", "requires-python", r"`requires-python >= (\S+)`", s.requires_python),
    Figure("README.md", "Python tested", r"Python (\S+) is the version tested", d.python_tested),
    Figure("docs/supported.md", "torch pin", r"torch (\d+\.\d+)\b", partial(s.minor, "torch")),
    # -- benchmark results ---------------------------------------------------------------------------------------
    Figure("README.md", "70B-dims IR file and load", r"is a (\S+ MB) file that loads in under (\S+) s\.",
           d.ir_load_70b),
    Figure("README.md", "70B-dims convert and lower / export",
           r"takes (\S+x) the time of one `torch\.export` of it, and lowering it as well (\S+x);",
           partial(s.target, "results-quick.md", "convert / export, Llama-3-70B dims (80 layers, meta; issue 32)",
                   "(convert + lower) / export, Llama-3-70B dims (80 layers, meta; issue 32)")),
    Figure("README.md", "corpus convert / export",
           r"the (\d+) models of the test corpus converts in at most (\S+x) of its export \(median (\S+x)\)",
           s.trace_once_corpus),
    Figure("README.md", "opaque transformers",
           r"(\d+) of the (\d+) transformers (\S+) types export cannot trace then rebuild exactly, (\d+) more equal",
           d.transformers_opaque),
    Figure("README.md", "opaque transformers, default dimensions",
           r"\(median ([\d.]+) % of the parameters opaque at the types' default dimensions\)",
           d.transformers_real_share),
    Figure("README.md", "opaque brevitas", r"the (\d+) brevitas examples export\s+could not trace now trace whole",
           d.brevitas_opaque),
    Figure("docs/flat-ir.md", "7B-dims lowering peak RSS", r"lowers on `meta` at (\d+ MB) peak RSS",
           d.lower_rss_7b),
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
           r"median of (\d+), (\d+) cores;", d.view_open),
    Figure("docs/cli.md", "view of the 70B-dims Llama: overlay",
           r"\((\d[\d ]*) entries, ([\d.]+ MB) instead of ([\d.]+)\) opened in (\d+ ms), (\d+ ms) without; with block "
           r"41 and the `model` graph, (\d+ ms) and (\d+ ms)", d.view_overlay),
    Figure("docs/cli.md", "view of the 70B-dims Llama: compare",
           r"fused \(([\d.]+ MB)\) opens in (\d+ ms), and in (\d+ ms) with block 41",
           partial(s.view, "MB + compare (QKV fused)", "open + compare (QKV fused)",
                   "block 41 + graph of model + compare (QKV fused)")),
    Figure("docs/cli.md", "Model Explorer graph of the 70B-dims Llama",
           r"expands to (\d[\d ]*) nodes in (\d+) layers \(([\d.]+ MB) as Model Explorer's JSON, built in ([\d.]+ s);",
           lambda: (d.thousands(s.view("explorer nodes")[0]), *s.view("explorer layers", "explorer MB", "explorer s"))),
    Figure("docs/cli.md", "view: simpler layering above", r"A graph of more than (\d+) nodes",
           lambda: (s.js_constant("BIG"),)),
    Figure("docs/cli.md", "view: smallest text on screen", r"at (\d+) px or more on screen \(zoom ([\d.]+) at least\)",
           lambda: (f"{10 * float(s.js_constant('READABLE')):g}", s.js_constant("READABLE"))),
    Figure("docs/cli.md", "view: link bounds", r"read their first (\d+) entries, `search` its first (\d+)\s+characters",
           lambda: (s.js_constant("LINK_ITEMS"), s.js_constant("LINK_TEXT"))),
    Figure("docs/cli.md", "overlay bounds", r"strict JSON of at most (\d+) MB and 10\^(\d+) entries", d.overlay_bounds),
    # -- docs/performance.md's prose (its tables are copied from the results files: scripts/doc_blocks.py) ---------
    Figure("docs/performance.md", "status of the full run",
           r"met (\d+) of its (\d+) targets: convert is (\S+) a plain `torch\.export` on the small configs, "
           r"(\S+) on the four MoE decoders, (\S+) at Llama-2-7B dimensions and (\S+) at Llama-3-70B dimensions; "
           r"the one missed is the forward over the whole real corpus \(max (\S+), limit (\S+)\)", p.status),
    Figure("docs/performance.md", "unflatten against export, convert against both",
           r"makes an export (\S+) as long; `torch2ir\.convert` costs (\S+) of export \+", p.unflatten_spans),
    Figure("docs/performance.md", "unflatten and ep.module() against eager",
           r"node by node: (\S+) eager; `ep\.module\(\)` is (\S+)\.", p.forward_spans),
    Figure("docs/performance.md", "MoE decoders in the full run",
           r"convert (\S+) export, the rebuilt forward exact and (\S+) eager, against (\S+) eager for "
           r"`ExportedProgram\.module\(\)` and (\S+) for `unflatten`", p.moe),
    Figure("docs/performance.md", "trace once at 70B and 7B dimensions",
           r"convert / export \*\*(\S+)\*\* at Llama-3-70B dimensions \(80 layers; with `ir\.lower\(\)` (\S+), a "
           r"(\S+ MB) file, `IR\.load` (\S+ s)\) and \*\*(\S+)\*\* at Llama-2-7B dimensions \(32 layers; with "
           r"`ir\.lower\(\)` (\S+)\)", p.trace_once_scale),
    Figure("docs/performance.md", "per-layer slopes", r"slope is ([\d.]+) ms/layer against export's ([\d.]+) "
           r"\(\*\*([\d.]+ %)\*\*", p.slope),
    Figure("docs/performance.md", "once against the lean export",
           r"median \*\*(\S+)\*\*, max (\S+) \(ConvNeXt with DropPath; (\d+) entries above 1\.05x", p.once_lean),
    Figure("docs/performance.md", "DeepSeek-V3's alike layers", r"The (\d+) MoE layers are alike", p.deepseek_alike),
    Figure("docs/performance.md", "torch.compile over the corpus",
           r"\*\*(\d+) of (\d+) compile as one graph\*\*, max abs difference at most (\S+) \(", p.compile_corpus),
    Figure("docs/performance.md", "large files in one call",
           r"all of them are graph modules \(([\d.]+) s: .*?validate twice \(an IR may change in between\): "
           r"([\d.-]+) s more", p.large_files),
    Figure("docs/performance.md", "the first-call probe",
           r"one-time cost per signature of (\S+) an eager call", p.forward_budget),
    Figure("docs/performance.md", "run-time checks: default and checked against bare",
           r"within the noise of the run \(([\d.-]+)x of `bare` here; .*? A checked call costs ([\d-]+) times a "
           r"bare one",
           p.run_safety),
    Figure("docs/limitations.md", "run-time checks: default and checked against bare",
           r"within the noise of a loaded machine, ([\d.-]+)x\); a checked call, whose sizes depend on data, still "
           r"costs ([\d-]+) times a bare one", p.run_safety),
    Figure("docs/performance.md", "rounds of the full run",
           r"Rounds in the full run: (\d+) for convert, (\d+) \(\+(\d+) warm-up\) at 7B scale, (\d+) for rebuild "
           r"\+ load, (\d+) for forward, (\d+) for ONNX, (\d+) for the sweep", p.run_rounds),
    Figure("docs/performance.md", "small configs",
           r"MobileNetV2 at depth multiplier ([\d.]+), (\d+)x(\d+) images, token ids \(batch 2, (\d+) tokens\)",
           p.small_configs),
    *(Figure("docs/performance.md", f"opaque sweep, brevitas ({i})", rx,
             partial(p.opaque_counts, "brevitas examples", share))
      for i, (rx, share) in enumerate([(r"re-measured too \((\d+) of (\d+), median ([\d.]+) %\)", True),
                                       (r"- brevitas \((\d+) of (\d+) exact, none refused, before", False),
                                       (r"`QuantTensor` additions .*?: (\d+) of (\d+) exact, median ([\d.]+) %",
                                        True)])),
    Figure("docs/performance.md", "opaque sweep, torchvision detection",
           r"recorded as plain objects and functions: (\d+) of (\d+) exact",
           partial(p.opaque_counts, "torchvision (every task")),
    Figure("docs/performance.md", "opaque sweep, transformers 5.23",
           r"moved the transformers figure from 27 to (\d+) of (\d+) \(5\.23\.0\)",
           partial(p.opaque_counts, "transformers 5.23.0")),
    Figure("docs/performance.md", "lean export's step",
           r"the last step, median ([\d.]+x) to ([\d.]+x)\)\..*?with it, the highest is ([\d.]+x)\.", p.lean_step),
    Figure("docs/performance.md", "guarded corpus run", r"A run over (\d+) corpus models chosen", p.guarded_run),
    Figure("docs/performance.md", "small configs' sizes",
           r"Small configs: (\d+) layers, hidden (\d+) \(BERT, GPT-2, Llama\), ResNet with (\d+)/(\d+) channels, .*? "
           r"the four MoE decoders with (\d+) experts, top-(\d+)\.", p.small_sizes),
    Figure("docs/performance.md", "quick run",
           r"scenarios with (\d+) layers instead of (\d+) / (\d+), a ([\d/]+)-layer sweep", p.quick_run),
    Figure("docs/performance.md", "corpus run's rounds",
           r"(\d+) warm-up and (\d+) timed rounds of ~(\d+ ms) samples", p.corpus_rounds),
    Figure("docs/performance.md", "rebuild + load model", r"### Rebuild \+ load: GPT-2 small, ([\d.]+) M parameters, "
           r"(\d+ MB) `\.safetensors`", p.rebuild_model),
    Figure("docs/performance.md", "scaling model", r"Small Llama \(hidden (\d+)\) on meta, convert vs export",
           p.sweep_model),
    Figure("docs/performance.md", "guards' inputs", r"interleaved \(batch (\d+), sequence (\d+)\), and the guard",
           p.guards_inputs),
    Figure("docs/performance.md", "DeepSeek-V3 dimensions",
           r"published dimensions \((\d+) layers, the first (\d+) dense; (\d+) routed experts, (\d+) per token",
           lambda: tuple(str(s.literal("benchmarks/moe_frontier.py", "DEEPSEEK_V3")[k]) for k in (
               "num_hidden_layers", "first_k_dense_replace", "n_routed_experts", "num_experts_per_tok"))),
    Figure("docs/performance.md", "code at first use",
           r"A graph of (\d[\d ]*) nodes or more gets its code at its first call", d.lazy_nodes),
    Figure("docs/performance.md", "remembered signatures", r"up to (\d+) remembered signatures per module",
           lambda: (str(s.literal("ir2torch/run_safety/forward_budget.py", "MAX_SIGNATURES")),)),
    Figure("docs/testing.md", "random models", r"(\d+) random models in eval mode and (\d+) in\s+train mode",
           lambda: d.random_models()[:2]),
    Figure("docs/testing.md", "random models, long profile", r"ten times as many examples \((\d+) \+ (\d+) models\)",
           lambda: d.random_models()[2:]),
    Figure("docs/testing.md", "test-newest budget", r"It stops itself after\s+([\d.]+) minutes \(`--budget`\)",
           lambda: (f"{float(s.option_default('scripts/newest_site.py', '--budget')) / 60:g}",)),
    Figure("README.md", "7B-dims lowering peak RSS", r"# 7B dims, weight-free, ~([\d.]+) GB",
           lambda: (f"{int(d.lower_rss_7b()[0].removesuffix(' MB')) / 1000:.1f}",)),
    Figure("docs/testing.md", "torchvision sweeps",
           r"`benchmarks/results-sweep\.md`: torchvision's (\d+) classification models exact, (\d+) of its (\d+) "
           r"segmentation, quantizable and video models",
           lambda: (*s.sweep("torchvision", "exact"), *s.sweep(_TORCHVISION_OTHER, "exact", "models"))),
    Figure("docs/testing.md", "timm sweeps", r"\((\d+) of (\d+) and (\d+) of (\d+); the rest",
           lambda: d.timm_sweeps()),
    Figure("docs/testing.md", "diffusers sweep", r"(\d+) diffusers backbones exact",
           partial(s.sweep, "diffusers", "exact")),
    Figure("docs/limitations.md", "swept surface models",
           r"torchvision's (\d+) classification models and the whole timm registry \(`benchmarks\.surface_probe`; "
           r"(\d+) exact of the (\d+),",
           lambda: (*s.sweep("torchvision", "models"), *s.sweep("timm, whole registry", "exact", "models"))),
]


_NUMBER = re.compile(r"(?<![\w.-])(?:\d{1,3}(?: \d{3})+|\d+(?:\.\d+)?(?:e-?\d+)?)(?:x|%| ?[kMG]B| ?m?s)?(?![\w-]|\.\d)")


_ISSUE = re.compile(r"\b[Ii]ssues? #?\d+(?:(?:, | and )#?\d+)*|#\d+\b")  # issue numbers are no figures


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
        copied = "".join(raw[b.start:b.end] for b in doc_blocks.blocks(path))
        checked += len(_NUMBER.findall(_ISSUE.sub(" ", " ".join(_prose(copied).split()))))
        prose = _ISSUE.sub(lambda m: " " * len(m.group(0)), " ".join(_prose(raw).split()))
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
