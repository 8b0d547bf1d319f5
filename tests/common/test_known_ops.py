"""Known operators of other libraries (common.known_ops): transformers' MoE ``grouped_mm_fallback`` is converted,
loaded, rebuilt, lowered and run with no ``allow=``; its arguments are checked before its kernel; a file naming it
imports nothing until a rebuild resolves it, and then only the module the table names."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR, FlatIR
from common.errors import IRError, IRFormatError
from common.known_ops import KNOWN_OPS, KnownOp
from common.safety import Allowlist, op_class
from tests.real.decoders import _mixtral

ROOT = Path(__file__).resolve().parents[2]
OP = "transformers.grouped_mm_fallback.default"


@pytest.fixture(scope="module")
def mixtral():
    torch.manual_seed(0)
    model = _mixtral().eval()
    ids = torch.randint(0, 100, (2, 8))
    return model, ids, torch2ir.convert(model, (ids,))


def _op_nodes(ir: IR) -> list[str]:
    return [n for impl in ir.values() for g in impl.graphs() for n, a in g.graph.nodes(data=True)
            if a.get("implementation") == OP]


def test_mixtral_converts_rebuilds_and_lowers_with_no_allow(mixtral, tmp_path):
    model, ids, ir = mixtral
    assert _op_nodes(ir), "the default experts call transformers' grouped_mm_fallback"
    path = tmp_path / "moe.ir.json"
    ir.save(path)
    assert "ops" not in json.loads(path.read_text())  # nothing a loader must opt in to
    rebuilt = ir2torch.convert(IR.load(path), model.state_dict())
    expected = model(ids).logits
    assert torch.equal(rebuilt(ids).logits, expected)
    assert torch2ir.convert(rebuilt, (ids,)) == ir  # the loop closes
    flat = ir.lower()
    assert sum(node["op_type"] == OP for node in flat.to_dict()["nodes"]) == 4  # two per layer (up, down)
    flat_path = tmp_path / "moe.flat.json"
    flat.save(flat_path)
    executed = ir2torch.convert(FlatIR.load(flat_path), model.state_dict())
    assert torch.equal(executed(ids).logits, expected)


def test_gradients_through_the_rebuilt_experts_are_the_originals(mixtral):
    model, ids, ir = mixtral
    rebuilt = ir2torch.convert(ir, model.state_dict())
    grads = []
    for m in (model, rebuilt):
        m.zero_grad()
        m(ids).logits.square().mean().backward()
        grads.append({k: p.grad for k, p in m.named_parameters() if "experts" in k})
    assert grads[0].keys() == grads[1].keys() and grads[0]
    for key, grad in grads[0].items():
        assert torch.equal(grad, grads[1][key]), key


def test_a_known_op_is_pure_with_its_reason_and_allowed_by_every_allowlist():
    cls, why = op_class(OP)
    assert cls == "pure" and "slice" in why
    assert Allowlist().is_allowed(OP) and Allowlist().required([OP]) == []
    # only the exact overload the table names: the packet and other overloads stay opt-in
    assert not Allowlist().is_allowed("transformers.grouped_mm_fallback")
    assert not Allowlist().is_allowed("transformers.grouped_mm_fallback_backward.default")


def test_the_file_imports_nothing_until_the_rebuild_resolves_the_op(mixtral, tmp_path):
    model, ids, ir = mixtral
    ir.save(tmp_path / "moe.ir.json")
    from common import save_safetensors

    save_safetensors(model.state_dict(), tmp_path / "moe.safetensors")
    torch.save(ids, tmp_path / "ids.pt")
    script = textwrap.dedent(f"""
        import sys, torch
        import transformers.modeling_outputs  # the output class (ModelOutput), as for any transformers model
        import ir2torch
        from common import IR
        from common.safety import Allowlist
        assert "transformers.integrations.moe" not in sys.modules
        assert Allowlist().is_allowed("{OP}")
        ir = IR.load({str(tmp_path / "moe.ir.json")!r})
        assert "transformers.integrations.moe" not in sys.modules, "loading imported it"
        model = ir2torch.convert(ir, {str(tmp_path / "moe.safetensors")!r})
        assert "transformers.integrations.moe" in sys.modules
        out = model(torch.load({str(tmp_path / "ids.pt")!r}, weights_only=True)).logits
        torch.save(out, {str(tmp_path / "out.pt")!r})
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert torch.equal(torch.load(tmp_path / "out.pt", weights_only=True), model(ids).logits)


def test_a_known_op_whose_library_is_missing_is_an_irerror(monkeypatch):
    name = "t2ir_absent.op.default"
    monkeypatch.setitem(KNOWN_OPS, name, KnownOp(module="t2ir_no_such_package.ops", package="t2ir-no-such-package",
                                                 why="test"))
    with pytest.raises(IRFormatError, match="pip install t2ir-no-such-package"):
        Allowlist().resolve(name)
    assert "t2ir_no_such_package" not in sys.modules


class Grouped(nn.Module):
    """Calls the operator on its inputs, so that a test can hand it hostile arguments."""

    def forward(self, x: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.transformers.grouped_mm_fallback(x, weight, offs)


def _grouped_ir():
    import transformers.integrations.moe  # noqa: F401 - registers the operator

    x, w, offs = torch.randn(6, 4), torch.randn(3, 4, 5), torch.tensor([2, 2, 6], dtype=torch.int32)
    return torch2ir.convert(Grouped(), (x, w, offs), dynamic_shapes=None), (x, w, offs)


def test_the_rebuilt_op_matches_transformers_kernel():
    ir, (x, w, offs) = _grouped_ir()
    rebuilt = ir2torch.convert(ir)
    expected = torch.cat([x[:2] @ w[0], x[2:6] @ w[2]])
    assert torch.equal(rebuilt(x, w, offs), expected)


@pytest.mark.parametrize("budget", ["available", None])
def test_a_file_handing_the_op_mismatched_arguments_gets_an_irerror_before_the_kernel(budget):
    ir, (x, w, offs) = _grouped_ir()
    doc = ir.to_dict()
    node = doc["root"]["nodes"]["grouped_mm_fallback"]
    node["args"] = [node["args"][0], node["args"][2], node["args"][1]]  # weight <-> offs, as a hostile file would
    edges = doc["root"]["edges"]
    edges[("weight", "grouped_mm_fallback")]["slot"], edges[("offs", "grouped_mm_fallback")]["slot"] = 2, 1
    rebuilt = ir2torch.get_default_converter().convert(IR.from_dict(doc), max_bytes=budget)
    with pytest.raises(IRError, match="weight 3-d"):
        rebuilt(x, w, offs)


def test_offsets_are_checked_in_a_call_checked_op_by_op():
    ir, (x, w, _) = _grouped_ir()
    rebuilt = ir2torch.get_default_converter().convert(ir, max_bytes=None)  # every call checked op by op
    for hostile in ([4, 2, 6], [0, 0, 7], [-1, 3, 6]):
        with pytest.raises(IRError, match="non-decreasing row counts"):
            rebuilt(x, w, torch.tensor(hostile, dtype=torch.int32))


def test_hostile_offsets_never_crash_the_process(tmp_path):
    """In a child process (a crash is a failure): every hostile ``offs`` a caller or a file's graph can hand the
    kernel either runs within the tensors or raises an IRError, with and without a memory budget."""
    ir, _ = _grouped_ir()
    ir.save(tmp_path / "grouped.ir.json")
    script = textwrap.dedent(f"""
        import torch, ir2torch
        import transformers.integrations.moe  # noqa: F401
        from common import IR
        from common.errors import IRError
        ir = IR.load({str(tmp_path / "grouped.ir.json")!r})
        x, w = torch.randn(6, 4), torch.randn(3, 4, 5)
        big, small = 2**31 - 1, -2**31
        cases = [[big, big, big], [small, small, small], [big, small, big], [6, 0, 6], [3, 2, 1], [0, 0, 0],
                 [-1, -2, -3], [7, 8, 9]]
        for budget in ("available", None):
            model = ir2torch.get_default_converter().convert(ir, max_bytes=budget)
            for offs in cases:
                try:
                    out = model(x, w, torch.tensor(offs, dtype=torch.int32))
                    assert out.shape == (6, 5), out.shape
                    print("ran", budget, offs)
                except IRError as exc:
                    print("refused", budget, offs, exc.message[:60])
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 16
    # a call checked op by op (no budget) reads the values: every hostile one is refused by name
    checked = {line.split(" None ")[1].split("]")[0] + "]": line.split()[0] for line in lines if " None " in line}
    assert checked.pop("[0, 0, 0]") == "ran"  # valid offsets: no row goes to any expert
    assert set(checked.values()) == {"refused"}, checked
