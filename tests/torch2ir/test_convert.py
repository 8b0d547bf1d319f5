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
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import torch2ir
from common.errors import ConversionError, RegistryError
from common.ir import IR, NODE_KINDS, Implementation
from common.values import Ref, Subgraph, iter_values
from tests.models.real import REAL
from tests.models.zoo import ZOO, Case, by_name

CASES: list[Case] = [*ZOO, *REAL]
CASE_NAMES: list[str] = [case.name for case in CASES]

#: Pairs of parameter paths that are one tensor owned by two different modules.
TIED_PAIRS: dict[str, tuple[str, str]] = {
    "gpt2": ("lm_head.weight", "transformer.wte.weight"),
    "t5_encoder": ("encoder.embed_tokens.weight", "shared.weight"),
    "tied_embedding": ("head.weight", "embed.weight"),
}


@dataclass
class Converted:
    """A zoo case built once, with its inputs and its IR."""

    model: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    ir: IR


_CACHE: dict[str, Converted] = {}


def converted(name: str) -> Converted:
    """The model, inputs and IR of case ``name`` (built and converted once per test session)."""
    if name not in _CACHE:
        case = by_name(name)
        model = case.build()
        args, kwargs = case.inputs()
        _CACHE[name] = Converted(model, args, kwargs, torch2ir.convert(model, args, kwargs))
    return _CACHE[name]


def key_of(path: str) -> str:
    """The implementation key of module path ``path``."""
    return path or "root"


def path_of(key: str) -> str:
    """The module path of implementation key ``key``."""
    return "" if key == "root" else key


def all_graphs(ir: IR) -> Iterator[Implementation]:
    """Every implementation of ``ir`` and every graph nested in a node argument (:class:`Subgraph`)."""
    stack: list[Implementation] = list(ir.values())
    while stack:
        impl = stack.pop()
        yield impl
        for _, attrs in impl.graph.nodes(data=True):
            for _, value in iter_values([attrs.get("args", []), attrs.get("kwargs", {})]):
                if isinstance(value, Subgraph):
                    stack.append(value.impl)


def call_nodes(impl: Implementation, callee: str) -> list[str]:
    """Nodes of ``impl`` that call implementation ``callee``."""
    return [
        n for n, a in impl.graph.nodes(data=True) if a["type"] not in NODE_KINDS and a.get("implementation") == callee
    ]


def count_calls(model: nn.Module, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    """How many times ``module`` runs during ``model(*args, **kwargs)`` (a forward hook counts)."""
    calls = 0

    def hook(*_: Any) -> None:
        nonlocal calls
        calls += 1

    handle = module.register_forward_hook(hook)
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        handle.remove()
    return calls


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


# --------------------------------------------------------------------------------------------------------------
# Types, custom handlers
# --------------------------------------------------------------------------------------------------------------


class Linear(nn.Module):
    """A user block that happens to be called ``Linear``: not ``torch.nn.Linear``."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.inner(x)) * 2


class HoldsUserLinear(nn.Module):
    """Calls the user ``Linear`` block."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Linear()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) + 1


def test_type_is_never_taken_from_a_class_name() -> None:
    ir = torch2ir.convert(HoldsUserLinear(), (torch.randn(2, 4),))
    assert ir["block"].type == "module"
    assert ir["block"].meta["class"] == f"{__name__}.Linear"
    assert ir["block"].graph.number_of_nodes() > 0
    assert ir["block"].data == {}
    assert [ir.root.node(n)["type"] for n in call_nodes(ir.root, "block")] == ["module"]
    assert ir["block.inner"].type == "linear"
    assert ir["block.inner"].data == {"in_features": 4, "out_features": 3, "bias": True}
    assert [ir["block"].node(n)["type"] for n in call_nodes(ir["block"], "block.inner")] == ["linear"]


class MyBlock(nn.Module):
    """A user block with an attribute its handler records."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.width = width
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.proj(x)) + x


class HoldsMyBlock(nn.Module):
    """A model calling one :class:`MyBlock` between two functions."""

    def __init__(self) -> None:
        super().__init__()
        self.block = MyBlock(6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x * 2).sum(-1)


def test_custom_handler_collapses_the_block() -> None:
    model = HoldsMyBlock().eval()
    x = torch.randn(3, 6)
    t2i = torch2ir.get_default_converter()
    t2i.register(MyBlock, lambda m: {"width": m.width}, type="myblock")
    ir = t2i.convert(model, (x,))
    calls = call_nodes(ir.root, "block")
    assert len(calls) == 1
    assert ir.root.node(calls[0])["type"] == "myblock"
    assert ir["block"].type == "myblock"
    assert ir["block"].data == {"width": 6}
    assert ir["block"].graph.number_of_nodes() == 0
    assert not any(call_nodes(g, "block.proj") for g in all_graphs(ir))  # inside the leaf: not traced apart
    assert ir["block.proj"].type == "linear"  # but still an implementation (the rebuild needs the path)
    ir.validate()

    # the default converter (and a fresh one) are unaffected
    assert not torch2ir.get_default_converter().has_handler(model.block)
    plain = torch2ir.convert(model, (x,))
    assert plain["block"].type == "module"
    assert plain["block"].graph.number_of_nodes() > 0
    assert [plain["block"].node(n)["type"] for n in call_nodes(plain["block"], "block.proj")] == ["linear"]


class Output(nn.Module):
    """A user leaf whose lowercased class name is a node kind."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class HoldsOutput(nn.Module):
    """Calls an :class:`Output` block before its real output."""

    def __init__(self) -> None:
        super().__init__()
        self.out = Output()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(x) + 1


@pytest.mark.parametrize("itype", [None, "input", "function", "get_attr", "module", "sequential", "modulelist"])
def test_handler_types_that_would_read_as_node_kinds_or_containers_are_refused(itype: str | None) -> None:
    t2i = torch2ir.get_default_converter()
    with pytest.raises(RegistryError, match="reserved"):
        t2i.register(Output, lambda m: {}, type=itype)  # None: the class name, "output"
    assert not t2i.has_handler(Output())
    with pytest.raises(RegistryError, match="reserved"):
        t2i.register_override(nn.Linear, lambda m: {}, type=itype or "output")
    t2i.register(Output, lambda m: {}, type="double")
    ir = t2i.convert(HoldsOutput(), (torch.randn(2, 3),))
    assert [ir.root.node(n)["type"] for n in call_nodes(ir.root, "out")] == ["double"]
    assert [n for n, a in ir.root.graph.nodes(data=True) if a["type"] == "output"] == ["output"]
    ir.validate()


# --------------------------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------------------------


class DataDependentBranch(nn.Module):
    """Python control flow on a tensor's value: not traceable by torch.export."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        if h.sum() > 0:
            return h
        return -h


def test_untraceable_model_raises_conversion_error_with_exports_message() -> None:
    model = DataDependentBranch()
    x = torch.randn(2, 4)
    with pytest.raises(Exception) as direct:  # whatever export raises, its text must be kept
        torch.export.export(model, (x,), strict=False)
    with pytest.raises(ConversionError) as caught:
        torch2ir.convert(model, (x,))
    message = str(caught.value)
    assert "DataDependentBranch" in message
    assert str(direct.value).strip().splitlines()[0] in message
    assert isinstance(caught.value.__cause__, type(direct.value))


class BadA(nn.Module):
    """A leaf whose (custom) handler returns a lambda."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1


class BadB(nn.Module):
    """A leaf whose (custom) handler returns a tensor."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class TwoProblems(nn.Module):
    """Two different unsupported leaves in one model."""

    def __init__(self) -> None:
        super().__init__()
        self.first_bad = BadA()
        self.ok = nn.Linear(4, 4)
        self.second_bad = BadB()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second_bad(self.ok(self.first_bad(x)))


def test_every_problem_is_reported_in_one_error() -> None:
    t2i = torch2ir.get_default_converter()
    t2i.register(BadA, lambda m: {"fn": lambda: 0})
    t2i.register(BadB, lambda m: {"table": torch.zeros(2)})
    with pytest.raises(ConversionError) as caught:
        t2i.convert(TwoProblems(), (torch.randn(2, 4),))
    message = str(caught.value)
    for path, cls in (("first_bad", "BadA"), ("second_bad", "BadB")):
        assert path in message and cls in message, message
    assert "'ok'" not in message and " ok:" not in message


@pytest.mark.parametrize("model", [lambda x: x, "model", torch.randn(2)], ids=["function", "str", "tensor"])
def test_non_module_is_a_type_error(model: Any) -> None:
    with pytest.raises(TypeError, match="nn.Module"):
        torch2ir.convert(model, (torch.randn(2),))


# --------------------------------------------------------------------------------------------------------------
# Meta device
# --------------------------------------------------------------------------------------------------------------


def _to_meta(value: Any) -> Any:
    return pytree.tree_map(lambda v: v.to("meta") if isinstance(v, torch.Tensor) else v, value)


@pytest.mark.parametrize("name", ["bert", "llama"])
def test_meta_device_conversion_matches_cpu(name: str) -> None:
    case = by_name(name)
    with torch.device("meta"):
        model = case.build()
    assert all(p.is_meta for p in model.parameters())
    args, kwargs = _to_meta(case.inputs())
    ir = torch2ir.convert(model, args, kwargs)
    cpu = converted(name).ir
    assert list(ir) == list(cpu)
    for key in cpu:
        got, want = ir[key], cpu[key]
        assert (got.type, got.data, got.state, got.aliases) == (want.type, want.data, want.state, want.aliases), key
        assert got.meta["class"] == want.meta["class"]
    assert ir.root.meta["forward_arg_names"] == cpu.root.meta["forward_arg_names"]
    assert all(t.is_meta for t in ir.tensors.values())  # no value was made up
    assert all(t.is_meta for t in (*model.parameters(), *model.buffers()))  # nothing was materialised
    ir.validate()
    # the same modules are called from graphs, with the same multiplicity
    calls = Counter(
        a.get("implementation") for g in ir.values() for _, a in g.graph.nodes(data=True) if a["type"] not in NODE_KINDS
    )
    cpu_calls = Counter(
        a.get("implementation")
        for g in cpu.values()
        for _, a in g.graph.nodes(data=True)
        if a["type"] not in NODE_KINDS
    )
    assert calls == cpu_calls
