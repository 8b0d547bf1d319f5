"""Rows of :data:`tests.docs.figures.FIGURES` for what docs/ir-spec.md says of real files, measured here in
seconds instead of quoted from a past run: the nodes and edges of the 80-layer Llama with Llama-3-70B dimensions
(built on ``meta``, as ``benchmarks/models.py`` builds it), the JSON structure of its IR and FlatIR and of a few
corpus models' (values per node, nesting, bytes per array or object, objects per node, read by the same scan
``IR.load`` runs), the memory of an ``aten.full`` and the FLOPs of the compute-budget test's convolution."""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any

from tests.docs import derived as d
from tests.docs import sources as s
from tests.docs.row import Figure

_SPEC = "docs/ir-spec.md"
#: corpus models whose files join the 70B-dims Llama's in the "real files" figures (CNNs: the most values per node)
SAMPLE = ("resnet", "mobilenet_v2", "efficientnet", "bert")
_BUDGET_TEST = "tests/security/test_compute_budget.py"


def _documents(ir: Any) -> tuple[bytes, bytes]:
    """The text of ``ir``'s JSON (format 1: every implementation's own graph) and of its FlatIR's."""
    from common import json_files
    from common.serialize import PLAIN_FORMAT_VERSION, encode

    impls = ir.to_dict(value_fn=encode, edge_list=True)
    text = json_files.dumps({"format": "torch2ir.ir", "format_version": PLAIN_FORMAT_VERSION,
                             "implementations": impls}).encode()
    with tempfile.TemporaryDirectory(prefix="t2i-docs-") as tmp:
        path = ir.lower().save(Path(tmp) / "m.flat.json")
        flat = Path(path).read_bytes()
    return text, flat


def _expanded(ir: Any) -> int:
    """Graph nodes one forward of ``ir`` runs, every module call expanded (as validation counts them)."""
    import importlib

    validate = importlib.import_module("common.validate")
    seen: dict[str, Any] = {}
    original = validate.check_expanded
    validate.check_expanded = lambda calls, sizes: seen.update(calls=calls, sizes=sizes)
    try:
        ir.validate()
    finally:
        validate.check_expanded = original
    calls, sizes = seen["calls"], seen["sizes"]
    cost: dict[str, int] = {}

    def of(key: str) -> int:
        if key not in cost:
            cost[key] = sizes.get(key, 0) + sum(n * of(c) for c, n in calls.get(key, {}).items())
        return cost[key]

    return max(of(k) for k in calls)


@cache
def _llama() -> dict[str, Any]:
    """The 70B-dims Llama's IR: nodes, edges, expanded nodes, JSON objects, and its two documents' text."""
    import torch2ir
    from benchmarks.models import LLAMA_70B_LAYERS
    from benchmarks.scenarios import _scale_model

    model, args = _scale_model(LLAMA_70B_LAYERS, "70b")
    ir = torch2ir.convert(model, args)
    text, flat = _documents(ir)
    impls = json.loads(text)["implementations"]
    objects = sum(1 for _ in _objects(impls))
    return {"nodes": sum(len(i["nodes"]) for i in impls.values()),
            "edges": sum(len(i["edges"]) for i in impls.values()),
            "expanded": _expanded(ir), "objects": objects, "texts": (text, flat)}


def _objects(value: Any) -> Any:
    if isinstance(value, dict):
        yield value
        for v in value.values():
            yield from _objects(v)
    elif isinstance(value, list):
        for v in value:
            yield from _objects(v)


@cache
def _structures() -> list[tuple[int, int, int, int]]:
    """``(nodes, depth, containers, values, bytes)`` of the IR and FlatIR files of the Llama and of :data:`SAMPLE`."""
    import torch2ir
    from common import json_files
    from tests.real.corpus import CORPUS

    texts = list(_llama()["texts"])
    for arch in (a for a in CORPUS if a.name in SAMPLE):
        texts += _documents(torch2ir.convert(arch.build().eval(), *arch.inputs()))
    out = []
    for text in texts:
        doc = json.loads(text)
        nodes = (len(doc["nodes"]) if "nodes" in doc
                 else sum(len(i["nodes"]) for i in doc["implementations"].values()))
        out.append((nodes, *json_files.structure(text), len(text)))
    return out


def real_files() -> tuple[str, ...]:
    """Most JSON values per node, deepest nesting, least bytes per array or object, over the sample's files."""
    found = _structures()
    return (str(math.ceil(max(values / nodes for nodes, _, _, values, _ in found))),
            str(max(depth for _, depth, _, _, _ in found)),
            str(math.floor(min(size / containers for _, _, containers, _, size in found))))


def llama_graph() -> tuple[str, str]:
    """The 70B-dims Llama's nodes (to the hundred) and edges per node."""
    found = _llama()
    return d.thousands(str(round(found["nodes"], -2))), f"{found['edges'] / found['nodes']:.2f}"


def llama_objects() -> tuple[str]:
    """JSON objects per node of the 70B-dims Llama's IR, rounded."""
    return (str(round(_llama()["objects"] / _llama()["nodes"])),)


def llama_expanded() -> tuple[str]:
    """The order of magnitude of the nodes one forward of the 70B-dims Llama runs, calls expanded."""
    return (str(round(math.log10(_llama()["expanded"]))),)


def scan_cost() -> tuple[str]:
    """Whether the structure scan of the Llama's IR text costs less than the strict parse after it (CPU time, best
    of 5: about half of it on the machine this was written on)."""
    from common import json_files

    text = _llama()["texts"][0]

    def best(call: Any) -> float:
        times = []
        for _ in range(5):
            start = time.process_time()
            call()
            times.append(time.process_time() - start)
        return min(times)

    scan = best(lambda: json_files.structure(text))
    parse = best(lambda: json_files.loads_json(text)) - scan  # loads_json scans first
    return ("less than",) if scan < parse else (f"{scan / parse:.1f}x",)


def container_bytes() -> tuple[str]:
    """What an empty parsed dict costs in CPython (the largest empty container)."""
    return (str(max(sys.getsizeof({}), sys.getsizeof([]))),)


def full_bytes() -> tuple[str, str]:
    """The elements of ``forward_budget.py``'s ``aten.full`` example and their float32 bytes in GB."""
    count, = s.in_source("ir2torch/run_safety/forward_budget.py", r"``aten\.full\(\[(\d+)\], 1\.0\)``")
    return count, f"{int(count) * 4 / 1e9:g} GB"


def kernel_flops() -> tuple[str, ...]:
    """The compute-budget test's kernel and input sides and the FLOPs of their convolution (the counter's formula)."""
    import torch

    from ir2torch.run_safety.flops import human_flops, op_flops

    side, = s.in_source(_BUDGET_TEST, r"def __init__\(self, side: int = (\d+)\)")
    height, width = s.in_source(_BUDGET_TEST,
                                r"before_it_runs\(tmp_path\) -> None:\n +x = torch\.randn\(1, 1, (\d+), (\d+)\)")
    x = torch.empty(1, 1, int(height), int(width), device="meta")
    kernel = torch.empty(1, 1, int(side), int(side), device="meta")
    args = (x, kernel, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    out = torch.ops.aten.convolution.default(*args)
    return side, side, height, width, human_flops(op_flops(torch.ops.aten.convolution.default, args, {}, out))


def format_versions() -> tuple[str, str]:
    """The format version a file with shared bodies is written as, and the one without."""
    from common.serialize import FORMAT_VERSION, PLAIN_FORMAT_VERSION

    return str(FORMAT_VERSION), str(PLAIN_FORMAT_VERSION)


def fuzz_per_run() -> tuple[str, str]:
    """The op fuzz's documents after the per-operator ones, and a run's total to the hundred (the child's operators
    times ``PER_OP``, plus those)."""
    from tests.security.op_fuzz_child import _allowed_ops

    more, = s.in_source("tests/security/test_op_fuzz.py", r"count, per_op = examples\((\d+)\)")
    per_op = int(s.literal("tests/security/test_op_fuzz.py", "PER_OP"))
    return more, str(round(per_op * len(_allowed_ops()) + int(more), -2))


def sha256_digits() -> tuple[str]:
    import hashlib

    return (str(2 * hashlib.sha256().digest_size),)


def _plain_format() -> tuple[str]:
    return format_versions()[1:]


def _json_depth() -> tuple[str]:
    from common.json_files import MAX_JSON_DEPTH

    return (str(MAX_JSON_DEPTH),)


FIGURES: list[Figure] = [
    Figure(_SPEC, "real files' values, nesting and density",
           r"real files have at most (\d+) per node\).*?\(real files: at most (\d+)\) \|.*?\(real files: one per (\d+) "
           r"bytes or more\)", real_files),
    Figure(_SPEC, "objects per node", r"a node of a real IR is about (\d+):", llama_objects),
    Figure(_SPEC, "a parsed container's cost", r"a parsed container costs about (\d+) bytes", container_bytes),
    Figure(_SPEC, "expanded nodes of a real model", r"real models: about 10\*\*(\d+)\)", llama_expanded),
    Figure(_SPEC, "70B-dims Llama's nodes", r"Llama-3-70B dimensions has about (\d[\d ]*) nodes \(([\d.]+) edges per",
           llama_graph),
    Figure(_SPEC, "the scan against the parse", r"string contents skipped by the parity of the quotes before them\) "
           r"costs (less than) the strict parse", scan_cost),
    Figure(_SPEC, "aten.full's memory", r"`aten\.full\(\[(\d+)\], 1\.0\)` is a few bytes of JSON and ([\d.]+ GB)",
           full_bytes),
    Figure(_SPEC, "the compute budget's convolution",
           r"a (\d+)x(\d+) kernel made in the graph and convolved with a (\d+)x(\d+) input is ([\d.]+ TFLOP)",
           kernel_flops),
    Figure(_SPEC, "format versions",
           r"`bodies` \(format version (\d+), present only.*?written as format version (\d+) \(readable",
           format_versions),
    Figure(_SPEC, "format versions' table",
           r"\| (\d+) \| the format \| the IR has no shared body \| \| (\d+) \| `bodies`",
           lambda: format_versions()[::-1]),
    Figure(_SPEC, "shared bodies' heading", r"### Shared bodies \(`bodies`, format version (\d+)\)",
           lambda: format_versions()[:1]),
    Figure(_SPEC, "parsing's depth", r"\| \*\*parsing\*\* \| JSON depth at most (\d+),",
           _json_depth),
    Figure(_SPEC, "op fuzz per run", r"then (\d+) more, about (\d+) per run", fuzz_per_run),
    Figure(_SPEC, "int8_linear's planted size", r"an `int8_linear` of 10\*\*(\d+) x 10\*\*(\d+)\)",
           lambda: s.in_source("tests/security/test_memory_budget.py",
                               r'"in_features": 10\*\*(\d+), "out_features": 10\*\*(\d+)')),
    Figure(_SPEC, "ctc_loss's planted label", r"\(a label of 10\*\*(\d+) segfaulted\)",
           lambda: s.in_source("tests/security/test_data_preconditions.py", r"# a label of 10\*\*(\d+): a segfault")),
    Figure(_SPEC, "the long runs' findings",
           r"a special polynomial of degree 2\*\*(\d+), a `tensor_split` into 10\*\*(\d+) sections",
           lambda: (*s.in_source("tests/security/test_kernel_arguments.py", r"``n = 2\*\*(\d+)`` ran for minutes"),
                    *s.in_source("tests/security/test_kernel_arguments.py", r'"sections": 10\*\*(\d+)\}'))),
    Figure(_SPEC, "expanded nodes per forward", r"counted as expanded at load \(10\*\*(\d+) graph nodes per forward\)",
           d.fan_out),
    Figure(_SPEC, "sha256 digits", r"the SHA-256 of the tensors file's bytes \((\d+) lowercase hex digits\)",
           sha256_digits),
    Figure(_SPEC, "safetensors' size", r"the file's size must be (\d+) \+ the header length",
           lambda: s.in_source("common/tensor_files.py", r"if size != (\d+) \+ length \+ extent")),
    *(Figure(_SPEC, f"format 1 ({i})", rx, _plain_format) for i, rx in enumerate([
        r"older saves, format (\d+)'s", r"\*\*Older files\*\*: format (\d+) files", r"The format version stays (\d+):",
        r"Llama-3-70B dimensions is [\d.]+ MB in format (\d+) and"])),
    *(Figure(_SPEC, f"stand-ins' item size ({i})", rx,
             lambda: (str(s.literal("ir2torch/run_safety/unmeasured.py", "STAND_IN_ITEM")),))
      for i, rx in enumerate([r"a fake float32 tensor of the same shape \((\d+) bytes an element",
                              r"`int_repr` as (\d+) bytes an input element"])),
    Figure(_SPEC, "load budget's implementations",
           r"`\$graph` nodes, (\d[\d ]*) implementations\), `tests/security/test_payloads\.py`",
           lambda: (d.thousands(s.in_source("tests/common/test_load_budget.py", r"count = ([\d_]+)\n")[0]
                                .replace("_", "")),)),
]
