"""``torch2ir.convert`` on every zoo and real model, checked against PyTorch's own view of the model.

Expected values always come from the model itself (``named_modules``, ``_parameters``,
``_buffers``, module attributes, ``inspect.signature``, forward hooks, ``torch.export``),
never from the converter's output. Each case is built and converted once per module
(see :func:`converted`); the specific tests below pin structural features (calls of a
module used twice, aliases, multi-input leaves, higher-order ops, custom handlers, errors,
meta-device conversion).
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import torch2ir
from common.ir import IR, Implementation
from common.values import Ref, Subgraph, iter_values
from tests.models.zoo import by_name
from tests.torch2ir.cases import (
    CASE_NAMES,
    TIED_PAIRS,
    all_graphs,
    call_nodes,
    converted,
    count_calls,
    key_of,
    path_of,
)

# --------------------------------------------------------------------------------------------------------------
# Every case
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_module_path_is_a_key_or_one_alias(name: str) -> None:
    c = converted(name)
    paths = [p for p, _ in c.model.named_modules(remove_duplicate=False)]
    for path in paths:
        key = key_of(path)
        holders = ([key] if key in c.ir else []) + [k for k, impl in c.ir.items() if path in impl.aliases]
        assert len(holders) == 1, f"{name}: module path {path!r} is held by {holders}"
        assert c.model.get_submodule(path_of(holders[0])) is c.model.get_submodule(path), (
            f"{name}: {path!r} is listed under {holders[0]!r}, a different module object"
        )
    assert set(c.ir) <= {key_of(p) for p in paths}, f"{name}: implementation keys that are not module paths"
    distinct = {id(m) for _, m in c.model.named_modules(remove_duplicate=False)}
    assert len(c.ir) == len(distinct), f"{name}: one implementation per module object expected"


@pytest.mark.parametrize("name", CASE_NAMES)
def test_handled_leaves_carry_their_constructor_attributes(name: str) -> None:
    c = converted(name)
    for path, module in c.model.named_modules():
        impl = c.ir[key_of(path)]
        if type(module) is nn.Linear:
            expected: dict[str, Any] = {
                "in_features": module.in_features,
                "out_features": module.out_features,
                "bias": module.bias is not None,
            }
            itype = "linear"
        elif type(module) is nn.Conv2d:
            expected = {
                "in_channels": module.in_channels,
                "out_channels": module.out_channels,
                "kernel_size": module.kernel_size,
                "stride": module.stride,
                "padding": module.padding,
                "dilation": module.dilation,
                "groups": module.groups,
                "bias": module.bias is not None,
                "padding_mode": module.padding_mode,
            }
            itype = "conv2d"
        elif type(module) is nn.LayerNorm:
            expected = {
                "normalized_shape": module.normalized_shape,
                "eps": module.eps,
                "elementwise_affine": module.elementwise_affine,
                "bias": module.bias is not None,
            }
            itype = "layernorm"
        else:
            continue
        assert impl.type == itype, f"{name}: {path!r} ({type(module).__name__}) has type {impl.type!r}"
        assert impl.data == expected, f"{name}: {path!r} attributes {impl.data} != {expected}"
        assert impl.graph.number_of_nodes() == 0, f"{name}: leaf {path!r} has a graph"
        for graph in all_graphs(c.ir):
            for node in call_nodes(graph, impl.name):
                assert graph.node(node)["type"] == itype, f"{name}: call {node!r} of {path!r} in {graph.name!r}"


@pytest.mark.parametrize("name", CASE_NAMES)
def test_ir_validates_and_saves_deterministically(name: str, tmp_path: Path) -> None:
    c = converted(name)
    c.ir.validate()
    first, second = tmp_path / "a" / "model.ir.json", tmp_path / "b" / "model.ir.json"
    first.parent.mkdir()
    second.parent.mkdir()
    c.ir.save(first)
    loaded = IR.load(first)
    assert loaded == c.ir
    c.ir.save(second)
    assert sorted(p.name for p in first.parent.iterdir()) == sorted(p.name for p in second.parent.iterdir())
    for file in first.parent.iterdir():
        assert file.read_bytes() == (second.parent / file.name).read_bytes(), f"{name}: {file.name} differs"
    # a loaded IR saves to the same bytes, and so does a fresh conversion of a freshly built model
    third = tmp_path / "c" / "model.ir.json"
    third.parent.mkdir()
    loaded.save(third)
    assert third.read_bytes() == first.read_bytes()
    case = by_name(name)
    args, kwargs = case.inputs()
    fresh = torch2ir.convert(case.build(), args, kwargs)
    fourth = tmp_path / "d" / "model.ir.json"
    fourth.parent.mkdir()
    fresh.save(fourth)
    assert fourth.read_bytes() == first.read_bytes(), f"{name}: converting the same model twice gives other bytes"


@pytest.mark.parametrize("name", CASE_NAMES)
def test_state_records_match_the_modules_own_tensors(name: str) -> None:
    c = converted(name)
    owners: dict[int, list[str]] = defaultdict(list)  # id(tensor) -> full paths at implementation keys
    for key, impl in c.ir.items():
        module = c.model.get_submodule(path_of(key))
        prefix = "" if key == "root" else key + "."
        params = {n: p for n, p in module._parameters.items() if p is not None}
        buffers = {n: b for n, b in module._buffers.items() if b is not None}
        records = {n: r for n, r in impl.state.items() if r["kind"] != "constant"}
        assert list(records) == [*params, *buffers], f"{name}: state of {key!r}"
        for pname, param in params.items():
            rec = records[pname]
            assert rec["kind"] == "parameter"
            assert rec["shape"] == list(param.shape) and rec["dtype"] == param.dtype, f"{name}: {prefix}{pname}"
            assert rec["requires_grad"] == param.requires_grad
            owners[id(param)].append(prefix + pname)
        for bname, buf in buffers.items():
            rec = records[bname]
            assert rec["kind"] == "buffer"
            assert rec["shape"] == list(buf.shape) and rec["dtype"] == buf.dtype, f"{name}: {prefix}{bname}"
            assert rec["persistent"] == (bname not in module._non_persistent_buffers_set), f"{name}: {prefix}{bname}"
            owners[id(buf)].append(prefix + bname)
        for cname, rec in impl.state.items():
            if rec["kind"] != "constant":
                continue
            value = getattr(module, cname)  # a plain tensor attribute (lifted constant in export)
            assert isinstance(value, torch.Tensor) and cname not in params and cname not in buffers
            assert rec["shape"] == list(value.shape) and rec["dtype"] == value.dtype
    records_by_path = {
        ("" if k == "root" else k + ".") + n: r for k, impl in c.ir.items() for n, r in impl.state.items()
    }
    for paths in owners.values():
        untied = [p for p in paths if "tie" not in records_by_path[p]]
        assert len(untied) == 1, f"{name}: tensor at {paths} must be recorded once (untied: {untied})"
        for path in paths:
            if path != untied[0]:
                assert records_by_path[path]["tie"] == untied[0], f"{name}: {path} should tie to {untied[0]}"


@pytest.mark.parametrize("name", sorted(TIED_PAIRS))
def test_tied_tensors_are_recorded_once(name: str) -> None:
    c = converted(name)
    a, b = TIED_PAIRS[name]
    assert c.model.get_parameter(a) is c.model.get_parameter(b), "the zoo model is expected to tie these"
    owner_a, owner_b = (c.model.get_submodule(p.rpartition(".")[0]) for p in (a, b))
    assert owner_a is not owner_b  # a tie between two modules, not an alias of one module
    rec_a = c.ir[a.rpartition(".")[0]].state["weight"]
    rec_b = c.ir[b.rpartition(".")[0]].state["weight"]
    assert (rec_a.get("tie"), rec_b.get("tie")) in ((b, None), (None, a)), (rec_a, rec_b)


# --------------------------------------------------------------------------------------------------------------
# Structural features of specific cases
# --------------------------------------------------------------------------------------------------------------


def test_called_twice_is_two_calls_of_one_implementation() -> None:
    c = converted("called_twice")
    block = c.model.get_submodule("block")
    assert count_calls(c.model, block, c.args, c.kwargs) == 2
    nodes = call_nodes(c.ir.root, "block")
    assert len(nodes) == 2
    assert [c.ir.root.node(n)["type"] for n in nodes] == ["module", "module"]
    # the second call consumes the first call's output
    assert [u for u, _, _ in c.ir.root.in_edges(nodes[1])] == [nodes[0]]
    assert [k for k in c.ir if c.model.get_submodule(path_of(k)) is block] == ["block"]
    assert c.ir["block"].graph.number_of_nodes() > 0


def test_shared_sequential_is_one_implementation_with_aliases() -> None:
    c = converted("shared_sequential")
    lin = c.model.get_submodule("lin")
    paths = [p for p, m in c.model.named_modules(remove_duplicate=False) if m is lin]
    assert paths == ["lin", "seq.0", "seq.1"]
    keys = [k for k in c.ir if c.model.get_submodule(path_of(k)) is lin]
    assert len(keys) == 1
    impl = c.ir[keys[0]]
    assert impl.type == "linear"
    assert sorted([impl.name, *impl.aliases]) == sorted(paths)
    calls = sum(len(call_nodes(g, impl.name)) for g in c.ir.values())
    assert calls == count_calls(c.model, lin, c.args, c.kwargs) == 3


def _edges_match_refs(impl: Implementation, node: str) -> None:
    """Every edge into ``node`` delivers the :class:`Ref` found at its slot of the node's args/kwargs."""
    attrs = impl.node(node)
    refs = {path: ref for path, ref in iter_values(attrs["args"]) if isinstance(ref, Ref)}
    refs.update({path: ref for path, ref in iter_values(attrs["kwargs"]) if isinstance(ref, Ref)})
    seen = {}
    for src, _, edge in impl.in_edges(node):
        slot = edge["slot"] if isinstance(edge["slot"], tuple) else (edge["slot"],)
        seen[slot] = Ref(src, edge.get("src_index"))
    assert seen == refs


def test_multi_io_leaves_keep_the_original_call_signature() -> None:
    c = converted("multi_io_leaves")
    root = c.ir.root
    inputs = [n for n, a in root.graph.nodes(data=True) if a["type"] == "input"]
    x_node, h0_node, c0_node = inputs

    (attn,) = call_nodes(root, "attn")
    assert root.node(attn)["type"] == "multiheadattention"
    args, kwargs = root.node(attn)["args"], root.node(attn)["kwargs"]
    assert args == [Ref(x_node), Ref(x_node), Ref(x_node)]  # attn(x, x, x, need_weights=False)
    assert kwargs == {"need_weights": False}
    assert sorted(e["slot"] for _, _, e in root.in_edges(attn)) == [0, 1, 2]
    _edges_match_refs(root, attn)

    (lstm,) = call_nodes(root, "lstm")
    assert root.node(lstm)["type"] == "lstm"
    args = root.node(lstm)["args"]
    assert len(args) == 2 and isinstance(args[0], Ref) and isinstance(args[1], tuple)  # lstm(a, (h0, c0))
    assert args[0] == Ref(attn, 0)  # the first output of attn
    assert args[1] == (Ref(h0_node), Ref(c0_node))
    assert root.node(lstm)["kwargs"] == {}
    assert sorted((e["slot"] for _, _, e in root.in_edges(lstm)), key=str) == sorted([0, (1, 0), (1, 1)], key=str)
    _edges_match_refs(root, lstm)


@pytest.mark.parametrize(("name", "cls_name"), [("llama", "LlamaRotaryEmbedding"), ("no_grad_inside", "FrozenFeature")])
def test_no_grad_region_is_a_higher_order_node_with_a_subgraph(name: str, cls_name: str) -> None:
    c = converted(name)
    (path,) = [p for p, m in c.model.named_modules() if type(m).__name__ == cls_name]
    impl = c.ir[key_of(path)]
    nodes = [
        attrs
        for _, attrs in impl.graph.nodes(data=True)
        if attrs["type"] == "function" and attrs["implementation"] == "higher_order.wrap_with_set_grad_enabled"
    ]
    assert nodes, f"{name}: no wrap_with_set_grad_enabled node in {path!r}"
    for attrs in nodes:
        assert attrs["args"][0] is False  # torch.no_grad() sets grad mode to False
        bodies = [v for _, v in iter_values(attrs["args"]) if isinstance(v, Subgraph)]
        assert len(bodies) == 1
        body = bodies[0].impl
        kinds = [a["type"] for _, a in body.graph.nodes(data=True)]
        assert "input" in kinds and "output" in kinds and "function" in kinds


def test_modules_that_emit_no_op_still_have_implementations() -> None:
    c = converted("unused_and_identity")
    assert count_calls(c.model, c.model.get_submodule("unused"), c.args, c.kwargs) == 0
    assert count_calls(c.model, c.model.get_submodule("ident"), c.args, c.kwargs) == 1
    assert c.ir["unused"].type == "linear"
    assert set(c.ir["unused"].state) == {"weight", "bias"}
    assert c.ir["ident"].type == "identity"
    assert not any(call_nodes(g, "unused") for g in all_graphs(c.ir))

    for name in ("conv_net", "bert", "vit"):
        c = converted(name)
        dropouts = [(p, m) for p, m in c.model.named_modules() if type(m) is nn.Dropout]
        assert dropouts, name
        for path, module in dropouts:
            assert not module.training
            impl = c.ir[path]
            assert impl.type == "dropout"
            assert impl.data == {"p": module.p, "inplace": module.inplace}


@pytest.mark.parametrize("name", CASE_NAMES)
def test_root_calling_convention(name: str) -> None:
    c = converted(name)
    if torch2ir.get_default_converter().has_handler(c.model):
        # a stock nn module at the root is one handled leaf: its calling convention is its class's
        assert c.ir.root.type == type(c.model).__name__.lower()
        assert c.ir.root.graph.number_of_nodes() == 0
        return
    params = list(inspect.signature(c.model.forward).parameters)
    expected = [*params[: len(c.args)], *c.kwargs]
    assert c.ir.root.meta["forward_arg_names"] == expected
    assert pytree.treespec_loads(c.ir.root.meta["in_spec"]) == pytree.tree_flatten((c.args, c.kwargs))[1]
    with torch.no_grad():
        out = c.model(*c.args, **c.kwargs)
    assert pytree.treespec_loads(c.ir.root.meta["out_spec"]) == pytree.tree_flatten(out)[1]
    inputs = [n for n, a in c.ir.root.graph.nodes(data=True) if a["type"] == "input"]
    assert len(inputs) == len(pytree.tree_leaves((c.args, c.kwargs)))
