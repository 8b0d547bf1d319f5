"""Rows of :data:`tests.docs.figures.FIGURES` for the bounds and settings the pages quote from the code: the size
limits of a file, the run-time checks' bounds, the fuzzers' example counts. Each figure is read from the constant
the code checks against (imported, or read from a test's source as text), so a changed bound fails its row."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from functools import cache

from tests.docs import derived as d
from tests.docs import sources as s
from tests.docs.row import Figure

_SPEC = "docs/ir-spec.md"
_BROWSER = "tests/view/test_llm_browser.py"


def _power(n: int) -> str:
    return d.power_of_ten(n)


def _schema(name: str) -> str:
    from common import schema

    return str(getattr(schema, name))


def _json(name: str) -> int:
    from common import json_files

    return getattr(json_files, name)


def _scopes() -> int:
    from common.pt2e_prepared import MAX_SCOPES

    return MAX_SCOPES


def _count_limit(op: str) -> int:
    """The bound of a literal count argument of ``op`` checked at load."""
    from common.op_args import COUNT_LIMITS

    return COUNT_LIMITS[op][1]


def _preconditions() -> tuple[str, ...]:
    """The op-argument bounds: ``tensor_split`` sections, ``round``'s decimals, the polynomials' steps and
    ``repeat_interleave``'s total (a power of two)."""
    from ir2torch.run_safety import op_preconditions as o

    bits = int(math.log2(o.REPEAT_TOTAL_LIMIT))
    assert 2**bits == o.REPEAT_TOTAL_LIMIT
    return (_power(_count_limit("aten::tensor_split.sections")), str(o.ROUND_DECIMALS_LIMIT),
            _power(o.POLYNOMIAL_WORK_LIMIT), str(bits))


def _python_functions() -> tuple[str, str]:
    from common import python_functions as f

    return _power(f.MAX_SEQUENCE_ITEMS), _power(f.MAX_INT_BITS)


def _caps() -> tuple[str, str]:
    """The variants' cap, and the nodes 64 variants of a 15 000-node graph count with it."""
    variants = int(_schema("MAX_VARIANTS"))
    return str(variants), d.thousands(str((variants + 1) * 15000))


def _flops() -> tuple[str, str, str]:
    """``max_flops="auto"``: per parameter, the floor, and the tokens a call may run at two FLOPs per parameter."""
    from ir2torch.run_safety import flops

    per_parameter, floor = d.flop_budget()
    return per_parameter, floor, d.thousands(str(flops.FLOPS_PER_PARAMETER // 2))


def _train_device() -> tuple[str, str]:
    """``torch2ir.train.device``: the meta pass's cost per op (us) and the cap on CPU copies (MiB)."""
    from torch2ir.train import device

    return f"{device.META_OP_S * 1e6:.0f}", str(device.MAX_BYTES >> 20)


def _shared_bodies() -> tuple[str, ...]:
    """The 80-layer row of ``benchmarks/PROFILE.md``'s shared-bodies table: files (format 1, shared) and loads."""
    def cell(column: str) -> str:
        return s.cell("PROFILE.md", "#### Shared bodies: alike instances", "80", column)

    return (f"{float(cell('file, format 1 (MB)')):.1f} MB", f"{float(cell('file, shared (MB)')):.2f} MB",
            cell("IR.load, shared (s)") + " s", cell("IR.load, format 1 (s)") + " s")


def _max_params(section: str) -> str:
    """The ``--max-params`` a sweep of ``benchmarks/results-sweep.md`` ran with, in millions."""
    text = (s.BENCH / "results-sweep.md").read_text(encoding="utf-8")
    part = text[text.index(f"### {section}:"):].split("\n### ")[0]
    found = re.search(r"--max-params ([\d.e+]+)", part)
    assert found, section
    return f"{float(found.group(1)) / 1e6:g}"


def _python_classes() -> tuple[str, str]:
    """The Python-level functions of the pinned torch's table, pure and allocating."""
    table = s._op_table("2.13")["python"]
    return tuple(str(sum(v.split(":")[0] == c for v in table.values())) for c in ("pure", "allocating"))


def _index_layers() -> tuple[str]:
    from tests.security.test_index_preconditions import CASES

    return (str(len(CASES)),)


def _input_scales() -> tuple[str, ...]:
    """The scales ``common.testing.models.model_inputs`` draws inputs at, smallest first."""
    text = (s.ROOT / "common" / "testing" / "models.py").read_text(encoding="utf-8")
    found = re.search(r"scale=st\.sampled_from\(\(([\d., ]+)\)\)", text)
    assert found, "model_inputs no longer draws a scale"
    return tuple(f"{v:g}" for v in sorted(float(x) for x in found.group(1).split(",") if x.strip()))


def _option(path: str, name: str) -> tuple[str]:
    return (s.option_default(path, name),)


def _exit_codes() -> tuple[str, ...]:
    """``common.cli.app``'s exit codes: done, check failed, usage, interrupted, broken pipe (128 + SIGPIPE)."""
    import signal

    from common.cli import app

    assert app.EXIT_BROKEN_PIPE == 128 + signal.SIGPIPE
    return (*map(str, (app.EXIT_OK, app.EXIT_FAILED, app.EXIT_USAGE)),
            *s.in_source("common/cli/app.py", r"except KeyboardInterrupt:\n.*\n +return (\d+)\n"),
            str(app.EXIT_BROKEN_PIPE))


@cache
def _newest_tests() -> tuple[str]:
    """How many tests the ids of ``scripts/newest_site.py``'s ``SELECTION`` collect (``pytest --collect-only``)."""
    from scripts.newest_site import SELECTION

    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n0", "-p", "no:cacheprovider",
                           *SELECTION], cwd=s.ROOT, capture_output=True, text=True, timeout=600, check=False)
    found = re.search(r"^(\d+) tests? collected", done.stdout, flags=re.M)
    assert found, done.stdout[-2000:] + done.stderr[-2000:]
    return (found.group(1),)


def _corpus_modes() -> tuple[str, str]:
    """The corpus' architectures, and those exact in train mode too (no ``train_differs``)."""
    from tests.real.corpus import CORPUS

    return str(len(CORPUS)), str(sum(not a.train_differs for a in CORPUS))


def _torchvision_tests() -> tuple[str, str]:
    """The torchvision video and quantizable models the ecosystem tests cover (each checks it covers them all)."""
    from tests.ecosystems.test_torchvision_video import CASES

    return str(len(CASES)), str(len(s.literal("tests/ecosystems/test_torchvision_quantizable.py", "NAMES")))


def _smallest_font() -> float:
    """The smallest font of the view's drawing (px at zoom 1), read from its CSS as the browser test reads it."""
    css = (s.ROOT / "common" / "htmlview" / "view.css").read_text(encoding="utf-8")
    return min(float(v) for v in re.findall(r"svg[^{}]*text[^{}]*\{[^}]*?(\d+(?:\.\d+)?)px", css))


def _first_paint() -> tuple[str, str]:
    """The zoom of the first paint the browser test asserts at least, and the text size it means."""
    px, = s.in_source(_BROWSER, r"assert zoom \* SMALLEST >= (\d+)")
    return f"{int(px) / _smallest_font():g}", px


def _composites_recorded() -> tuple[str]:
    """The composites added since the first review whose reach ``tests/security/test_composite_reach.py`` records."""
    from tests.security.test_composite_reach import _samples

    return (str(len(_samples())),)


def _literal(path: str, name: str) -> tuple[str]:
    return (str(s.literal(path, name)),)


FIGURES: list[Figure] = [
    Figure(_SPEC, "shared bodies at 80 layers",
           r"Llama-3-70B dimensions is ([\d.]+ MB) in format 1 and ([\d.]+ MB) with shared bodies; `IR\.load` reads it "
           r"in ([\d.]+ s) instead of ([\d.]+ s)", _shared_bodies),
    Figure(_SPEC, "variants per implementation",
           r"name theirs with `variant` \(below\); at most (\d+), their nodes counted",
           lambda: (_schema("MAX_VARIANTS"),)),
    Figure(_SPEC, "pt2e scopes", r"class names are strings, never imported; at most 10\*\*(\d+) entries",
           lambda: (_power(_scopes()),)),
    Figure(_SPEC, "custom autograd functions named", r"the forward called, at most (\d+) printable strings",
           lambda: _literal("common/notes.py", "MAX_NAMES")),
    Figure(_SPEC, "size limits: nodes", r"`max_nodes` \(default (\d[\d ]*)\)",
           lambda: (d.thousands(_schema("DEFAULT_MAX_NODES")),)),
    Figure(_SPEC, "size limits: per node",
           r"edges of all graphs and variants together \| `(\d+) \* max_nodes` \|.*?JSON values and keys of the file "
           r"\(arrays, objects and scalars alike; real files have at most \d+ per node\) \| `(\d+) \* max_nodes` \|.*?"
           r"JSON objects of the file \(.*?\) \| `(\d+) \* max_nodes` \|",
           lambda: (_schema("EDGES_PER_NODE"), str(_json("JSON_VALUES_PER_NODE")), _schema("JSON_OBJECTS_PER_NODE"))),
    Figure(_SPEC, "size limits: nesting", r"\(real files: at most \d+\) \| (\d+) levels \|",
           lambda: (str(_json("MAX_JSON_DEPTH")),)),
    Figure(_SPEC, "size limits: containers",
           r"arrays and objects of a file of (\d+) MiB or more \(real files: one per \d+ bytes or more\) \| "
           r"one per (\d+) bytes of the file \|",
           lambda: (str(_json("DENSE_FROM") >> 20), str(_json("MIN_BYTES_PER_CONTAINER")))),
    Figure(_SPEC, "size limits: expanded nodes", r"real models: about 10\*\*4\) \| 10\*\*(\d+) \|", d.fan_out),
    Figure(_SPEC, "size limits: variants", r"\| variants of one implementation \| (\d+) \| parsing \|",
           lambda: (_schema("MAX_VARIANTS"),)),
    Figure(_SPEC, "size limits: a value's nesting", r"\| nesting of a value \| (\d+) levels \| decoding \|",
           lambda: _literal("common/values.py", "MAX_DEPTH")),
    Figure(_SPEC, "values' nesting", r"Values nest at most (\d+) levels",
           lambda: _literal("common/values.py", "MAX_DEPTH")),
    Figure(_SPEC, "caps add up", r"they do not multiply: (\d+) variants of 15 000 nodes count (\d[\d ]*) nodes", _caps),
    Figure(_SPEC, "tensors file name", r"control character, at most (\d+) bytes\)",
           lambda: _literal("common/tensor_files.py", "_MAX_NAME")),
    Figure(_SPEC, "load attempts", r"starts again from the new JSON \(up to (\d+) times",
           lambda: _literal("common/tensor_files.py", "_LOAD_ATTEMPTS")),
    Figure(_SPEC, "op-argument bounds",
           r"`tensor_split\.sections` count above 10\*\*(\d+) is refused .*?`round\(decimals=\)` beyond \+-(\d+) .*?"
           r"beyond 10\*\*(\d+) steps of their recurrence .*?add up to at most 2\*\*(\d+) \(its kernel",
           _preconditions),
    Figure(_SPEC, "chunks bound", r"a literal `chunks` above 10\*\*(\d+) is now refused",
           lambda: (_power(_count_limit("aten::chunk")),)),
    Figure(_SPEC, "Python functions' results", r"exceed 10\^(\d+) items or an integer result 10\^(\d+) bits",
           _python_functions),
    Figure(_SPEC, "fuzz examples", r"`tests/security/test_fuzz\.py`, (\d+) examples per run",
           lambda: s.in_source("tests/security/test_fuzz.py", r"max_examples=examples\((\d+)\)")),
    Figure(_SPEC, "op fuzz documents",
           r"`tests/security/test_op_fuzz\.py`: (\d+) documents starting with each operator of the default surface, "
           r"then (\d+) more",
           lambda: (*_literal("tests/security/test_op_fuzz.py", "PER_OP"),
                    *s.in_source("tests/security/test_op_fuzz.py", r"count, per_op = examples\((\d+)\)"))),
    Figure(_SPEC, "compute budget", r"\(default: (\d[\d ]*) FLOPs per parameter and buffer element of the rebuilt "
           r"model, at least 10\*\*(\d+): .*? so up to (\d[\d ]*) tokens per call\)", _flops),
    Figure(_SPEC, "folded constants in the key",
           r"shape and values \(at most (\d+) elements\) are part of the cache key",
           lambda: _literal("ir2torch/codegen/fold_cache.py", "MAX_CONSTANT_ELEMENTS")),
    Figure(_SPEC, "size-limited timm sweep", r"whole registry of \d+ models, \d+ of them of at most (\d+) M parameters",
           lambda: (_max_params("timm, whole registry"),)),
    Figure("docs/limitations.md", "size-limited timm sweep", r"the others over (\d+) M parameters, skipped",
           lambda: (_max_params("timm, whole registry"),)),
    Figure(_SPEC, "Python functions by class", r"have classes in the same table \((\d+) pure, (\d+) allocating\)",
           _python_classes),
    Figure("docs/supported.md", "Python functions", r"- (\d+) Python functions: ",
           lambda: (str(len(s._op_table("2.13")["python"])),)),
    Figure(_SPEC, "timm families", r"and (\d+) timm families \(Swin", lambda: s.timm_sample()[:1]),
    Figure(_SPEC, "index preconditions' layers", r"plants out-of-range values for (\d+) layers", _index_layers),
    Figure(_SPEC, "allowed overloads, rounded", r"The classes allow some (\d[\d ]*) overloads as safe to \*name\*",
           lambda: (d.thousands(str(round(int(s.op_classes("2.13", "allowed")[0]), -2))),)),
    Figure(_SPEC, "call fan-out example", r"each call their child twice, (\d+) deep \(2\*\*(\d+) calls\)",
           lambda: s.in_source("tests/security/test_call_fanout.py", r"ir2torch\.convert\(fanout\((\d+)\)\)") * 2),
    Figure(_SPEC, "call fan-out test", r"`test_call_fanout\.py` \(2\*\*(\d+) leaf calls",
           lambda: s.in_source("tests/security/test_call_fanout.py", r"ir2torch\.convert\(fanout\((\d+)\)\)")),
    Figure("docs/cli.md", "browser tests' window and bounds",
           r"`tests/view/test_llm_browser\.py`, (\d+) x (\d+)\) measure this: .*?a bounding box under (\d+) x (\d+) ",
           lambda: (*map(str, s.literal(_BROWSER, "SIZE")),
                    *s.in_source(_BROWSER, r"d\.width < (\d+) and d\.height < (\d+), \(d\.width"
                                 r", d\.height\)  # measured: 1029"))),
    Figure("docs/cli.md", "exit codes",
           r"\| (\d+) \| done; for `verify`.*?\| (\d+) \| the check failed: .*?\| (\d+) \| usage or input error: .*?"
           r"\| (\d+) \| interrupted \(Ctrl-C\) \| \| (\d+) \| the reader of stdout went away", _exit_codes),
    Figure("README.md", "exit codes", r"Exit codes: (\d+) ok, (\d+) a check failed, (\d+) bad input",
           lambda: _exit_codes()[:3]),
    *(Figure(page, f"exit code {what}", rx, lambda i=i: _exit_codes()[i:i + 1])
      for page, what, rx, i in [
          ("docs/cli.md", "1 in prose", r"[Ee]xit code (\d+) (?:if|when) (?:the rebuilt|an output|the files)", 1),
          ("docs/cli.md", "1 with --strict", r"makes the exit code (\d+)", 1),
          ("docs/cli.md", "1 of a refused rewrite", r"the exit code is (\d+)", 1),
          ("docs/cli.md", "2 in prose", r"Exit code (\d+) when the original", 2),
          ("docs/limitations.md", "2", r"exit code (\d+)[,:] ", 2),
          ("README.md", "1 in prose", r"exit code (\d+) when they differ", 1)]),
    Figure("docs/testing.md", "test-newest tests", r"ids of `SELECTION` in the script \((\d+) tests\)", _newest_tests),
    Figure("docs/supported.md", "corpus in eval and train mode",
           r"(\d+) architectures round-trip exactly in eval mode, (\d+) of them in train mode too", _corpus_modes),
    Figure("docs/supported.md", "torchvision video and quantizable", r"video \((\d+)\) and quantizable \((\d+)\)",
           _torchvision_tests),
    Figure("docs/limitations.md", "torchao version", r"On CPU, torchao (\d+\.\d+) itself does not run",
           lambda: (".".join(s.pin("torchao")[0].split(".")[:2]),)),
    Figure("docs/cli.md", "view: the smallest text", r"its smallest text \(the (\d+) px edge labels\)",
           lambda: (f"{_smallest_font():g}",)),
    Figure("docs/cli.md", "view: first paint", r"first paint at zoom ([\d.]+) or more \(smallest text (\d+) px\)",
           _first_paint),
    Figure("docs/cli.md", "view: the 70B root's and decoder's boxes",
           r"the root is (\d+) x (\d+) graph units\), and the decoder's graph at its stack box \(`#node=model:norm`; "
           r"(\d+) x (\d+), where its \d+ calls drawn one by one, `stack=0`, take (\d+) x (\d+)\)",
           lambda: (*s.in_source(_BROWSER, r"# the 70B root's box, decoder included: (\d+) x (\d+)"),
                    *s.in_source(_BROWSER, r"# measured: (\d+) x (\d+)"),
                    *s.in_source(_BROWSER, r"# every call drawn: (\d+) x (\d+)"))),
    Figure("docs/limitations.md", "composites recorded", r"the (\d+) added since the first review recorded on sample",
           _composites_recorded),
    Figure("docs/cli.md", "model options' defaults",
           r"\| `--seed N` \| seed of the model's weights and of the inputs \(default (\d+)\).*?\| `--vocab N` \| "
           r"integer inputs without a range are drawn from `\[0, N\)` \(default (\d+)\)",
           lambda: (*_option("common/cli/model.py", "--seed"), *_option("common/cli/model.py", "--vocab"))),
    Figure("docs/cli.md", "verify's tolerance", r"The absolute tolerance \(`--atol`, default (\S+)\)",
           lambda: _option("ir2torch/cli/commands.py", "--atol")),
    Figure("docs/cli.md", "rewrite's listed lines", r"one `left alone:` line each \(the first (\d+);",
           lambda: _literal("ir2torch/cli/rewrite.py", "_LISTED")),
    Figure("docs/cli.md", "module times' passes", r"median of (\d+) passes on one thread\)",
           lambda: _option("benchmarks/module_times.py", "--runs")),
    Figure("docs/testing.md", "random inputs' scales", r"seeded normal values at scale ([\d.]+), ([\d.]+) or ([\d.]+),",
           _input_scales),
    Figure("docs/testing.md", "random recurrent layers", r"LSTM/GRU/RNN \((\d+-\d+) layers, uni- or bidirectional\)",
           lambda: ("-".join(s.in_source("common/testing/models.py",
                                         r"hidden, layers, bi = .*?draw\(st\.integers\((\d+), (\d+)\)\)")),)),
    Figure("docs/testing.md", "timm train families", r"`test_timm_train\.py` \((\d+) timm families\)",
           lambda: (str(len(s.literal("tests/ecosystems/test_timm_train.py", "TRAIN"))),)),
    Figure("docs/testing.md", "timm sweep sample", r"spread over its families, (\d+) by default",
           lambda: _option("benchmarks/sweep.py", "--limit")),
    Figure("docs/testing.md", "timm sweeps' size limit", r"the rest skipped as over (\d+) M parameters",
           lambda: (f"{float(s.option_default('benchmarks/sweep.py', '--max-params')) / 1e6:g}",)),
    *(Figure("docs/opaque.md", f"opaque classes ({i})", rx,
             lambda: _literal("torch2ir/opaque/driver.py", "MAX_OPAQUE_CLASSES"))
      for i, rx in enumerate([r"everything below it is converted as the next section says; at most (\d+) classes\)",
                              r"a model that would need more than (\d+) opaque classes in all"])),
    Figure("docs/opaque.md", "attributes' nesting", r"string-keyed dicts of those, at most (\d+) levels deep",
           lambda: _literal("common/opaque.py", "MAX_DEPTH")),
    Figure("docs/performance.md", "slope's aim", r"\(\*\*[\d.]+ %\*\*; the aim is (\d+) %\)",
           lambda: (s.cell("results.md", "Targets", "convert's per-layer slope / export's (issue 32)", "limit")
                    .removeprefix("<= ").removesuffix("%"),)),
    Figure("docs/performance.md", "compiled architectures", r"`tests/real/test_compile\.py` checks (\d+) architectures",
           lambda: (str(len(s.literal("tests/real/test_compile.py", "SAMPLE"))),)),
    Figure("docs/performance.md", "ONNX TorchScript opset", r"then the TorchScript exporter \(opset (\d+),",
           lambda: s.in_source("benchmarks/onnx_task.py", r"opset_version=(\d+)")),
    Figure("docs/performance.md", "trace-once corpus entries (same IR)", r"[Aa]ll (\d+) entries convert to the same IR",
           lambda: s.trace_once_corpus()[:1]),
    Figure("docs/performance.md", "trace-once corpus entries (train on CPU)", r"\d+ of the (\d+) entries qualify",
           lambda: s.trace_once_corpus()[:1]),
    Figure("docs/performance.md", "trace-once corpus entries (check)", r"\((\d+) of (\d+) equal and exact;",
           lambda: s.trace_once_corpus()[:1] * 2),
    Figure("docs/generation.md", "logits within float32 rounding",
           r"within (\S+) at every step on the tiny models of `tests/real/test_generate\.py`",
           lambda: s.in_source("tests/real/test_generate.py", r"\nLOGITS_ATOL = (\S+)\n")),
    Figure("docs/generation.md", "beam search", r"beam search \((\d+) beams, the cache reordered\)",
           lambda: s.in_source("tests/ir2torch/test_generation.py", r"num_beams=(\d+)")),
    Figure("docs/generation.md", "static cache's keys and values",
           r"static cache after a prompt step agree to (\S+) \(`tests/ir2torch/test_generation_caches\.py`\)",
           lambda: s.in_source("tests/ir2torch/test_generation_caches.py",
                               r"theirs\.\w+, rtol=[\de.-]+, atol=([\de.-]+)\)")),
    Figure("docs/performance.md", "train-mode passes on CPU",
           r"costs less than the meta pass at (\d+) us per op, the copies stay under (\d+) MiB", _train_device),
]

assert all(re.compile(f.pattern) for f in FIGURES)
