"""The figures README.md and docs/*.md quote, each tied to where it comes from: one row per figure (or group of
figures read by one phrase) of :data:`FIGURES`, checked by ``tests/docs/test_figures.py``.

A row is ``Figure(page, what, pattern, source)``: ``pattern`` is a regular expression searched in the page's
prose with its whitespace collapsed (a phrase may break across lines); each of its groups is a figure, and every
match must read exactly the strings ``source()`` returns (:mod:`tests.docs.sources`: the registries, tables and
pin files the code reads, or the benchmark results kept in ``benchmarks/``). A page that no longer says the
phrase fails too, so a rewritten sentence is re-tied here rather than dropped.

``python -m tests.docs.inventory`` lists the numbers of the pages' prose that no row ties and that stand in no
block copied from a results file (``scripts/doc_blocks.py``): the inventory of issue 52 point 5.
"""

from __future__ import annotations

import re
from functools import partial

from tests.docs import derived as d
from tests.docs import generate_figures as g
from tests.docs import history, limits, measured, records, settings
from tests.docs import perf as p
from tests.docs import sources as s
from tests.docs.row import Figure

_BN, _TIMM_FOLD = "tests/rewrite/test_batchnorm.py", "tests/ecosystems/test_timm_fold.py"
_REPARAM = "tests/ecosystems/test_timm_reparam.py"
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
    Figure("docs/limitations.md", "corpus models", r"from a graph of its (\d+) models", s.corpus_size),
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
    Figure("docs/extending.md", "batch norms folded, their bound", r"random BN statistics; every output within "
           r"(\S+) of the original's\)", partial(s.in_source, _BN, r"report\.max_abs_diff < ([\de.-]*\d)")),
    *(Figure("docs/extending.md", f"batch norms folded, {key} {how}", rf"\d+ \((\d+) {re.escape(how)}\) \|",
             lambda key=key: (str(s.literal(_BN, "VIA")[key][1]),))
      for key, how in (("efficientnet", "into its `nn.Conv2d` subclass"), ("levit", "through a reshape"))),
    Figure("docs/extending.md", "batch norms folded, timm's input and bound",
           r"test_timm_fold\.py`, random statistics, (\d+)x(\d+) input;.*?max abs diff at most (\S+) of the output's",
           lambda: (*s.in_source(_TIMM_FOLD, r"x = torch\.randn\(1, 3, (\d+), (\d+)\)"),
                    *s.in_source(_TIMM_FOLD, r"atol=([\de.-]+) \* float"))),
    Figure("docs/extending.md", "timm reparameterized",
           r"batch-norm statistics, (\d+)x(\d+) input; .*?`repvgg_a0` (\d+) blocks merged, `mobileone_s0` (\d+) "
           r".*?output is within (\S+) of the original's largest value, as timm's own reparameterized model's is, "
           r"the new weights equal timm's to (\S+),",
           lambda: (*s.in_source(_REPARAM, r"x = torch\.randn\(2, 3, (\d+), (\d+)\)"),
                    *(str(s.literal(_REPARAM, "CASES")[k]) for k in ("repvgg_a0", "mobileone_s0")),
                    *s.in_source(_REPARAM, r"<= ([\de.-]+) \* scale\n"),
                    *s.in_source(_REPARAM, r"rtol=([\de.-]+), atol=\1 \* float"))),
    Figure("docs/extending.md", "fused Q/K/V",
           r"\(Llama's grouped-query attention: (\d+) \+ (\d+) \+ (\d+)\)\. BERT and Llama outputs are within (\S+) ",
           lambda: (*map(str, s.literal("tests/rewrite/test_qkv.py", "CASES")["llama"][3]),
                    *s.in_source("tests/rewrite/test_qkv.py", r"report\.max_abs_diff < ([\de.-]*\d)"))),
    Figure("docs/extending.md", "pattern at two sizes", r"LayerNorm written as ops at (\d+) and at (\d+) channels",
           lambda: s.in_source("tests/rewrite/test_pattern_sizes.py", r'\(\("n\d+", (\d+)\), \("n\d+", (\d+)\)\)')),
    *(Figure("docs/extending.md", f"torchao version ({i})", rx, lambda: (".".join(s.pin("torchao")[0].split(".")[:2]),))
      for i, rx in enumerate([r"torchao class \(torchao (\d+\.\d+), CPU\)",
                              r"the CPU build of torchao (\d+\.\d+) does not run"])),
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
    Figure("docs/opaque.md", "opaque loop closure",
           r"cannot trace: (\d+) of the (\d+) exact types on 5\.23\.0, (\d+) of the (\d+) on 5\.24\.0",
           partial(s.in_source, "benchmarks/results-sweep-opaque.md",
                   r"\*\*(\d+) of the (\d+) exact types on 5\.23\.0 and (\d+) of\s+the (\d+) on 5\.24\.0\*\*")),
    Figure("docs/flat-ir.md", "7B-dims lowering peak RSS", r"lowers on `meta` at (\d+ MB) peak RSS",
           d.lower_rss_7b),
    Figure("docs/generation.md", "generate benchmark's settings",
           r"\(medians of (\d+) runs in each of (\d+) processes, (\d+) thread; small configs: (\d+) layers, "
           r"hidden size (\d+)\)",
           lambda: (s.option_default("benchmarks/generate.py", "--repeats"),
                    s.option_default("benchmarks/generate.py", "--processes"),
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
    # -- generate()'s speed, computed from benchmarks/results-generate.md's tables (tests/docs/generate_figures.py) --
    Figure("docs/limitations.md", "generate() speed",
           r"`max_bytes=None, max_flops=None` in (.+?) rows of the runs measured \(the dense decoders' rows, Llama, "
           r"GPT-2, Qwen2 and Gemma-2: (.+?)\), with the default budgets in (.+?); the dense decoders' other rows "
           r"(\S+) \((\d+) of (\d+) at batch 1, .*?, and (\S+) for Mixtral, .*?a row's default ratio ranged by up "
           r"to ([\d.]+) over its processes, median ([\d.]+)\); .*?the table's per-token \"first run\" figures \(24 "
           r"tokens, below that\) show (\S+)\)", g.limitations),
    Figure("docs/performance.md", "generate(): the target of issue 52",
           r"`max_bytes=None, max_flops=None`, by (.+?) rows of the runs above \(the dense decoders' rows: (.+?)\); "
           r"for the default rebuild by (.+?)\. The dense decoders' rows above it with the default budgets are (\S+), "
           r"(\d+) of (\d+) at batch 1; Mixtral stays at (\S+)\. A row's default ratio ranged by up to ([\d.]+) over "
           r"its processes \(median ([\d.]+)\), and Mixtral (is not|may be) within 1\.05x\.",
           lambda: (*g.summary()[:7], *g.summary()[8:], g.summary()[7])),
    Figure("docs/performance.md", "generate(): the unoptimised rebuild",
           r"\(`fold_constants=False`\) is (\S+) at Llama batch (\d+) dynamic, (\S+) at Qwen2's, (\S+) for Mixtral\.",
           g.unfolded),
    Figure("docs/performance.md", "generate(): settings",
           r"(\d+) new tokens a run, the models' runs alternating for (\d+) rounds \(the order reversed every other "
           r"round\) in each of (\d+) fresh processes a\s+model, (\d+) thread, prompt (\d+), greedy; .*?Small configs "
           r"\((\d+) layers, hidden size (\d+), vocabulary (\d+), random weights\)\..*?its (\d+) decoding steps are "
           r"input signatures", g.settings),
    Figure("docs/performance.md", "generate(): grouped attention's sizes",
           r"checked equal in ([\d,]+) cases; .*?\(a past of (\d+)-(\d+) tokens, (\d+) key/value heads of (\d+)\)",
           lambda: (*g.gqa_cases(), *g.gqa_shapes())),
    Figure("docs/performance.md", "generate(): the long prompt", r"with a prompt of (\d+) tokens, the ratios were",
           lambda: s.in_source("benchmarks/results-generate-prompt-400.md", r"--prompt (\d+)")),
    Figure("docs/ir-spec.md", "grouped attention's cases", r"equal tensors \(`torch\.equal`\) in ([\d,]+) cases",
           g.gqa_cases),
    Figure("docs/performance.md", "generate(): Gemma-2 without budgets", r"now (\S+) \(Gemma-2\) and as the default",
           g.gemma_no_budgets),
    Figure("docs/performance.md", "generate(): the forward budget's look-up",
           r"against no budgets, row by row: median ([+-]\d+) %, ([+-]\d+ to [+-]\d+) %\)", g.budget_lookup),
    Figure("docs/performance.md", "generate(): Mixtral", r"eager Mixtral calls `torch\._grouped_mm`: (\S+);",
           lambda: (g.summary()[6],)),
    Figure("docs/performance.md", "generate(): the first run",
           r"a first `generate\(\)` is (\S+) slower per token\*\* for 24 tokens .*?\(about (\d+-\d+) ms a step "
           r"here\)\.",
           g.first_run),
    Figure("docs/performance.md", "generate(): the symbolic probe's threshold",
           r"once a structure has had (\d+) concrete probes \(`AFTER`\)",
           lambda: (str(s.literal("ir2torch/run_safety/symbolic_probe.py", "AFTER")),)),
    Figure("docs/performance.md", "generate(): cache copies",
           r"for (\d+) layers, (\d+) copies of the past and (\d+) lifted constants a step",
           lambda: (g.settings()[5], *[str(2 * int(g.settings()[5]))] * 2)),
    # one decoding step, timed and counted (benchmarks/results-generate-step.md)
    Figure("docs/performance.md", "generate() step: Llama's ops",
           r"\*\*the attention mask\*\*, (\d+) more ATen ops .*?through the dispatcher \((\d+) a step, .*?With them "
           r"its step runs (\d+) ATen ops, eager's (\d+),", g.step_llama),
    Figure("docs/performance.md", "generate() step: Mixtral's ops",
           r"are in its fake kernel\): (\d+) calls a step, .*?many small modules: (\d+) ATen ops a step, eager's "
           r"(\d+)\.", lambda: (*g.step_ops("mixtral", (g.EXPERTS_OFF, "experts' Python loop")),
                                *g.step_ops("mixtral", (g.NO_BUDGETS, "ATen ops"), ("original", "ATen ops")))),
    Figure("docs/generation.md", "generate() step: the mask's ops",
           r"instead of the (\d+) ATen ops transformers' mask adds to a Llama step", lambda: g.step_llama()[:1]),
    Figure("docs/performance.md", "generate() step: Mixtral after the fifth round",
           r"to the ratios of the table\s+above \((\S+) and (\S+)\)",
           lambda: g.step_ratios("mixtral", g.DEFAULT, g.NO_BUDGETS)),
    Figure("docs/performance.md", "generate() step: the mask",
           r"Llama with the mask built and made in one op: (\S+) and (\S+) in the step timing",
           lambda: g.step_ratios("llama", g.MASK_BUILT, g.NO_BUDGETS)),
    Figure("docs/performance.md", "generate() step: the experts",
           r"Mixtral with the experts' Python loop and with `_grouped_mm`: (\S+) and (\S+) in the step timing",
           lambda: g.step_ratios("mixtral", g.EXPERTS_OFF, g.NO_BUDGETS)),
    Figure("docs/performance.md", "generate() step: index proofs",
           r"Mixtral with the indices read and proven:\s+(\S+) and (\S+) in the step timing above, (\d+) and (\d+) "
           r"ATen ops", lambda: (*g.step_ratios("mixtral", g.INDICES_READ, g.NO_BUDGETS),
                                 *g.step_ops("mixtral", (g.INDICES_READ, "ATen ops"), (g.NO_BUDGETS, "ATen ops")))),
    Figure("docs/performance.md", "generate() step: size reads", r"a Llama step's `sym_size` reads: (\d+) and (\d+)\)",
           lambda: g.step_ops("llama", (g.SIZES_OFF, "`sym_size` reads"), (g.NO_BUDGETS, "`sym_size` reads"))),
    *(Figure("docs/performance.md", f"embedding's bounds read at once ({i})", rx,
             lambda: (str(s.literal("ir2torch/run_safety/index_checks.py", "_FEW")),))
      for i, rx in enumerate([r"index bounds of at most (\d+) values", r"the bounds of at most (\d+) indices"])),
    Figure("docs/generation.md", "generate() verdict",
           r"within about 1\.05x of the original per token on (\w+) rows, (Mixtral's are not|Mixtral's too on some);",
           g.verdict),
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
    Figure("docs/performance.md", "large files under a bound",
           r"10\*\*5 implementations in one call takes under (\d+) s for the documents `IR\.save` writes",
           p.large_files_bound),
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
    Figure("docs/performance.md", "brevitas: the whole sweep by default",
           r"then gave (\d+) of (\d+) exact, none `export failed`", p.brevitas_whole_sweep),
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
FIGURES += limits.FIGURES  # the bounds and settings of the code the pages quote
FIGURES += measured.FIGURES  # what ir-spec.md says of real files, measured on a few
FIGURES += records.FIGURES  # the pages' records of past runs, kept in results files
FIGURES += settings.FIGURES  # settings of the benchmarks, tests and CLI the pages quote
FIGURES += history.FIGURES  # performance.md's past changes, read from the records of their runs
