"""The classified ATen operator surface (``common/op_tables/*.json`` read by ``common.op_classes``, made by
``scripts/classify_ops.py``).

Every overload of the running torch has a class; refused operators named by a saved IR or FlatIR are refused at
load with the reason, and nothing runs; the checked-in table matches the classifier; the operators the corpus
produces are all allowed; the bounded ``operator`` wrappers refuse hostile constants and are exact otherwise.
"""

from __future__ import annotations

import copy
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import ir2torch
from common import IR, FlatIR, op_classes, safety
from common import errors as E
from common.safety import ALLOCATING_OPS, DEFAULT_ALLOWLIST, op_class
from common.serialize import ir_from_document
from tests.security.corpus import Document, documents, write

ROOT = Path(__file__).resolve().parent.parent.parent


def _classifier() -> Any:
    spec = importlib.util.spec_from_file_location("classify_ops", ROOT / "scripts" / "classify_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# -- (a) and (c): the table covers the running torch and is what the classifier makes ---------------------------
def test_every_registered_aten_overload_has_a_class() -> None:
    registered = _classifier().overloads()
    assert len(registered) > 3000
    missing = sorted(set(registered) - set(op_classes.ATEN))
    assert not missing, f"not classified (run scripts/classify_ops.py): {missing[:20]}"
    for name in registered:
        cls, reason = op_class(name)
        assert cls in ("pure", "allocating", "refused"), name
        assert cls != "refused" or reason, name


def test_checked_in_table_is_what_the_classifier_makes() -> None:
    classifier = _classifier()
    path = classifier.table_path()
    assert op_classes.table_file() == path  # the running torch reads its own minor version's table
    actual = path.read_text(encoding="utf-8")
    assert actual == classifier.render(), f"{path.name} is stale: run `python scripts/classify_ops.py` and commit it"


def test_a_torch_without_its_own_table_reads_the_nearest_older_one() -> None:
    tables = sorted(p.name for p in op_classes.TABLES.glob("torch-*.json"))
    assert "torch-2.13.json" in tables
    assert op_classes.table_file("2.13.5").name == "torch-2.13.json"
    assert op_classes.table_file("9.99.0").name == tables[-1]  # newest older table; unknown overloads refused by name
    assert op_classes.table_file("1.0.0").name == tables[0]


def test_table_is_for_this_torch() -> None:
    assert torch.__version__ == op_classes.TORCH_VERSION


def test_an_overload_missing_from_the_table_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(op_classes, "ATEN", {k: v for k, v in op_classes.ATEN.items() if k != "aten.sin.default"})
    monkeypatch.setattr(safety, "_ATEN_ALLOWED", {})
    cls, reason = op_class("aten.sin.default")
    assert cls == "refused" and "not classified for torch" in reason and "scripts/classify_ops.py" in reason
    with pytest.raises(E.UnsafeTargetError, match="not classified for torch"):
        safety.Allowlist().check("aten.sin.default", node="n")


# -- the classes themselves --------------------------------------------------------------------------------------
REFUSED = {
    "aten.from_file.default": "file I/O",
    "aten.save.default": "file I/O",
    "aten._sparse_coo_tensor_unsafe.default": "unchecked memory",
    "aten._sparse_coo_tensor_with_dims_and_tensors.default": "unchecked memory",
    "aten.sparse_coo_tensor.indices_size": "unchecked memory",
    "aten._reshape_alias.default": "unchecked memory",
    "aten.set_.source_Storage_storage_offset": "unchecked memory",
    "aten.set_.source_Tensor": "unchecked memory",
    "aten._nested_view_from_buffer.default": "unchecked memory",
    "aten.set_grad_enabled.default": "process state",
    "aten.manual_seed.default": "process state",
    "aten._print.default": "process state",
    "aten.warn.default": "process state",
    "aten.backward.default": "process state",
    "aten._backward.default": "process state",
    "aten.grad.default": "process state",
    "aten.record_stream.default": "device runtime",
    "aten.mul.left_t": "TorchScript builtin",
    "aten._convert_indices_from_csr_to_coo.default": "unchecked memory",
    "aten.segment_reduce.default": "unchecked memory",
    "aten._test_serialization_subcmul.default": "test-only",
    "aten.choose_qparams_optimized.default": "unbounded run time",
    "aten._fused_rms_norm.default": "private kernel that torch.export does not emit",
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_operators(name: str) -> None:
    cls, reason = op_class(name)
    assert cls == "refused" and reason.startswith(REFUSED[name]), (name, reason)
    assert not DEFAULT_ALLOWLIST.is_allowed(name)
    with pytest.raises(E.UnsafeTargetError, match=REFUSED[name]):
        DEFAULT_ALLOWLIST.resolve(name)


#: The classes allow these operators; some are outside the default surface (common.surface): opted in here.
_WIDE = DEFAULT_ALLOWLIST.extended(["aten::*"])


@pytest.mark.parametrize("name", ["aten.full.default", "aten.zeros.default", "aten.empty.memory_format",
                                  "aten.arange.start_step", "aten.randn.default", "aten.expand.default",
                                  "aten.repeat.default", "aten.constant_pad_nd.default", "aten.bincount.default",
                                  "aten.repeat_interleave.Tensor", "aten.upsample_nearest2d.vec",
                                  "aten.as_strided.default", "aten.new_zeros.default", "operator.mul"])
def test_allocating_operators(name: str) -> None:
    assert op_class(name)[0] == "allocating" and name in ALLOCATING_OPS and _WIDE.is_allowed(name)


@pytest.mark.parametrize("name", ["aten.add.Tensor", "aten.linear.default", "aten.view.default",
                                  "aten._unsafe_view.default", "aten._unsafe_index.Tensor",
                                  "aten._unsafe_index_put.default", "aten._unsafe_masked_index.default",
                                  "aten.zeros_like.default", "aten._assert_scalar.default", "aten.relu",
                                  "torch.relu", "higher_order.cond"])
def test_pure_operators(name: str) -> None:
    assert op_class(name)[0] == "pure" and name not in ALLOCATING_OPS and _WIDE.is_allowed(name)


#: Private kernels the op-level fuzz crashed, or that export never writes: refused by the private-op rule.
_PRIVATE_REFUSED = ["aten._fused_rms_norm.default", "aten._scaled_dot_product_flash_attention_for_cpu.default",
                    "aten._ctc_loss.default", "aten._linalg_svd.default", "aten._unique2.default",
                    "aten._histogramdd_bin_edges.default", "aten.__derive_index.default", "aten._infer_size.default"]


@pytest.mark.parametrize("name", _PRIVATE_REFUSED)
def test_private_kernels_export_does_not_emit_are_refused(name: str) -> None:
    cls, reason = op_class(name)
    assert cls == "refused" and reason.startswith("private kernel that torch.export does not emit"), reason
    with pytest.raises(E.UnsafeTargetError, match="private kernel that torch.export does not emit"):
        DEFAULT_ALLOWLIST.resolve(name)


def test_private_kernels_export_emits_are_allowed_with_where_they_appear() -> None:
    classifier = _classifier()
    assert len(classifier.EXPORTED_PRIVATE) < 40  # an explicit, reviewed table, not a pattern
    for op, where in classifier.EXPORTED_PRIVATE.items():
        assert op.startswith("_") and where, op
        overloads = [n for n in op_classes.ATEN if n.split(".")[1] == op]
        assert overloads, f"{op} is not an ATen op of this torch"
        tensor_overloads = [n for n in overloads if not op_class(n)[1] or "Python numbers" not in op_class(n)[1]]
        assert tensor_overloads and all(op_class(n)[0] in ("pure", "allocating") for n in tensor_overloads), op
    assert op_class("aten._softmax.default") == ("pure", "private kernel that torch.export emits: "
                                                         + classifier.EXPORTED_PRIVATE["_softmax"])
    assert op_class("aten.__and__.Tensor")[0] == "pure"
    cls, reason = op_class("aten.__and__.int")  # export writes operator.and_ on numbers
    assert cls == "refused" and "Python numbers" in reason


def test_every_allowed_private_kernel_is_emitted_or_argued() -> None:
    classifier = _classifier()
    for name, value in op_classes.ATEN.items():
        op = name.split(".")[1]
        if op.startswith("_") and not value.startswith("refused"):
            assert op in classifier.EXPORTED_PRIVATE or op in classifier.ARGUED_PRIVATE, name


def test_a_packet_is_allowed_only_when_every_overload_is() -> None:
    cls, reason = op_class("aten.add")  # aten::add.str is a TorchScript string builtin
    assert cls == "refused" and "aten.add.str" in reason
    assert op_class("aten.relu")[0] == "pure"


_UNSAFE_NAMED = {
    "_unsafe_view": "torch.ops.aten._unsafe_view.default(torch.zeros(4), [1000000])",
    "_unsafe_index": "torch.ops.aten._unsafe_index.Tensor(torch.zeros(4), [torch.tensor([100000000])])",
    "_unsafe_index_put": "torch.ops.aten._unsafe_index_put.default(torch.zeros(4), [torch.tensor([-100000000])], "
                         "torch.ones(1), True)",
}


@pytest.mark.parametrize("op", sorted(_UNSAFE_NAMED))
def test_allowed_unsafe_named_ops_raise_on_out_of_range_arguments(op: str) -> None:
    """Evidence for allowing them: out-of-range indices/sizes raise (run in a subprocess: a crash would not)."""
    assert op_class(f"aten.{op}.default" if op != "_unsafe_index" else "aten._unsafe_index.Tensor")[0] == "pure"
    run = subprocess.run([sys.executable, "-c", f"import torch\n{_UNSAFE_NAMED[op]}"], capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1 and ("IndexError" in run.stderr or "RuntimeError" in run.stderr), run.stderr[-300:]


def test_masked_index_clamps_out_of_range_indices() -> None:
    x = torch.arange(4.0)
    got = torch.ops.aten._unsafe_masked_index.default(x, torch.tensor([True, True]),
                                                      [torch.tensor([10**8, -(10**8)])], 0.0)
    assert got.tolist() == [3.0, 0.0]


def test_as_strided_is_bounds_checked_against_its_storage() -> None:
    with pytest.raises(RuntimeError, match="setStorage"):
        torch.ops.aten.as_strided.default(torch.zeros(4), [1000000], [1])


# -- (b): documents naming refused operators are refused at load, and nothing runs ------------------------------
@pytest.fixture(scope="module")
def tmp(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("op_table_documents"))


def _doc(tmp: str, kind: str) -> Document:
    return next(d for d in documents(tmp) if d.name == "kwargs" and d.kind == kind)


# one per refused class: (op, args of the IR node, reason fragment)
_ATTACKS = [
    ("aten.from_file.default", ["pwned.bin", True, 1000], "file I/O"),
    ("aten._reshape_alias.default", None, "unchecked memory"),
    ("aten._sparse_coo_tensor_unsafe.default", None, "unchecked memory"),
    ("aten.set_grad_enabled.default", [False], "process state"),
    ("aten.manual_seed.default", [0], "process state"),
    ("aten._print.default", ["pwned"], "process state"),
    ("aten.record_stream.default", None, "device runtime"),
    ("aten.mul.left_t", None, "TorchScript builtin"),
]


def _load(kind: str, path: Path) -> Any:
    return IR.load(path) if kind == "ir" else FlatIR.load(path)


@pytest.mark.parametrize("kind", ["ir", "flat"])
@pytest.mark.parametrize(("op", "args", "fragment"), _ATTACKS, ids=[a[0] for a in _ATTACKS])
def test_a_document_naming_a_refused_operator_is_refused_at_load(op: str, args: list | None, fragment: str,
                                                                 kind: str, tmp: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    document = _doc(tmp, kind)
    monkeypatch.chdir(tmp_path)
    doc = copy.deepcopy(document.doc)
    if kind == "ir":
        node = doc["implementations"]["root"]["nodes"]["add"]
        node["implementation"] = op
        if args is not None:
            node["args"] = args
    else:
        node = next(n for n in doc["nodes"] if n["name"] == "add")
        node["op_type"] = op
    path = write(document, doc, tmp_path / "doc")
    with pytest.raises(E.UnsafeTargetError) as info:
        _load(kind, path)
    message = str(info.value)
    assert op in message and f"refused: {fragment}" in message and "add" in message
    with pytest.raises(E.UnsafeTargetError, match=fragment):  # unvalidated, the rebuild refuses it too
        if kind == "ir":
            ir2torch.convert(ir_from_document(copy.deepcopy(doc), validate=False), device="meta")
        else:
            header = ("format", "format_version", "ops", "tensors", "provenance")
            FlatIR.from_dict({k: v for k, v in copy.deepcopy(doc).items() if k not in header}).validate()
    assert not (tmp_path / "pwned.bin").exists()


def test_the_required_ops_field_names_the_refusal(tmp: str, tmp_path: Path) -> None:
    for kind in ("ir", "flat"):
        document = _doc(tmp, kind)
        doc = copy.deepcopy(document.doc)
        doc["ops"] = ["aten.add.Tensor", "aten.from_file.default"]
        with pytest.raises(E.UnsafeTargetError, match=r"aten.from_file.default \(refused: file I/O"):
            _load(kind, write(document, doc, tmp_path / kind))


def test_a_document_naming_an_unclassified_overload_is_refused(tmp: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An overload of this torch that the table lacks (as after a torch upgrade) is refused with the fix."""
    monkeypatch.setattr(op_classes, "ATEN", {k: v for k, v in op_classes.ATEN.items() if k != "aten.sin.default"})
    monkeypatch.setattr(safety, "_ATEN_ALLOWED", {})
    for kind in ("ir", "flat"):
        document = _doc(tmp, kind)
        doc = copy.deepcopy(document.doc)
        if kind == "ir":
            doc["implementations"]["root"]["nodes"]["add"]["implementation"] = "aten.sin.default"
        else:
            next(n for n in doc["nodes"] if n["name"] == "add")["op_type"] = "aten.sin.default"
        with pytest.raises(E.UnsafeTargetError, match="not classified for torch .*run scripts/classify_ops.py"):
            _load(kind, write(document, doc, tmp_path / kind))


@pytest.mark.parametrize(("schema", "reason"), [
    ("aten::weird(Tensor self, str cmd) -> Tensor", "unclassified: safety not argued (string argument 'cmd')"),
    ("aten::weird(Tensor self, str filename) -> Tensor", "file I/O"),
    ("aten::weird(Tensor self, Any x) -> Tensor", "TorchScript builtin"),
    ("aten::weird_unsafe(Tensor self) -> Tensor", "unchecked memory"),
    ("aten::weird(Tensor self, Storage s) -> Tensor", "unchecked memory"),
])
def test_classifier_rules_refuse_what_they_cannot_argue(schema: str, reason: str) -> None:
    parsed = torch._C.parse_schema(schema)
    cls, why = _classifier().classify_overload(parsed.name.split("::")[1], parsed)
    assert cls == "refused" and why.startswith(reason), why


def test_allow_cannot_reopen_a_refused_aten_operator() -> None:
    allow = safety.Allowlist().extended(["aten::*", "aten::from_file"])
    assert not allow.is_allowed("aten.from_file.default")


# -- (d): the operators real models produce are allowed -----------------------------------------------------------
def test_corpus_subset_operators_are_all_allowed() -> None:
    """A cheap, representative subset (the full corpus: ``python -m tests.security.op_corpus``)."""
    from tests.models.zoo import by_name
    from tests.security.op_corpus import names_of, refused

    names: set[str] = set()
    for case, train, lower in (("conv_net", True, True), ("multi_io_leaves", False, False),
                               ("transformer", False, True)):
        zoo = by_name(case)
        names |= names_of(zoo.build, zoo.inputs, train=train, lower=lower)
    assert len(names) > 40
    assert refused(names) == {}


def test_a_refused_operator_inside_a_higher_order_op_body_is_refused(tmp_path: Path) -> None:
    """Bodies of ``higher_order.*`` ops are graphs of the same IR: their nodes go through the same table."""
    import json

    import torch2ir
    from tests.models.zoo import by_name

    case = by_name("no_grad_inside")
    args, kwargs = case.inputs()
    path = torch2ir.convert(case.build(), args, kwargs).save(tmp_path / "ng.ir.json")
    text = Path(path).read_text(encoding="utf-8")
    assert '"$graph"' in text and '"implementation": "aten.relu.default"' in text
    Path(path).write_text(text.replace('"implementation": "aten.relu.default"',
                                       '"implementation": "aten.set_grad_enabled.default"'), encoding="utf-8")
    with pytest.raises(E.UnsafeTargetError, match="set_grad_enabled.default' is refused: process state"):
        IR.load(path)
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    with pytest.raises(E.UnsafeTargetError, match="process state"):
        ir2torch.convert(ir_from_document(doc, validate=False), device="meta")
