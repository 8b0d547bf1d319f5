"""The child process of the op-level fuzz (``tests/security/test_op_fuzz.py``).

``python -m tests.security.op_fuzz_child OUT.json EXAMPLES WATCHED DERANDOMIZE [PER_OP]`` draws ``PER_OP`` FlatIR
documents starting with each operator of the default surface (and of :mod:`common.ste_ops`), then ``EXAMPLES`` more,
each a chain of one to three operators taken from those the default allow-list accepts (the default surface,
:mod:`common.surface`), with hostile arguments built from each operator's schema (negative, zero and huge sizes,
out-of-range indices and dims, odd strides, mixed dtypes, empty tensors, paths into ``WATCHED``), and runs each
through save -> ``FlatIR.load`` -> ``ir2torch.convert`` -> one call, each within :data:`EXAMPLE_SECONDS` (a hang
ends the process with status 1 and the stacks on stderr). It writes a summary to ``OUT.json``: the examples run, the
IRError classes seen, and every outcome that is not an IRError or that changed process-wide state (grad mode,
default dtype, thread count, the default generator's state where no op of the document draws random numbers). A
signal (a crash) is seen by the parent.
"""

from __future__ import annotations

import faulthandler
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ir2torch
from common import FlatIR
from common.errors import IRError
from common.safety import DEFAULT_ALLOWLIST

_INTS = (0, 1, -1, 2, 3, 7, -7, 64, 2**31 - 1, 2**31, -(2**31), 2**62, 2**63 - 1, -(2**63), 10**6, 10**9, 10**12)
_FLOATS = (0.0, -1.0, 0.5, 1e308, -1e308, 1e-300, 3.0, -0.0, {"$float": "nan"}, {"$float": "inf"},
           {"$float": "-inf"})
_DTYPES = ("float32", "float64", "float16", "bfloat16", "int64", "int32", "int8", "uint8", "bool", "complex64")
#: The inputs every document gets: float, int64 and bool tensors (one empty), and an int.
INPUTS = {
    "x": ((2, 3), "float32"),
    "i": ((4,), "int64"),
    "b": ((2, 3), "bool"),
    "e": ((0, 3), "float32"),
}
#: Seconds one example may take before the child dumps its stacks and exits (status 1): a kernel that loops on a
#: hostile argument (``choose_qparams_optimized`` with ``ratio=inf``) is a finding, seen in minutes, not at the
#: parent's timeout. Examples take milliseconds; this leaves room for a loaded machine.
EXAMPLE_SECONDS = 120
_SKIP_TYPES = ("Generator", "Storage", "Stream", "Dimname", "Layout", "MemoryFormat", "ScalarType?[]",
               "Any", "Future", "Await", "__torch__", "RRef", "Capsule", "Dict", "AnyEnumType")


def _allowed_ops() -> list[Any]:
    """Every ATen overload the default allow-list accepts (the classified table's pure and allocating ones)."""
    ops = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        if not name.startswith("aten::"):
            continue
        op, _, overload = name[len("aten::"):].partition(".")
        qualified = f"aten.{op}.{overload or 'default'}"
        if not DEFAULT_ALLOWLIST.is_allowed(qualified):
            continue
        packet = getattr(torch.ops.aten, op, None)
        overload_obj = getattr(packet, overload or "default", None) if packet is not None else None
        if overload_obj is None:
            continue
        schema = overload_obj._schema
        if any(any(bad in str(a.type) for bad in _SKIP_TYPES) and not _optional(a) for a in schema.arguments):
            continue
        ops.append((qualified, schema))
    return ops + _ste_ops()


def _ste_ops() -> list[Any]:
    """This library's straight-through estimators (:mod:`common.ste_ops`), which every allow-list accepts."""
    from common.ste_ops import OPS

    return [(f"torch2ir_ste.{name}.default", op._schema) for name, op in OPS.items()]


def _optional(arg: Any) -> bool:
    """Whether ``arg`` may be ``None`` (``T?``, printed ``Optional[T]``) or left out (it has a default)."""
    kind = str(arg.type)
    return arg.has_default_value() or kind.endswith("?") or kind.startswith("Optional[")


def _value(arg: Any, refs: list[str], watched: str) -> st.SearchStrategy:
    """A hostile value for schema argument ``arg`` (``None`` omitted by the caller)."""
    kind = str(getattr(arg, "real_type", arg.type)).replace(" ", "")
    kind = kind.removeprefix("Optional[").removesuffix("]") if kind.startswith("Optional[") else kind
    listed = kind.startswith("List[")
    kind = kind.removeprefix("List[").removesuffix("]") if listed else kind
    ref = st.sampled_from(refs).map(lambda r: {"$ref": r})
    ints = st.sampled_from(_INTS)
    if kind.startswith("Tensor"):
        return st.lists(ref, min_size=0, max_size=3) if listed else ref
    if kind in ("SymInt", "int"):
        return st.lists(ints, min_size=0, max_size=4) if listed else st.one_of(ints, ints.map(lambda i: [i]))
    if kind in ("float", "SymFloat"):
        return st.lists(st.sampled_from(_FLOATS), max_size=3) if listed else st.sampled_from(_FLOATS)
    if kind in ("bool", "SymBool"):
        return st.lists(st.booleans(), max_size=3) if listed else st.booleans()
    if kind == "ScalarType":  # a real dtype, or the int ATen would cast unchecked (refused by validation)
        return st.one_of(st.sampled_from(_DTYPES).map(lambda d: {"$dtype": d}), st.sampled_from([64, -1, 6]))
    if kind in ("Layout", "MemoryFormat"):
        return st.sampled_from([99, -1, 0])
    if kind == "Device":  # the devices a file may spell, and some it may not
        return st.sampled_from([{"$device": d} for d in ("cpu", "meta", "cuda", "cpu:99", "mps", "bogus", "")] + [7])
    if kind in ("Scalar", "number"):
        return st.one_of(ints, st.sampled_from(_FLOATS), st.booleans())
    if kind.startswith("str"):
        return st.sampled_from(["mean", "none", "sum", "reflect", "tanh", "", f"{watched}/pwned", "/etc/passwd",
                                "../x", "a\x00b"])
    return st.none()


_RANDOM_WORDS = ("rand", "bernoulli", "normal", "uniform", "exponential", "geometric", "cauchy", "multinomial",
                 "dropout", "random", "poisson", "rrelu")


def _draws_random(name: str) -> bool:
    """Whether op ``name`` may draw from the default generator (its tag, or a sampling word in its name)."""
    ns, op, overload = name.split(".")
    tags = getattr(getattr(getattr(getattr(torch.ops, ns), op), overload), "tags", ())
    return torch.Tag.nondeterministic_seeded in tags or any(w in op for w in _RANDOM_WORDS)


def _refs(value: Any) -> list[str]:
    """The names ``value`` references, in order (as the FlatIR's ``inputs`` lists them)."""
    if isinstance(value, dict):
        if "$ref" in value:
            return [value["$ref"]]
        return [r for v in value.values() for r in _refs(v)]
    if isinstance(value, list):
        return [r for v in value for r in _refs(v)]
    return []


@st.composite
def documents(draw: Any, ops: list[Any], watched: str, first: int | None = None) -> tuple[dict[str, Any], bool]:
    """A FlatIR document of 1-3 allowed ops with hostile arguments, and whether one of them draws random numbers.
    With ``first``, the first op is ``ops[first]``."""
    refs = list(INPUTS)
    records = {k: {"name": k, "shape": list(shape), "dtype": dtype} for k, (shape, dtype) in INPUTS.items()}
    nodes = []
    random = False
    for index in range(draw(st.integers(1, 3))):
        if index == 0 and first is not None:
            name, schema = ops[first]
        else:
            name, schema = ops[draw(st.integers(0, len(ops) - 1))]
        random = random or _draws_random(name)
        args: dict[str, Any] = {}
        kwargs: dict[str, Any] = {}
        for arg in schema.arguments:
            if _optional(arg) and draw(st.booleans()):
                continue
            value = draw(_value(arg, refs, watched))
            if value is None and not _optional(arg):
                break
            (kwargs if arg.kwarg_only else args)[arg.name] = value
        node = f"n{index}"
        output = {"name": node, "shape": [], "dtype": "float32"}
        inputs = [records[r] for r in _refs([args, kwargs])]
        nodes.append({"name": node, "op_type": name, "module_path": "root", "args": args, "kwargs": kwargs,
                      "inputs": inputs, "outputs": [output], "source": ["root", node]})
        records[node] = output
        refs.append(node)
    last = nodes[-1]["name"]
    spec_leaf = {"type": None, "context": None, "children_spec": []}
    in_spec = [1, {"type": "builtins.tuple", "context": "null", "children_spec": [
        {"type": "builtins.tuple", "context": "null", "children_spec": [spec_leaf] * len(INPUTS)},
        {"type": "builtins.dict", "context": "[]", "children_spec": []}]}]
    doc = {
        "format": "torch2ir.flat", "format_version": 1,
        "meta": {"model": "Fuzz", "torch_version": torch.__version__, "decomposition": "none", "device": "cpu",
                 "unread_state": []},
        "graph_inputs": [{"name": k, "shape": list(s), "dtype": d} for k, (s, d) in INPUTS.items()],
        "graph_outputs": [{"name": last, "shape": [], "dtype": "float32"}],
        "in_spec": json.dumps(in_spec), "out_spec": json.dumps([1, spec_leaf]),
        "forward_arg_names": list(INPUTS), "range_constraints": {}, "weights": [], "weight_name_mapping": {},
        "nodes": nodes,
    }
    return doc, random


def _inputs() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for shape, dtype in INPUTS.values():
        if dtype == "bool":
            out.append(torch.rand(shape, generator=gen) > 0.5)
        elif dtype == "int64":
            out.append(torch.randint(-3, 5, shape, generator=gen))
        else:
            out.append(torch.randn(shape, generator=gen))
    return tuple(out)


def _state() -> dict[str, Any]:
    return {"grad": torch.is_grad_enabled(), "dtype": str(torch.get_default_dtype()),
            "threads": torch.get_num_threads(), "inference": torch.is_inference_mode_enabled(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "anomaly": torch.is_anomaly_enabled(), "cwd": os.getcwd()}


def main(out_path: str, examples: int, watched: str, derandomize: bool, per_op: int = 0) -> None:
    ops = _allowed_ops()
    only = os.environ.get("OP_FUZZ_ONLY")  # scripts/op_fuzz.py --ops: a comma-separated list of overloads
    if only:
        wanted = set(only.split(","))
        ops = [op for op in ops if op[0] in wanted]
        missing = wanted - {op[0] for op in ops}
        if missing:
            raise SystemExit(f"not in the default surface: {sorted(missing)}")
    first: Counter = Counter()
    folder = Path(tempfile.mkdtemp(prefix="op-fuzz-docs-"))  # under TMPDIR, outside the watched folders
    summary: dict[str, Any] = {"ops": len(ops), "examples": 0, "outcomes": Counter(), "failures": [],
                               "state_changes": []}
    reference = _state()
    current = Path(out_path + ".current")
    started = time.perf_counter()

    def run(drawn: tuple[dict[str, Any], bool]) -> None:
        doc, random = drawn
        summary["examples"] += 1
        first[doc["nodes"][0]["op_type"]] += 1
        path = folder / "doc.flat.json"
        path.write_text(json.dumps(doc))
        current.write_text(json.dumps(doc))  # what was running, should the process die
        rng = torch.get_rng_state()
        faulthandler.dump_traceback_later(EXAMPLE_SECONDS, exit=True)  # a hang ends the child (status 1)
        try:
            model = ir2torch.convert(FlatIR.load(path), max_bytes=2 * 2**30)
            with torch.no_grad():
                model(*_inputs())
            outcome = "ok"
        except IRError as exc:
            outcome = type(exc).__name__
        except Exception as exc:  # noqa: BLE001 - every other exception is a finding, recorded
            outcome = "not-an-IRError"
            summary["failures"].append({"ops": [n["op_type"] for n in doc["nodes"]],
                                        "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                                        "doc": json.dumps(doc)[:4000]})
        finally:
            faulthandler.cancel_dump_traceback_later()
        summary["outcomes"][outcome] += 1
        now = _state()
        changed = {k: (reference[k], now[k]) for k in reference if now[k] != reference[k]}
        if not random and not torch.equal(rng, torch.get_rng_state()):
            changed["rng"] = ("unchanged", "changed")
        if changed:
            summary["state_changes"].append({"ops": [n["op_type"] for n in doc["nodes"]], "changed": repr(changed)})
            torch.set_grad_enabled(reference["grad"])  # keep examples independent
            torch.set_default_dtype(getattr(torch, reference["dtype"].removeprefix("torch.")))
            torch.set_num_threads(reference["threads"])
            torch.set_rng_state(rng)
            os.chdir(reference["cwd"])

    def given_ops(count: int, which: int | None) -> None:
        settings(max_examples=count, derandomize=derandomize, database=None, deadline=None,
                 suppress_health_check=list(HealthCheck), report_multiple_bugs=False)(
            given(documents(ops, watched, which))(run))()

    for which in range(len(ops)) if per_op else ():  # every op first in PER_OP documents
        given_ops(per_op, which)
    if examples:
        given_ops(examples, None)
    summary["seconds"] = round(time.perf_counter() - started, 1)
    summary["outcomes"] = dict(summary["outcomes"])
    summary["cases_per_op_min"] = min(first[name] for name, _ in ops) if ops else 0
    summary["op_names"] = sorted(name for name, _ in ops)
    Path(out_path).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    faulthandler.enable()
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", int(sys.argv[5]) if len(sys.argv) > 5 else 0)
