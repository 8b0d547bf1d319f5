"""common.flat_verify.verify_nodes: the first ATen node whose output differs from the original exported program."""

from __future__ import annotations

import warnings
from functools import cache

import pytest
import torch
from torch import nn

import ir2torch
from common.flat_verify import NodeReport, verify_nodes
from common.verify import VerificationError
from tests.flat.cases import built, full_state, lowered


@cache
def _program(name: str, decompose: bool) -> torch.export.ExportedProgram:
    """The original (real-weight) model's exported program, at the FlatIR's decomposition level."""
    b = built(name)
    ep = torch.export.export(b.model, b.args, b.kwargs, strict=False)
    with warnings.catch_warnings():  # export's deepcopy of tree specs warns about a deprecated isinstance check
        warnings.simplefilter("ignore", FutureWarning)
        return ep.run_decompositions() if decompose else ep


@pytest.mark.parametrize(("name", "decompose"), [("bert", False), ("bert", True), ("llama", False)])
def test_faithful_flat_module_agrees_node_by_node(name, decompose):
    b = built(name)
    module = ir2torch.convert(lowered(name, decompose), full_state(b.model))
    report = verify_nodes(module, _program(name, decompose), b.args, b.kwargs)
    assert isinstance(report, NodeReport)
    assert report.ok, str(report)
    assert report.first_divergence is None and report.diverged == []
    # lowered on meta, compared with a trace on real tensors: nearly every op pairs up
    assert report.compared >= 0.9 * len(lowered(name, decompose).nodes)
    assert "OK" in str(report)


def test_first_divergence_names_the_sabotaged_node():
    b = built("bert")
    converter = ir2torch.get_default_converter()
    converter.executors.register("aten.softmax.int", torch.ops.aten.softmax.int)
    converter.executors.register_override("aten.softmax.int", lambda x, dim, dtype=None: torch.softmax(x * 1.01, dim),
                                          where="encoder.layer.1.*")
    module = converter.convert(lowered("bert"), full_state(b.model))
    report = verify_nodes(module, _program("bert", False), b.args, b.kwargs)
    assert not report.ok
    div = report.first_divergence
    assert div is not None
    assert div.op_type == "aten.softmax.int"
    assert div.module_path == "encoder.layer.1.attention.self"
    assert div.node == div.reference_node == "softmax_1"
    assert 0 < div.max_abs_diff < 1 and div.shapes == div.reference_shapes == [(2, 2, 8, 8)]
    assert report.diverged[0] == "softmax_1" and len(report.diverged) > 1  # everything downstream follows
    assert "first divergence: node 'softmax_1'" in str(report)


def test_wrong_arguments_and_failing_graphs():
    b = built("bert")
    with pytest.raises(TypeError, match="ExportedProgram"):
        verify_nodes(ir2torch.convert(lowered("bert"), full_state(b.model)), b.model, b.args, b.kwargs)
    with pytest.raises(TypeError, match="no FlatIR nodes"):
        verify_nodes(torch.fx.symbolic_trace(nn.ReLU()), _program("bert", False), b.args, b.kwargs)
    broken = ir2torch.get_default_converter()
    broken.executors.register("aten.gelu.default", lambda x, **k: x[0, :3])  # wrong shape: the next linear fails
    module = broken.convert(lowered("bert"), full_state(b.model))
    with pytest.raises(VerificationError, match="the FlatIR graph raised"):
        verify_nodes(module, _program("bert", False), b.args, b.kwargs)
