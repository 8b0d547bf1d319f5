"""Classify every ATen overload of the running torch; write its table, ``common/op_tables/torch-<X>.<Y>.json``.

Run ``python scripts/classify_ops.py`` after a torch upgrade (``tests/security/test_op_table.py`` fails until the
checked-in table matches the running torch). ``--check`` exits 1 when the table is stale, without writing.

Every overload gets exactly one class, by the first rule of :func:`classify` that matches:

- **refused** (with a reason): explicit per-op exceptions (``scripts/op_rules.py``), then name patterns and schema
  inspection for file I/O,
  unchecked memory, process state, device runtimes, TorchScript builtins on Python values, unbounded run time,
  and test-only ops;
  then every *private* op (a name starting with ``_``) that is neither argued safe here (:data:`ARGUED_PRIVATE`)
  nor emitted by ``torch.export``, ``torch2ir.lower`` or ir2torch on the project's corpus
  (:data:`EXPORTED_PRIVATE`): internal kernels trust their callers' checks, and each one the op-level fuzz ran
  long enough crashed on hostile arguments sooner or later;
- **allocating**: the size of the output comes from a non-tensor argument (factories without tensor inputs,
  size/shape lists, counts, scale factors) or from tensor *data* (``bincount``, ``repeat_interleave``...);
- **pure**: everything else: reads tensors and returns tensors (or views torch bounds-checks) whose sizes follow
  from the shapes of the inputs.

The Python-level functions of ``common.safety.PYTHON_FUNCTIONS`` are classified by the explicit table
:data:`PYTHON_CLASSES` below.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TABLES = ROOT / "common" / "op_tables"

PURE, ALLOCATING = "pure", "allocating"



def _rules() -> Any:
    """``scripts/op_rules.py``, loaded by path (this script also runs loaded by path, from the tests)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("op_rules", Path(__file__).with_name("op_rules.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_RULES = _rules()
(FILE_IO, UNCHECKED, PROCESS, DEVICE, SCRIPT, TEST_ONLY, UNCLASSIFIED, UNBOUNDED, PRIVATE) = (
    _RULES.FILE_IO, _RULES.UNCHECKED, _RULES.PROCESS, _RULES.DEVICE, _RULES.SCRIPT, _RULES.TEST_ONLY,
    _RULES.UNCLASSIFIED, _RULES.UNBOUNDED, _RULES.PRIVATE)
UNSAFE_NAMED_BUT_CHECKED: dict[str, str] = _RULES.UNSAFE_NAMED_BUT_CHECKED
REFUSED_OPS: dict[str, str] = _RULES.REFUSED_OPS
REFUSED_OVERLOADS: dict[str, str] = _RULES.REFUSED_OVERLOADS
PURE_OPS: dict[str, str] = _RULES.PURE_OPS
ALLOCATING_OPS: dict[str, str] = _RULES.ALLOCATING_OPS
EXPORTED_PRIVATE: dict[str, str] = _RULES.EXPORTED_PRIVATE


#: Private ATen ops allowed without export emitting them on the corpus, each argued above (``_unsafe_*`` tested
#: on out-of-range arguments; export's runtime assertions only raise; ``_reshape_copy`` checks the element count).
ARGUED_PRIVATE: frozenset[str] = frozenset(
    op for op in (*UNSAFE_NAMED_BUT_CHECKED, *PURE_OPS) if op.startswith("_"))

#: Names of int/int-list arguments that never set an output size (dimensions, modes, indices into the input).
SAFE_INT_ARGS = frozenset({
    "dim", "dims", "dim0", "dim1", "dim2", "dim1_", "start_dim", "end_dim", "axis", "axes", "perm", "source",
    "destination", "dim_list", "shifts", "keepdim", "reduction", "ignore_index", "index", "groups", "group",
    "num_groups", "correction", "unbiased", "k", "chunks", "split_size", "split_sizes",
    "start", "end", "step", "length", "narrow_dim", "dtype", "layout", "memory_format", "p", "ord", "blank",
    "padding_idx", "mode", "batch_dim", "seq_dim", "kernel_size", "stride", "dilation", "ceil_mode",
    "count_include_pad", "divisor_override", "upper", "lower", "left", "right", "transpose", "inverse", "side",
    "quant_min", "quant_max", "axis_", "ch_axis", "q_scale", "zero_point", "zero_points", "out_int32",
    "stacklevel", "largest", "sorted", "stable", "descending", "return_inverse", "return_counts", "approximate",
    "impl_index", "algorithm", "scale_grad_by_freq", "sparse", "include_last_offset",
    "dropout_state", "rounding_mode", "self_is_result", "is_result", "half_to_float", "input_dtype",
})

#: Names of float arguments that set an output size.
_SCALE_ARG = re.compile(r"^(scale_factors?|scales(_[dhw])?|output_scale|scales_[dhw])$")

_DEVICE_NAME = re.compile(r"(^|_)(cuda|cudnn|miopen|mps|xpu|hip|vulkan|metal|mtia|hpu|ipu|xla|cufft)(_|$)")
_SPARSE_CTOR = re.compile(r"^_?sparse_(coo|csr|csc|bsr|bsc|compressed)_tensor")
_SPARSE_INTERNAL = re.compile(r"sparse|(^|_)(coo|csr|csc|bsr|bsc|compressed)(_|$)")
_SPARSE_ACCESSORS = frozenset({"_indices", "_values", "indices", "values", "crow_indices", "col_indices",
                               "ccol_indices", "row_indices", "_coalesced", "coalesce", "is_coalesced"})
_GENERIC = re.compile(r"\b(t|t1|t2|tVal|Any|AnyEnumType)\b|Dict\[|Future\[|Await\[|RRef\[|__torch__|Capsule")
#: Argument types whose meaning the rules know; any other type makes an overload unclassified (refused).
_KNOWN_TYPE = re.compile(r"(Optional\[)?(List\[)?(Optional\[)?(Tensor|int|float|bool|complex|number|str|Device|"
                         r"Generator|QScheme|ScalarType|Layout|MemoryFormat)\]?\]?\]?")
#: Names of string arguments that select a mode among a fixed few (never a path, code or a size).
MODE_STRINGS = frozenset({
    "mode", "assert_msg", "padding", "api_name", "UPLO", "driver", "activation", "reduce", "algorithm",
    "rounding_mode", "equation", "norm", "approximate", "p", "ord", "indexing", "interpolation", "padding_side",
    "side", "pad_mode",
})
_NUMBER = re.compile(r"(Optional\[)?(int|float|bool|complex|number|Scalar|ScalarType)\]?")
_PATH_ARG = re.compile(r"(file|path|filename|dir)$")


def _types(schema: Any) -> list[str]:
    return [str(a.type) for a in list(schema.arguments) + list(schema.returns)]


def _is_tensor_type(text: str) -> bool:
    return "Tensor" in text


def classify_overload(op: str, schema: Any) -> tuple[str, str | None]:
    """The class (``pure``, ``allocating`` or ``refused``) and reason of ``aten::<op>`` with ``schema``."""
    if op in REFUSED_OPS:
        return "refused", REFUSED_OPS[op]
    if f"{op}.{schema.overload_name}" in REFUSED_OVERLOADS:
        return "refused", REFUSED_OVERLOADS[f"{op}.{schema.overload_name}"]
    args = list(schema.arguments)
    types = _types(schema)
    if any(_PATH_ARG.search(a.name) and "str" in str(a.type) for a in args):
        return "refused", f"{FILE_IO}: takes a file name"
    if "Storage" in types:
        return "refused", f"{UNCHECKED}: takes a raw storage"
    if any(str(a.type) in ("Generator", "Stream") for a in args):
        return "refused", f"{PROCESS}: operates on a random generator or stream object"
    if any(_GENERIC.search(t) for t in types) or any(t in ("str", "List[str]") for t in
                                                       [str(r.type) for r in schema.returns]):
        return "refused", f"{SCRIPT} (lists, dicts, strings, futures): not produced by torch.export"
    if any(str(a.type) == "str" and a.name in ("self", "a", "s", "string") for a in args):
        return "refused", f"{SCRIPT} (lists, dicts, strings, futures): not produced by torch.export"
    if op.startswith("_test_"):
        return "refused", TEST_ONLY
    if _SPARSE_CTOR.match(op):
        return "refused", f"{UNCHECKED}: sparse constructor that does not validate its indices by default"
    if _SPARSE_INTERNAL.search(op) or op in _SPARSE_ACCESSORS:
        return "refused", (f"{UNCHECKED}: sparse internals that trust their index tensors "
                           "(_convert_indices_from_csr_to_coo segfaults on crafted indices)")
    if "backward" in op:
        return "refused", (f"{UNCHECKED}: a backward kernel trusts the indices, offsets and sizes its forward made "
                           "(_embedding_bag_backward segfaults on crafted offsets); export's forward graphs have none")
    if op.startswith(("_foreach_", "_amp_foreach_", "_amp_update_scale", "_fused_adam", "_fused_sgd",
                      "_fused_adagrad")):
        return "refused", (f"{UNCHECKED}: an optimizer kernel over tensor lists whose lengths it does not all check "
                           "(_foreach_copy.out segfaults on lists of different lengths, found by the op-level fuzz); "
                           "export's forward graphs have none")
    if op.startswith(("_nnpack_", "_mkldnn_", "mkldnn_", "_cslt_", "_efficientzerotensor")):
        return "refused", (f"{DEVICE}: a backend-specific kernel that trusts its caller's checks "
                           "(_nnpack_spatial_convolution segfaults on hostile padding, found by the long op-level "
                           "fuzz); export writes the generic op")
    if op.startswith(("_dyn_quant_", "_weight_int4pack_mm", "_convert_weight_to_int4pack")):
        return "refused", (f"{UNCHECKED}: a packed 4-bit weight kernel trusts its packed layout and sizes "
                           "(_dyn_quant_matmul_4bit divides by zero on a zero block size, found by the long op-level "
                           "fuzz)")
    if "segment_reduce" in op:
        return "refused", f"{UNCHECKED}: offsets are not bounds-checked (reads past the data)"
    if "nested" in op:
        return "refused", f"{UNCHECKED}: nested-tensor internals built from buffers and offsets"
    if "unsafe" in op and op not in UNSAFE_NAMED_BUT_CHECKED:
        return "refused", f"{UNCHECKED}: an *unsafe* op skips its checks"
    if _DEVICE_NAME.search(op):
        return "refused", f"{DEVICE}: CUDA/cuDNN/MIOpen/MPS/accelerator-specific op"
    if re.search(r"seed|rng_state|graphsafe", op):
        return "refused", f"{PROCESS}: random generator state"
    if re.search(r"^_?set_|thread|profil|record_function|default_dtype|autocast_(en|ex)", op):
        return "refused", f"{PROCESS}: global setter"
    if op.startswith("_") and op not in ARGUED_PRIVATE:
        if op not in EXPORTED_PRIVATE:
            return "refused", PRIVATE
        if not any("Tensor" in t for t in types):  # aten.__and__.int: export writes operator.and_ on numbers
            return "refused", f"{PRIVATE} (an overload on Python numbers: export writes operator.* for those)"
    if op in PURE_OPS:
        return PURE, PURE_OPS[op]
    if not any("Tensor" in t for t in types):
        if all(_NUMBER.fullmatch(t) for t in types):
            return PURE, "arithmetic on int64/double scalars"
        return "refused", f"{SCRIPT} (lists, dicts, strings, futures): not produced by torch.export"
    for a in args:
        if not _KNOWN_TYPE.fullmatch(str(a.type).replace(" ", "")):
            return "refused", f"{UNCLASSIFIED} (argument {a.name!r} of type {a.type})"
        if "str" in str(a.type) and a.name not in MODE_STRINGS:
            return "refused", f"{UNCLASSIFIED} (string argument {a.name!r})"
    if op in ALLOCATING_OPS:
        return ALLOCATING, ALLOCATING_OPS[op]
    returns_tensor = any(_is_tensor_type(str(r.type)) for r in schema.returns)
    inputs_tensor = any(_is_tensor_type(str(a.type)) and not (a.kwarg_only and a.alias_info is not None
                                                               and a.alias_info.is_write) for a in args)
    if returns_tensor and not inputs_tensor:
        return ALLOCATING, "factory: the output size comes from its arguments"
    for a in args:
        t = str(a.type)
        if a.name in SAFE_INT_ARGS:
            continue
        if re.fullmatch(r"(Optional\[)?(List\[)?(int|SymInt)(\])?(\])?", t.replace(" ", "")):
            return ALLOCATING, f"the output size may come from argument {a.name!r}"
        if "float" in t and _SCALE_ARG.match(a.name):
            return ALLOCATING, f"the output size may come from argument {a.name!r}"
    if op in EXPORTED_PRIVATE:
        return PURE, f"private kernel that torch.export emits: {EXPORTED_PRIVATE[op]}"
    return PURE, None


def overloads() -> dict[str, Any]:
    """Every ``aten.<op>.<overload>`` registered in the running torch that ``torch.ops.aten`` resolves, with its
    schema: the union of the JIT schema table and the dispatcher's operator names."""
    import torch

    names: set[tuple[str, str]] = set()
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::"):
            names.add((schema.name[6:], schema.overload_name))
    for full in torch._C._dispatch_get_all_op_names():
        if full.startswith("aten::"):
            op, _, overload = full[6:].partition(".")
            names.add((op, overload))
    found: dict[str, Any] = {}
    for op, overload in sorted(names):
        try:
            packet = getattr(torch.ops.aten, op)
            resolved = getattr(packet, overload or "default")
        except (AttributeError, RuntimeError):
            continue
        if isinstance(resolved, torch._ops.OpOverload):
            found[f"aten.{op}.{overload or 'default'}"] = resolved._schema
    return found


#: Python-level functions of ``common.safety.PYTHON_FUNCTIONS``: name -> (class, reason).
_BOUNDED = "bounded by a size check in common.safety (ResourceBudgetError)"
PYTHON_CLASSES: dict[str, tuple[str, str | None]] = {
    "operator.add": (ALLOCATING, f"sequence concatenation: {_BOUNDED}"),
    "operator.mul": (ALLOCATING, f"sequence repetition: {_BOUNDED}"),
    "operator.pow": (ALLOCATING, f"integer power: {_BOUNDED}"),
    "operator.lshift": (ALLOCATING, f"integer shift: {_BOUNDED}"),
    "math.pow": (PURE, "float result"),
    "torch.arange": (ALLOCATING, "factory: the output size comes from its arguments"),
    "torch.full": (ALLOCATING, "factory: the output size comes from its arguments"),
    "torch.ones": (ALLOCATING, "factory: the output size comes from its arguments"),
    "torch.zeros": (ALLOCATING, "factory: the output size comes from its arguments"),
    "torch.tile": (ALLOCATING, "the output size comes from the repeats"),
    "torch.reshape": (PURE, "size checked against the input's element count"),
    "torch.nn.functional.interpolate": (ALLOCATING, "the output size comes from size or scale_factor"),
    "torch.nn.functional.pad": (ALLOCATING, "the output size comes from the pads"),
    "torch.nn.functional.conv_transpose1d": (ALLOCATING, "the output size grows with stride and padding"),
    "torch.nn.functional.conv_transpose2d": (ALLOCATING, "the output size grows with stride and padding"),
    "torch.nn.functional.conv_transpose3d": (ALLOCATING, "the output size grows with stride and padding"),
    "torch.nn.functional.conv1d": (ALLOCATING, "the output size grows with padding"),
    "torch.nn.functional.conv2d": (ALLOCATING, "the output size grows with padding"),
    "torch.nn.functional.conv3d": (ALLOCATING, "the output size grows with padding"),
}


def python_table() -> dict[str, tuple[str, str | None]]:
    """Class and reason of every name of ``common.safety.PYTHON_FUNCTIONS`` (pure unless listed)."""
    sys.path.insert(0, str(ROOT))
    try:
        from common.safety import PYTHON_FUNCTIONS
    finally:
        sys.path.remove(str(ROOT))
    return {name: PYTHON_CLASSES.get(name, (PURE, None)) for name in sorted(PYTHON_FUNCTIONS)}


def build_table() -> dict[str, tuple[str, str | None]]:
    """Class and reason of every ATen overload of the running torch, sorted by name."""
    return {name: classify_overload(name.split(".")[1], schema) for name, schema in overloads().items()}


def table_path(version: str | None = None) -> Path:
    """The table file of a torch version (default: the running one): ``common/op_tables/torch-<major>.<minor>.json``."""
    import torch

    major, minor = (version or torch.__version__).split(".")[:2]
    return TABLES / f"torch-{major}.{minor}.json"


def render() -> str:
    """The text of the running torch's table file (JSON; see :mod:`common.op_classes`)."""
    import json

    import torch

    table = build_table()
    python = python_table()
    counts = {c: sum(1 for v, _ in table.values() if v == c) for c in (PURE, ALLOCATING, "refused")}

    def value(cls: str, reason: str | None) -> str:
        return cls if cls != "refused" else f"refused:{reason}"

    document = {
        "generated_by": "scripts/classify_ops.py: do not edit; run it after a torch upgrade",
        "torch_version": torch.__version__,
        "counts": counts,
        "aten": {n: value(c, r) for n, (c, r) in table.items()},
        "aten_notes": {n: r for n, (c, r) in table.items() if c != "refused" and r},
        "python": {n: value(c, r) for n, (c, r) in python.items()},
        "python_notes": {n: r for n, (c, r) in python.items() if c != "refused" and r},
    }
    return json.dumps(document, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the running torch table file is stale")
    args = parser.parse_args(argv)
    text = render()
    path = table_path()
    if args.check:
        stale = not path.is_file() or path.read_text(encoding="utf-8") != text
        print(f"{path.relative_to(ROOT)} is {'stale' if stale else 'up to date'}")
        return int(stale)
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    table = build_table()
    for cls in (PURE, ALLOCATING, "refused"):
        print(f"{cls}: {sum(1 for c, _ in table.values() if c == cls)}")
    reasons: dict[str, int] = {}
    for c, r in table.values():
        if c == "refused":
            reasons[r] = reasons.get(r, 0) + 1
    for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]):
        print(f"  {n:5d}  {r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
