"""``inline``: a module call replaced by the graph it runs, in its caller's graph. The rebuilt model computes what
the original did, loads the original state with ``strict=True``, and converts back to the same IR."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.compare import equal
from common.rewrite import NodeRef, RewriteError, inline, replace_pattern


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor, bias: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.lin(x) * self.scale + bias
        return h.relu(), h.sum(-1)


class Twice(nn.Module):
    """One block called twice (two call nodes of one implementation), its results unpacked, a keyword argument."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.block(x)
        c, d = self.block(a, bias=0.5)
        return self.out(c) + b[:, None] * d[:, None]


def _nodes(ir, key="root"):
    return {n: ir[key].node(n) for n in ir[key].nodes}


def test_a_call_becomes_the_callees_nodes_exact_strict_and_a_fixpoint():
    torch.manual_seed(0)
    model, x = Twice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    first, _ = [n for n, a in _nodes(ir).items() if a.get("implementation") == "block"]
    new, state = inline(ir, model.state_dict(), NodeRef("root", first))
    nodes = _nodes(new)
    assert [n for n, a in nodes.items() if a.get("implementation") == "block"] == ["block"]  # its first call now
    assert nodes["block_lin"]["implementation"] == "block.lin"  # the callee's child, called through it
    assert nodes["block_scale"] == {**nodes["block_scale"], "type": "get_attr", "implementation": "block.scale"}
    assert {"mul", "relu", "sum"} <= set(nodes)  # ops named as a conversion names them
    rebuilt = ir2torch.convert(new, state)  # strict: the state is the original's
    assert torch.equal(rebuilt(x), model(x))
    assert new["block"].node_count  # still called once: it keeps its graph
    assert equal(torch2ir.convert(rebuilt, (x,)), new)
    assert ir == torch2ir.convert(model, (x,))  # the input IR is left as it was
    # inlining the second call too: nothing calls the block any more, it keeps its state and no graph
    second, = [n for n, a in _nodes(new).items() if a.get("implementation") == "block"]
    last, state = inline(new, state, NodeRef("root", second))
    assert last["block"].node_count == 0 and "in_spec" not in last["block"].meta
    rebuilt = ir2torch.convert(last, state)
    assert torch.equal(rebuilt(x), model(x))
    assert sorted(rebuilt.state_dict()) == sorted(model.state_dict())
    assert equal(torch2ir.convert(rebuilt, (x,)), last)


def test_a_transformers_attention_is_inlined_into_its_layer():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                     intermediate_size=64, vocab_size=50)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 50, (2, 6))
    ir = torch2ir.convert(model, (ids,))
    layer = "encoder.layer.0"
    call, = [n for n, a in _nodes(ir, layer).items() if a.get("implementation") == f"{layer}.attention"]
    new, state = inline(ir, model.state_dict(), NodeRef(layer, call))
    assert not [a for a in _nodes(new, layer).values() if a.get("implementation") == f"{layer}.attention"]
    assert f"{layer}.attention.self" in {a.get("implementation") for a in _nodes(new, layer).values()}
    rebuilt = ir2torch.convert(new, state)
    with torch.no_grad():
        assert torch.equal(rebuilt(ids).last_hidden_state, model(ids).last_hidden_state)
    assert equal(torch2ir.convert(rebuilt, (ids,)), new)


def test_a_leaf_or_an_op_is_refused_naming_it():
    model, x = Twice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    with pytest.raises(RewriteError, match=r"'out' \(linear\) has no graph to inline"):
        inline(ir, None, NodeRef("root", "out"))
    op = next(n for n, a in _nodes(ir).items() if a["type"] == "function")
    with pytest.raises(RewriteError, match="not a module call"):
        inline(ir, None, NodeRef("root", op))


class Gate(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x)


class Gated(nn.Module):
    """``x * sigmoid(x)`` spread over a module call: the sigmoid in a child, the product in the parent."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.gate = Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        return y * self.gate(y)


def test_a_pattern_spread_over_a_call_matches_once_the_call_is_inlined():
    model, x = Gated().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))

    def swish(v):
        return v * torch.sigmoid(v)

    def silu(v):
        return torch.nn.functional.silu(v)

    assert replace_pattern(ir, model.state_dict(), swish, silu, across_calls=False).count == 0
    by_hand, state = inline(ir, model.state_dict(), NodeRef("root", "gate"))
    for result in (replace_pattern(by_hand, state, swish, silu), replace_pattern(ir, model.state_dict(), swish, silu)):
        assert result.count == 1
        assert not [a for a in _nodes(result.ir).values() if a.get("implementation") == "gate"]
        rebuilt = ir2torch.convert(result.ir, result.state)
        assert torch.equal(rebuilt(x), torch.nn.functional.silu(model.lin(x)))
        assert equal(torch2ir.convert(rebuilt, (x,)), result.ir)
    assert [line.split(": ", 1)[1] for line in result.inlined] == ["inlined 'gate' (1 nodes)"]


class TwoGates(nn.Module):
    """One gate whose call a swish spans, one whose whole swish is inside it: only the first call is inlined."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = Gate()
        self.inner = Swish()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x * self.gate(x))


class Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def test_only_calls_a_match_spans_are_inlined():
    model, x = TwoGates().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    result = replace_pattern(ir, None, lambda v: v * torch.sigmoid(v), torch.nn.functional.silu)
    assert result.count == 2
    calls = {a.get("implementation") for a in _nodes(result.ir).values()}
    assert "inner" in calls and "gate" not in calls  # the inner swish is replaced in its own graph
    assert "aten.silu.default" in {a.get("implementation") for a in _nodes(result.ir, "inner").values()}
    rebuilt = ir2torch.convert(result.ir, result.state)
    assert torch.allclose(rebuilt(x), model(x), atol=1e-6)
    assert equal(torch2ir.convert(rebuilt, (x,)), result.ir)


class Stages(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stage = nn.Sequential(Swish(), nn.Linear(4, 4), Swish())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.stage(x) + 1


def test_an_nn_sequential_call_is_inlined_and_calls_inside_it_are_refused():
    torch.manual_seed(0)
    model, x = Stages().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    assert ir["stage"].type == "sequential"
    with pytest.raises(RewriteError, match="rebuilt as its class"):  # a real Sequential runs its children
        inline(ir, None, NodeRef("stage", next(iter(_nodes(ir, "stage")))))
    new, state = inline(ir, model.state_dict(), NodeRef("root", "stage"))
    assert [a["implementation"] for a in _nodes(new).values() if a["type"] not in ("input", "output", "function")] \
        == ["stage.0", "stage.1", "stage.2"]
    assert new["stage"].node_count == 0  # the container stays, with its children, and is no longer called
    rebuilt = ir2torch.convert(new, state)
    assert isinstance(rebuilt.stage, nn.Sequential)
    assert torch.equal(rebuilt(x), model(x))
    assert equal(torch2ir.convert(rebuilt, (x,)), new)


class SameTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.block(x)[0])[0]  # two calls of one graph


def test_the_inlined_nodes_share_nothing_with_the_callee():
    model, x = SameTwice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    assert ir["block"].variant_count == 0
    new, _ = inline(ir, None, NodeRef("root", "block"))
    assert new["block"].node_count  # the second call still runs it
    new.root.node("mul")["meta"]["shape"][0] = 99  # a later edit of the caller's copy
    assert new["block"].node("mul")["meta"]["shape"][0] == 3
