"""What torch2ir.lower records: op types, schema-named arguments, outputs, weights, module paths, the graph."""

from __future__ import annotations

import networkx as nx
import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import FlatIR
from common.errors import ConversionError
from common.flat import FlatNode
from common.safety import Allowlist
from tests.flat.cases import built, lowered, meta_model, to_meta


def _nodes(flat: FlatIR, op_type: str) -> list[FlatNode]:
    return [n for n in flat.nodes if n.op_type == op_type]


def test_lower_is_exported_from_the_package_and_the_converter():
    b = built("resnet")
    flat = torch2ir.get_default_converter().lower(meta_model("resnet"), to_meta(b.args))
    assert isinstance(flat, FlatIR)
    assert flat == lowered("resnet")


def test_nodes_carry_op_types_schema_named_arguments_and_tensor_metadata():
    flat = lowered("resnet")
    conv = _nodes(flat, "aten.conv2d.default")[0]
    schema = [a.name for a in torch.ops.aten.conv2d.default._schema.arguments]
    assert list(conv.args) == schema[: len(conv.args)]
    assert conv.args["stride"] == [2, 2] and conv.args["padding"] == [3, 3]  # the 7x7 stem convolution
    assert conv.inputs[0].name == "pixel_values" and conv.inputs[0].shape == [1, 3, 32, 32]
    assert conv.inputs[1].dtype == "float32" and conv.inputs[1].shape == [16, 3, 7, 7]
    assert conv.outputs[0].name == conv.name and conv.outputs[0].shape == [1, 16, 16, 16]
    assert conv.module_path == "embedder.embedder.convolution"
    # every op the FlatIR names is one an Allowlist resolves (nothing outside torch.ops.aten here)
    assert all(Allowlist().is_allowed(n.op_type) for n in flat.nodes)


def test_multi_output_ops_name_each_output_and_getitem_is_not_a_node():
    flat = lowered("transformer")
    assert not _nodes(flat, "operator.getitem")
    split = _nodes(flat, "aten.split_with_sizes.default")[0]
    assert [o.shape for o in split.outputs] == [[16, 16], [32, 16]]
    users = [n for n in flat.nodes if any(r.node == split.outputs[1].name for r in n.refs())]
    assert users and users[0].op_type == "aten.linear.default"
    decomposed = lowered("bert", True)
    norm = _nodes(decomposed, "aten.native_layer_norm.default")[0]
    assert len(norm.outputs) == 3  # output, mean, rstd: the unused ones get fresh names
    assert len({o.name for o in norm.outputs}) == 3


def test_weights_and_their_mapping_to_state_dict_keys():
    b = built("bert")
    flat = lowered("bert")
    mapping = flat.weight_name_mapping
    assert mapping["p_embeddings_word_embeddings_weight"] == "embeddings.word_embeddings.weight"
    params = {w.name: w for w in flat.weights if w.kind == "parameter"}
    assert {mapping[n] for n in params} == {k for k, _ in b.model.named_parameters()}
    for name, weight in params.items():
        assert weight.shape == list(b.model.get_parameter(mapping[name]).shape)
        assert weight.requires_grad is True
    buffers = {mapping[w.name]: w.persistent for w in flat.weights if w.kind == "buffer"}
    assert buffers == {"embeddings.position_ids": False, "embeddings.token_type_ids": False}
    assert flat.tensors == {}  # lowered on meta: no values anywhere


def test_constants_with_values_are_kept_and_weights_are_not():
    b = built("param_and_constant")
    flat = torch2ir.lower(meta_model("param_and_constant"), to_meta(b.args))  # .to("meta") keeps plain attributes
    assert list(flat.tensors) == ["scale"]
    assert torch.equal(flat.tensors["scale"], b.model.scale)
    real = torch2ir.lower(built("buffers").model, built("buffers").args)
    assert set(real.tensors) == {"mask"}  # the non-persistent buffer; parameters come from state dicts


def test_graph_inputs_outputs_and_calling_convention():
    flat = lowered("transformer")
    assert [m.name for m in flat.graph_inputs] == ["src", "tgt", "tgt_mask", "tgt_is_causal"]
    assert flat.graph_inputs[3].kind == "constant" and flat.graph_inputs[3].value is True
    assert flat.forward_arg_names[:2] == ["src", "tgt"]
    assert "tgt_mask" in flat.in_spec and len(flat.graph_outputs) == 1
    assert flat.graph_outputs[0].shape == [2, 4, 16]


def test_module_paths_exist_in_the_module_level_ir():
    b = built("bert")
    ir = torch2ir.convert(b.model, b.args, b.kwargs)
    known = set(ir) | {alias for impl in ir.values() for alias in impl.aliases}
    for decompose in (False, True):
        flat = lowered("bert", decompose)
        assert {n.module_path for n in flat.nodes} <= known
        paths = {n.module_path for n in flat.nodes}
        assert "encoder.layer.1.attention.self.query" in paths and "root" in paths
    query = next(n for n in lowered("bert").nodes if n.module_path == "encoder.layer.0.attention.self.query")
    assert query.op_type == "aten.linear.default"
    assert ir[query.module_path].type == "linear"


def test_weights_no_op_reads_are_left_out():
    b = built("llama")
    flat = lowered("llama")
    keys = set(flat.weight_name_mapping.values())
    assert "model.rotary_emb.inv_freq" in keys
    assert "model.rotary_emb.original_inv_freq" not in keys  # a buffer the forward never reads
    assert "model.rotary_emb.original_inv_freq" in dict(b.model.named_buffers())


def test_no_grad_region_is_inlined():
    flat = lowered("llama")
    assert not [n for n in flat.nodes if not n.op_type.startswith("aten.")]
    rotary = [n for n in flat.nodes if n.module_path == "model.rotary_emb"]
    assert {"aten.cos.default", "aten.sin.default"} <= {n.op_type for n in rotary}
    assert len({n.name for n in flat.nodes}) == len(flat.nodes)


def test_custom_decomposition_table_keeps_the_ops_left_out():
    b = built("bert")
    table = torch.export.default_decompositions()
    del table[torch.ops.aten.linear.default]
    flat = torch2ir.lower(meta_model("bert"), to_meta(b.args), to_meta(b.kwargs), decompose=table)
    ops = {n.op_type for n in flat.nodes}
    assert "aten.linear.default" in ops and "aten.addmm.default" not in ops
    assert "aten.matmul.default" not in ops and "aten.bmm.default" in ops  # the rest is decomposed
    assert "aten.addmm.default" in {n.op_type for n in lowered("bert", True).nodes}
    assert flat.meta["decomposition"] == "custom"


def test_networkx_graph():
    flat = lowered("resnet")
    g = flat.graph
    assert isinstance(g, nx.DiGraph) and nx.is_directed_acyclic_graph(g)
    assert g.nodes["pixel_values"]["kind"] == "input"
    conv = _nodes(flat, "aten.conv2d.default")[0]
    assert g.has_edge("pixel_values", conv.name) and g.edges["pixel_values", conv.name]["values"] == ["pixel_values"]
    weight = conv.inputs[1].name
    assert g.nodes[weight]["kind"] == "weight" and g.nodes[weight]["target"].endswith("convolution.weight")
    assert set(nx.ancestors(g, "output")) >= {n.name for n in flat.nodes if n.outputs}


class _Counter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return x * 2


def test_buffer_mutation_runs_in_place_or_is_refused_when_functionalized():
    flat = torch2ir.lower(_Counter(), (torch.ones(2),))
    assert [n.op_type for n in flat.nodes] == ["aten.add_.Tensor", "aten.mul.Tensor"]
    module = ir2torch.convert(flat, {"calls": torch.zeros(())})
    module(torch.ones(2))
    module(torch.ones(2))
    assert module.calls.item() == 2.0  # the in-place op updates the executed module's buffer, as in the original
    with pytest.raises(ConversionError, match="mutates 'calls' in place"):
        torch2ir.lower(_Counter(), (torch.ones(2),), decompose=True)


class _Branches(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


def test_unsupported_higher_order_op_is_reported_with_its_node():
    with pytest.raises(ConversionError, match=r"node 'cond': higher-order op 'cond' is not supported") as info:
        torch2ir.lower(_Branches(), (torch.ones(2),))
    assert "1 construct(s)" in str(info.value)


def test_bad_arguments():
    with pytest.raises(TypeError, match="nn.Module"):
        torch2ir.lower(lambda x: x, (torch.ones(1),))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="decompose"):
        torch2ir.lower(nn.ReLU(), (torch.ones(1),), decompose="yes")  # type: ignore[arg-type]
