"""Write ``docs/supported.md`` from the code: the registries of both converters and the real-model corpus.

Run ``python scripts/supported.py`` after adding a handler or a corpus model; ``--check`` exits 1 when the
file is stale (``tests/test_supported_doc.py`` does the same in ``make test``). The corpus table lists what
``tests/real/test_corpus.py`` proves on every run: the passing models round-trip exactly, the unsupported
ones fail with the ``ConversionError`` quoted here.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "supported.md"
SWEEP = ROOT / "benchmarks" / "results-sweep.md"  # the last registry sweep's tables


def _module_types() -> list[str]:
    import ir2torch
    import torch2ir

    t2i, i2t = torch2ir.get_default_converter(), ir2torch.get_default_converter()
    built = set(i2t.builders.keys())
    by_family: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
    emitted = set()
    for cls, ir_type in t2i.types().items():
        emitted.add(ir_type)
        mark = "yes" if ir_type in built else "**no builder**"
        by_family[cls.__module__.rsplit(".", 1)[-1]].append((f"`{cls.__module__}.{cls.__qualname__}`", ir_type, mark))
    for qualname, ir_type in t2i.named_types().items():  # an optional library's, registered by name (torchao)
        emitted.add(ir_type)
        mark = "yes" if ir_type in built else "**no builder**"
        by_family[qualname.rsplit(".", 2)[-2]].append((f"`{qualname}` (by name)", ir_type, mark))
    lines = [
        "## Module types",
        "",
        f"{len(t2i.types()) + len(t2i.named_types())} `torch.nn` and `torch.ao` quantization classes are converted to "
        "typed implementations (their",
        "attributes and state, no graph) and rebuilt as the very same class. Any other module becomes an",
        "implementation with its own graph (type `module`) and is rebuilt as a `torch.fx.GraphModule` at the same",
        "path.",
        "Classes of an optional library (torchao's PT2E observers) are registered by name: torchao is imported only",
        "for a model or an IR that holds one.",
        "The `torch.ao` ones (observers, fake-quantize, stubs, fused and QAT layers) also carry the module's `qconfig`",
        "and `prepare`'s observer hook as allow-listed data (`common.quant`; see extending.md, \"Quantized models\").",
        "",
        "| torch.nn module | class | IR type | ir2torch builder |",
        "|---|---|---|---|",
    ]
    for family in sorted(by_family):
        for name, ir_type, mark in sorted(by_family[family]):
            lines.append(f"| {family} | {name} | `{ir_type}` | {mark} |")
    only_built = sorted(built - emitted)
    lines += ["", "Types only ir2torch builds (containers rebuilt as real `torch.nn` containers, and `opaque`: a "
              "module torch.export cannot trace, kept with `opaque=`, see [opaque leaves](opaque.md)): "
              + ", ".join(f"`{t}`" for t in only_built) + "."]
    return [*lines, "", *_exclusions()]


def _exclusions() -> list[str]:
    from torch2ir.handlers import EXCLUDED

    lines = [
        "### Public `torch.nn` classes without a handler",
        "",
        "Deliberately (`torch2ir.handlers.EXCLUDED`; a test fails on any public `torch.nn` module class that has",
        "neither a handler pair nor an entry here):",
        "",
        "| class | reason |",
        "|---|---|",
    ]
    for cls in sorted(EXCLUDED, key=lambda c: c.__name__):
        lines.append(f"| `torch.nn.{cls.__name__}` | {EXCLUDED[cls]} |")
    return lines


def _functions() -> list[str]:
    from common.known_ops import KNOWN_OPS
    from common.safety import HIGHER_ORDER_OPS, PYTHON_FUNCTIONS

    return [
        "## Functions a graph may call",
        "",
        "Loading or rebuilding an IR resolves function names through an allow-list and nothing else:",
        "",
        "- every ATen operator of the installed torch (`aten.<op>.<overload>`, checked against `torch.ops.aten`);",
        "- higher-order operators with IR subgraphs: " + ", ".join(f"`{n}`" for n in sorted(HIGHER_ORDER_OPS)) + ";",
        f"- {len(PYTHON_FUNCTIONS)} Python functions: " + ", ".join(f"`{n}`" for n in sorted(PYTHON_FUNCTIONS)) + ";",
        "- known operators of other libraries, argued safe in `common/known_ops.py` and resolved by importing the one "
        "module that registers each when a rebuild needs it: "
        + ", ".join(f"`{n}` (`{k.module}`)" for n, k in sorted(KNOWN_OPS.items())) + ";",
        "- names a converter adds with `Allowlist.allow(name, fn)` (that converter only).",
        "",
        "Opt-in namespaces (operators other libraries register with `torch.library`, accepted only with `allow=`,",
        "`--allow-op` or `.allowlist.allow(...)`, and resolved only among operators registered in the process):",
        "",
        "| namespace | registered by | for |",
        "|---|---|---|",
        "| `transformers::*` | `transformers` | its other operators (`grouped_mm_fallback`, which mixture-of-experts "
        "layers call, is known: no opt-in) |",
        "| `quantized_decomposed::*` | `torch.ao` / `torchao` (PT2E) | `convert_pt2e` models: "
        "`quantize_per_tensor`, `dequantize_per_channel`, ... |",
    ]


def _corpus() -> list[str]:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.real.corpus import CORPUS, UNSUPPORTED

    lines = [
        "## Real architectures",
        "",
        "Built from small `transformers` configs (or `torch.nn` classes) with random weights, nothing downloaded",
        "(`tests/real/corpus.py`). On every `make test-zoo`, `tests/real/test_corpus.py` checks each of them with",
        "`common.testing.assert_roundtrip`: convert, JSON save and load, rebuild, load the original state dict,",
        "outputs equal (max abs diff <= 1e-5; in practice 0), same module paths and state-dict keys, every module",
        "of a handled class rebuilt as that class. Then again in train mode: same seed, same outputs, same",
        "batch-norm statistics after the step. After one backward pass, every parameter of the rebuild has the",
        "original's gradient (`tests/real/test_gradients.py`).",
        "",
        "| model | class | kind | eval mode | train mode |",
        "|---|---|---|---|---|",
    ]
    for arch in CORPUS:
        train = "exact" if not arch.train_differs else f"differs: {arch.train_differs}"
        lines.append(f"| {arch.name} | `{arch.label}` | {arch.kind} | exact | {train} |")
    exact = sum(1 for a in CORPUS if not a.train_differs)
    lines += [
        "",
        f"{len(CORPUS)} architectures round-trip exactly in eval mode, {exact} of them in train mode too.",
        "",
        "Subclasses of handled layers that override `forward` (`FalconLinear`, `ConvNextLayerNorm`, the scaled",
        "word embeddings of BART/Gemma, weight-normalized convolutions) are rebuilt as graphs of their own",
        "forward, not as the base class: their computation differs from the base class's.",
        "",
        "### Not supported",
        "",
        "Each of these raises `common.errors.ConversionError` (checked by the same test) for the reason given.",
        "",
        "| model | class | reason |",
        "|---|---|---|",
    ]
    for arch in UNSUPPORTED:
        lines.append(f"| {arch.name} | `{arch.label}` | {arch.reason} |")
    return lines


def _ecosystems() -> list[str]:
    """The ecosystem tests and the totals of the last registry sweep (``benchmarks/results-sweep.md``)."""
    lines = [
        "## Other model libraries",
        "",
        "`make test-zoo` also runs `tests/ecosystems/`: torchvision, timm, diffusers and brevitas models with",
        "random weights at small sizes, each exact against eager in eval mode, also after a JSON round trip",
        "(see [Testing](testing.md)): every torchvision classification, segmentation, video (9) and quantizable",
        "(12) model, one model per timm family (71, `tests/ecosystems/timm_sample.py`; 19 more with",
        "`TORCH2IR_TIMM_SLOW=1`), five diffusers autoencoders and the UNet/transformer backbones, brevitas'",
        "bnn_pynq TFC, CNV and LFC and a network of its quantized layers. Every parameter's gradient is compared",
        "too (brevitas' straight-through estimators included: they are recorded as the `torch2ir_ste` operators of",
        "`common.ste_ops`, each with the estimator's backward), and a subset also checks",
        "train mode, the fixpoint, swapping every graph module and lowering.",
        "Whole registries are swept by `python -m benchmarks.sweep --zoo torchvision|timm|diffusers|transformers`",
        "(each model built, converted, rebuilt and compared with eager in a child process; every transformers model",
        "type from its default configuration shrunk generically, the first of a cascade of shrunk configurations and",
        "inputs that runs in eager mode kept (`benchmarks/sweep_transformers.py`); a type none of which runs counts as",
        "\"eager failed\"); the totals of the last sweep,",
        "from `benchmarks/results-sweep.md` (in the repository), are below. \"Differs without an error\" is the",
        "outcome the project treats as a bug.",
        "",
        "| sweep | models | totals |",
        "|---|---|---|",
    ]
    sweep = SWEEP
    section, counts, rows = None, [], []
    for line in [*sweep.read_text(encoding="utf-8").splitlines(), "### end: 0 models"]:
        if line.startswith("### "):
            if section is not None:
                rows.append(f"| {section[0]} | {section[1]} | {', '.join(counts)} |")
            title, _, size = line[4:].rpartition(": ")
            section, counts = (title, size.split()[0]), []
        elif section is not None and line.startswith("| ") and line.count("|") == 3 and "status" not in line:
            status, number = (cell.strip() for cell in line.strip("|").split("|"))
            if number.isdigit():
                counts.append(f"{number} {status}")
    return [*lines, *rows]


def _pinned_torch() -> str:
    """The torch release ``constraints.txt`` pins: the page is the same on any torch the suite runs on (run on
    another release, a page that differs in anything else fails the check, which is then worth knowing)."""
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("torch=="):
            return line.split("==", 1)[1].strip()
    raise SystemExit("constraints.txt pins no torch release")


def render() -> str:
    """The whole of ``docs/supported.md``."""
    lines = [
        "# Supported types and architectures",
        "",
        "<!-- Generated by `python scripts/supported.py`; do not edit by hand. -->",
        "",
        f"Generated from the code with torch {_pinned_torch()}. A test fails when this page is",
        "stale, so it cannot drift from the registries or from what the test suite proves.",
        "",
        *_module_types(),
        "",
        *_functions(),
        "",
        *_corpus(),
        "",
        *_ecosystems(),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/supported.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.exists() or DOC.read_text(encoding="utf-8") != text:
            print("docs/supported.md is stale: run python scripts/supported.py", file=sys.stderr)
            return 1
        return 0
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(DOC)
    print(f"wrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
