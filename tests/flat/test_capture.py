"""``torch2ir.lower(ir)`` / ``ir.lower()``: the FlatIR from the conversion's one export, linked to the IR.

Checked against real PyTorch: the number of ``torch.export.export`` calls, the executed outputs, and the
IR nodes each op links to (a leaf's ops to its call node, a repeated call's ops to the graph it shares, a
variant's ops to that variant).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR, FlatIR
from common.capture import NoCaptureError
from common.errors import ConversionError, IRError
from tests.helpers import max_abs_diff
from tests.loop.test_per_call import FlagTwice
from torch2ir.lowering.capture import StaleCaptureError


class Twice(nn.Module):
    """One block called twice the same way: both calls share one graph."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.block(x)) * 2)


def _count_exports(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    real, calls = torch.export.export, []

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.export, "export", counting)
    return calls


def test_convert_then_lower_runs_one_export_and_lower_model_too(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model, x = Twice().eval(), torch.randn(3, 4)
    calls = _count_exports(monkeypatch)
    ir = torch2ir.convert(model, (x,))
    assert len(calls) == 1
    flat = ir.lower()
    assert len(calls) == 1  # no second export
    assert torch2ir.lower(ir) == flat == torch2ir.get_default_converter().lower(ir)
    again = torch2ir.lower(model, (x,))
    assert len(calls) == 2  # convert + lower from one export
    assert again == flat
    with torch.no_grad():
        assert max_abs_diff(ir2torch.convert(flat, model)(x), model(x)) == 0


def test_leaf_ops_link_to_the_call_node_and_repeated_calls_to_the_shared_graph() -> None:
    model, x = Twice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    flat = ir.lower()
    linears = [n for n in flat.nodes if n.op_type == "aten.linear.default"]
    assert [n.module_path for n in linears] == ["block.0", "block.0", "head"]
    # both calls of block run its one graph: their ops link to the same node of it
    assert linears[0].source == linears[1].source == ("block", "0")
    assert ir["block"].node("0")["implementation"] == "block.0"
    assert linears[2].source == ("root", "head")
    mul = next(n for n in flat.nodes if n.op_type == "aten.mul.Tensor")
    assert ir[mul.source[0]].node(mul.source[1])["implementation"] == "aten.mul.Tensor"
    reverse = flat.lowered_from()
    assert reverse[("block", "0", 0)] == [linears[0].name, linears[1].name]
    assert sorted(n for names in reverse.values() for n in names) == sorted(n.name for n in flat.nodes)


def test_ops_of_a_variant_link_to_that_variant() -> None:
    model, x = FlagTwice().eval(), torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    assert len(ir["n"].variants) == 1
    flat = ir.lower()
    relu = next(n for n in flat.nodes if n.op_type == "aten.relu.default")
    sigmoid = next(n for n in flat.nodes if n.op_type == "aten.sigmoid.default")
    assert len(relu.source) == 2 and ir["n"].node(relu.source[1])["implementation"] == "aten.relu.default"
    key, node, variant = sigmoid.source
    assert (key, variant) == ("n", 1)
    assert ir["n"].variants[0].node(node)["implementation"] == "aten.sigmoid.default"
    with torch.no_grad():
        assert max_abs_diff(ir2torch.convert(flat, model)(x), model(x)) == 0


def test_decomposed_ops_keep_their_links_and_the_capture_is_not_modified() -> None:
    model, x = Twice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    plain = ir.lower()
    core = ir.lower(decompose=True)
    assert core.meta["decomposition"] == "core_aten"
    assert "aten.addmm.default" in {n.op_type for n in core.nodes}
    assert all(n.source is not None for n in core.nodes)
    assert {n.source for n in core.nodes if n.module_path == "head"} == {("root", "head")}
    assert ir.lower() == plain  # decomposing worked on a copy
    with torch.no_grad():
        assert max_abs_diff(ir2torch.convert(core, model)(x), model(x)) <= 1e-6


def test_links_survive_save_and_load(tmp_path) -> None:
    model, x = Twice().eval(), torch.randn(3, 4)
    flat = torch2ir.convert(model, (x,)).lower()
    loaded = FlatIR.load(flat.save(tmp_path / "m.flat.json"))
    assert [n.source for n in loaded.nodes] == [n.source for n in flat.nodes]
    assert loaded.lowered_from() == flat.lowered_from()


def test_a_loaded_ir_has_no_capture_and_says_to_lower_the_model(tmp_path) -> None:
    model, x = Twice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    loaded = IR.load(ir.save(tmp_path / "m.ir.json"))
    assert loaded == ir and loaded.capture is None
    for call in (loaded.lower, lambda: torch2ir.lower(loaded)):
        with pytest.raises(NoCaptureError, match="no capture") as info:
            call()
        assert isinstance(info.value, IRError) and "torch2ir.lower(model, args, kwargs)" in info.value.hint


def test_an_ir_changed_after_conversion_is_refused() -> None:
    model, x = Twice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    copied = copy.deepcopy(ir)
    assert copied.capture is ir.capture and copied.lower() == ir.lower()  # an unchanged copy lowers alike
    copied["block"].node("0")["meta"] = {"shape": [9], "dtype": "float32"}
    with pytest.raises(StaleCaptureError, match="changed after its conversion") as info:
        copied.lower()
    assert isinstance(info.value, IRError) and info.value.hint
    del copied["head"]
    with pytest.raises(StaleCaptureError):
        torch2ir.lower(copied)
    ir.lower()  # the original is untouched


def test_whole_model_leaf_is_refused_by_ir_lower_and_lowered_directly_by_lower_model() -> None:
    torch.manual_seed(0)
    model, x = nn.LSTM(4, 3, batch_first=True).eval(), torch.randn(2, 5, 4)
    ir = torch2ir.convert(model, (x,))
    with pytest.raises(ConversionError, match="no export ran") as info:
        ir.lower()
    assert "torch2ir.lower(model" in info.value.hint
    flat = torch2ir.lower(model, (x,))
    assert all(n.source is None for n in flat.nodes)
    with torch.no_grad():
        assert max_abs_diff(ir2torch.convert(flat, model)(x), model(x)) == 0


def test_models_the_module_level_ir_refuses_are_still_lowered(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    model, x = Twice().eval(), torch.randn(3, 4)
    model.head.register_full_backward_hook(lambda *a: None)  # refused by convert before its export
    with pytest.raises(ConversionError, match="backward hook"):
        torch2ir.convert(model, (x,))
    calls = _count_exports(monkeypatch)
    flat = torch2ir.lower(model, (x,))
    assert len(calls) == 1 and all(n.source is None for n in flat.nodes)
    with torch.no_grad():
        assert max_abs_diff(ir2torch.convert(flat, model)(x), model(x)) == 0


def test_a_failed_export_is_reported_once(monkeypatch: pytest.MonkeyPatch) -> None:
    class Branch(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.sum() > 0 else x

    calls = _count_exports(monkeypatch)
    with pytest.raises(ConversionError, match="torch.export could not trace"):
        torch2ir.lower(Branch(), (torch.randn(3),))
    assert len(calls) == 1  # convert's export, not repeated by a direct lowering


def test_lower_ir_takes_no_inputs() -> None:
    model, x = Twice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    with pytest.raises(TypeError, match="no inputs"):
        torch2ir.lower(ir, (x,))
    with pytest.raises(TypeError, match="example inputs"):
        torch2ir.lower(model)


class _NoGradRegion(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            y = x.cos() * 2
        return x + y


def test_a_change_inside_a_higher_order_op_body_is_refused() -> None:
    from common.values import Subgraph

    ir = torch2ir.convert(_NoGradRegion().eval(), (torch.randn(3),))
    copied = copy.deepcopy(ir)
    bodies = [v for _, a in copied["root"].graph.nodes(data=True) for v in a.get("args", []) if isinstance(v, Subgraph)]
    assert bodies, "the no_grad region became a higher-order op with a body"
    body = bodies[0].impl
    name = next(n for n, a in body.graph.nodes(data=True) if a.get("implementation") == "aten.mul.Tensor")
    body.node(name)["args"] = [body.node(name)["args"][0], 3]
    with pytest.raises(StaleCaptureError):
        copied.lower()
    ir.lower()


def _edit_kernel_to_list(ir: IR) -> None:
    impl = next(i for _, i in ir.items() if "kernel_size" in i.data)
    impl.data["kernel_size"] = list(impl.data["kernel_size"])  # equal numbers, another type


def _edit_state_dtype(ir: IR) -> None:
    ir["conv"].state["weight"]["dtype"] = torch.float64


def _edit_ref_index(ir: IR) -> None:
    from common.values import Ref

    attrs = next(a for _, a in ir["root"].graph.nodes(data=True) if a.get("args"))
    first = attrs["args"][0]
    attrs["args"] = [Ref(first.node, 0), *attrs["args"][1:]]


def _edit_edge_data(ir: IR) -> None:
    source, target, key = next(iter(ir["root"].graph.edges(keys=True)))
    ir["root"].graph.edges[source, target, key]["planted"] = 1


def _edit_flag_to_int(ir: IR) -> None:
    ir["conv"].data["bias"] = int(ir["conv"].data["bias"])  # True becomes 1: equal, not the same


def _edit_zero_sign(ir: IR) -> None:
    ir["root"].meta["planted"] = 0.0
    ir.capture.seal(ir)  # sealed with 0.0; -0.0 compares equal and must still count as a change
    ir["root"].meta["planted"] = -0.0


class _ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, (3, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x).relu()


@pytest.mark.parametrize("edit", [_edit_kernel_to_list, _edit_state_dtype, _edit_ref_index, _edit_edge_data,
                                  _edit_flag_to_int, _edit_zero_sign])
def test_edits_that_compare_equal_or_touch_one_field_are_refused(edit) -> None:
    ir = torch2ir.convert(_ConvNet().eval(), (torch.randn(1, 3, 8, 8),))
    assert ir.lower() == ir.lower()  # the digest of an unchanged IR is stable across calls
    edit(ir)
    with pytest.raises(StaleCaptureError):
        ir.lower()
