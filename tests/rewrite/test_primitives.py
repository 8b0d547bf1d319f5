"""The primitives on small models: find (also through module boundaries), replace (node, subgraph, key),
remove, insert_after, the passes built on them, and the errors of rewrites that do not apply."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.errors import IRError, StateDictError
from common.rewrite import (
    NodeRef,
    PatternNotFoundError,
    RewriteError,
    find,
    insert_after,
    insert_after_type,
    remove,
    remove_types,
    replace,
    replace_type,
)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.bn = nn.BatchNorm2d(4)
        self.seq = nn.Sequential(nn.Conv2d(4, 4, 1), nn.ReLU(), nn.Dropout(0.2))
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(self.seq(self.bn(self.block(x))).mean((2, 3)))


def _net():
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.randn(2, 4, 6, 6)
    return model, x, torch2ir.convert(model, (x,))


class Half(nn.Module):
    """A user's module: multiplies by a learned scale."""

    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * self.scale.reshape(1, -1, 1, 1)


def _converter():
    conv = ir2torch.get_default_converter()
    conv.register("half", lambda impl: Half(**impl.data))
    return conv


def test_find_within_graphs_and_through_module_boundaries():
    _, _, ir = _net()
    assert find(ir, ["conv2d", "batchnorm2d"]) == []
    (match,) = find(ir, ["conv2d", "batchnorm2d"], through_modules=True)
    assert match.nodes == (NodeRef("block", "conv"), NodeRef("root", "bn")) and match.crosses_modules
    assert match.implementations == ("block.conv", "bn")
    (inner,) = find(ir, ["conv2d", "relu", "dropout"])
    assert inner.graph == ("seq", 0)
    assert find(ir, ["relu"], where="fc*") == []


def test_a_match_across_modules_cannot_be_replaced():
    model, _, ir = _net()
    (match,) = find(ir, ["conv2d", "batchnorm2d"], through_modules=True)
    with pytest.raises(RewriteError, match="spans module boundaries"):
        replace(ir, model.state_dict(), match, type="conv2d")


def test_remove_and_insert_keep_sequential_order_and_outputs():
    model, x, ir = _net()
    new_ir, state = remove_types(ir, model.state_dict())
    assert new_ir["seq"].type == "sequential" and "seq.2" not in new_ir
    rebuilt = ir2torch.convert(new_ir, state)
    assert [type(m) for m in rebuilt.seq] == [nn.Conv2d, nn.ReLU]
    torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)
    result = insert_after_type(new_ir, state, "conv2d", type="half", data={"n": 4},
                               state_fn=lambda original, ref: {"scale": torch.full((4,), 0.5)})
    assert sorted(c.split(":")[0] for c in result.changes) == ["block.conv_half", "seq.m0_half"]
    rebuilt = _converter().convert(result.ir, result.state)
    assert [type(m) for m in rebuilt.seq] == [nn.Conv2d, Half, nn.ReLU]  # right after the conv it follows
    assert result.ir["seq.m0_half"].meta["provenance"] == [{"pass": "insert_after_type", "from": []}]
    with torch.no_grad():
        seq_in = model.bn(0.5 * model.block(x))
        want = model.fc(torch.relu(0.5 * model.seq[0](seq_in)).mean((2, 3)))
    torch.testing.assert_close(rebuilt(x), want)


def test_replace_a_node_by_a_user_module_with_a_state_transform():
    model, _x, ir = _net()
    new_ir, state = replace(ir, model.state_dict(), NodeRef("root", "bn"), type="half", data={"n": 4},
                            state_fn=lambda original: {"scale": original["bn.weight"] * 3})
    rebuilt = _converter().convert(new_ir, state)
    assert isinstance(rebuilt.bn, Half) and torch.equal(rebuilt.bn.scale, model.bn.weight * 3)
    assert new_ir["bn"].meta["provenance"][0]["from"] == [{"key": "bn", "type": "batchnorm2d", "source": "bn"}]


def test_replace_type_with_attribute_and_state_mapping():
    model, _x, ir = _net()
    result = replace_type(ir, model.state_dict(), type="linear", new_type="linear",
                          data=lambda impl: {**impl.data, "bias": False},
                          state_map=lambda impl, t: {"weight": t["weight"] * 2})
    rebuilt = ir2torch.convert(result.ir, result.state)
    assert rebuilt.fc.bias is None and torch.equal(rebuilt.fc.weight, model.fc.weight * 2)
    with pytest.raises(RewriteError, match="needs type= or where="):
        replace_type(ir, None, new_type="linear")


def test_insert_then_remove_is_the_identity_and_the_state_travels():
    model, x, ir = _net()
    new_ir, state = insert_after(ir, model.state_dict(), NodeRef("root", "fc"), type="relu", data={"inplace": False},
                                 record=False)
    assert ir2torch.convert(new_ir, state)(x).min() >= 0
    (node,) = [n for n in new_ir.root.nodes if new_ir.root.node(n)["type"] == "relu"]
    back, back_state = remove(new_ir, state, NodeRef("root", node))
    assert back == ir and back_state.keys() == model.state_dict().keys()


@pytest.mark.parametrize("call, match", [
    (lambda ir, s: remove(ir, s, NodeRef("root", "nope")), "no such node"),
    (lambda ir, s: remove(ir, s, NodeRef("nope", "x")), "no implementation 'nope'"),
    (lambda ir, s: remove(ir, s, NodeRef("root", "output")), "cannot be removed"),
    (lambda ir, s: remove(ir, s, NodeRef("root", "fc"), input=3), "has 1 inputs"),
    (lambda ir, s: insert_after(ir, s, NodeRef("root", "output"), type="relu"), "nothing can follow"),
    (lambda ir, s: insert_after(ir, s, NodeRef("root", "fc"), type="relu", key="seq.0"), "is taken"),
    (lambda ir, s: insert_after(ir, s, NodeRef("seq", "1"), type="relu", key="fc2"), "must hang below 'seq'"),
    (lambda ir, s: insert_after(ir, s, NodeRef("seq", "1"), type="relu", key="seq.a.b"), "direct child"),
    (lambda ir, s: replace(ir, s, NodeRef("root", "fc"), type="linear",
                           state_fn=lambda o: {"weight": o["fc.nope"]}), "reads 'fc.nope'"),
    (lambda ir, s: ir2torch.convert(*replace(ir, s, NodeRef("root", "fc"), type="linear",
                                             state_fn=lambda o: {"weight": o["fc.weight"]})), "fc.bias"),
    (lambda ir, s: replace(ir, s, NodeRef("root", "fc"), type="linear", state_fn=lambda o: 1 / 0),
     "state transform failed: ZeroDivisionError"),
    (lambda ir, s: replace(ir, s, NodeRef("root", "fc"), type="output"), "invalid IR"),
    (lambda ir, s: replace(ir, s, "nope", type="linear"), "no such implementation"),
    (lambda ir, s: find(ir, []), "pattern is empty"),
    (lambda ir, s: remove(ir, {"fc.weight": torch.zeros(1)}, NodeRef("root", "fc")), "missing"),
])
def test_rewrites_that_do_not_apply_raise_an_irerror_naming_the_place(call, match):
    model, _, ir = _net()
    before = ir.to_dict()
    with pytest.raises(IRError, match=match) as info:
        call(ir, model.state_dict())
    assert isinstance(info.value, (RewriteError, PatternNotFoundError, StateDictError))
    assert ir.to_dict() == before  # the input IR is never changed


def test_a_module_called_twice_cannot_be_replaced_at_one_call():
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(self.fc(x))

    model = Twice().eval()
    ir = torch2ir.convert(model, (torch.randn(1, 3),))
    first = next(n for n in ir.root.nodes if ir.root.node(n)["type"] == "linear")
    with pytest.raises(RewriteError, match="also called from"):
        replace(ir, model.state_dict(), NodeRef("root", first), type="linear")
    new_ir, _ = remove(ir, model.state_dict(), NodeRef("root", first))  # the other call keeps the module
    assert "fc" in new_ir
