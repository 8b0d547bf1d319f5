"""replace_pattern: a pattern function's ATen graph replaced by a replacement function's, in every graph.

Each rewritten model is compared with an eager model *written with the replacement* (same weights): the splice
is right only if the two agree exactly. The loop stays a fixpoint (converting the rebuilt model gives the
rewritten IR), also under dynamic shapes.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ir2torch
import torch2ir
from common.compare import equal
from common.ir import IR
from common.rewrite import RewriteError, replace_pattern


def swish(x):
    return x * torch.sigmoid(x)


def silu(x):
    return F.silu(x)


class Block(nn.Module):
    """Two swishes (one in a child module, one in the parent), an inner value read twice."""

    def __init__(self, act=swish) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.inner = Act(act)
        self.act = act

    def forward(self, x):
        y = self.inner(self.lin(x))
        z = self.act(y + 1)
        return z * 2


class Act(nn.Module):
    def __init__(self, act) -> None:
        super().__init__()
        self.act = act

    def forward(self, x):
        return self.act(x)


def _reference(model: nn.Module, act) -> nn.Module:
    ref = Block(act).eval()
    ref.load_state_dict(model.state_dict())
    return ref


def test_swish_to_silu_in_every_graph_exact_and_fixpoint():
    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(3, 8)
    ir = torch2ir.convert(model, (x,))
    result = replace_pattern(ir, model.state_dict(), swish, silu)
    assert result.count == 2
    assert sorted(c.split(":")[0] for c in result.changes) == ["inner", "root"]
    for key in ("root", "inner"):
        targets = [result.ir[key].node(n).get("implementation") for n in result.ir[key].nodes]
        assert "aten.silu.default" in targets and "aten.sigmoid.default" not in targets
    assert ir["root"] != result.ir["root"]  # the input IR is not changed
    rebuilt = ir2torch.convert(result.ir, result.state)
    assert torch.equal(rebuilt(x), _reference(model, silu)(x))
    assert equal(torch2ir.convert(rebuilt, (x,)), result.ir)


def test_names_are_numbered_again_as_a_conversion_would():
    model, x = Block().eval(), torch.randn(3, 8)
    root = replace_pattern(torch2ir.convert(model, (x,)), None, swish, silu).ir["root"]
    # the root's "mul" (swish) went, so the doubling, exported as "mul_1", is now the graph's only "mul"
    assert [n for n in root.nodes if root.node(n)["type"] == "function"] == ["add", "silu", "mul"]


def test_a_value_read_outside_the_match_is_not_replaced():
    class Leak(nn.Module):
        def forward(self, x):
            s = torch.sigmoid(x)
            return x * s + s

    model, x = Leak(), torch.randn(4)
    result = replace_pattern(torch2ir.convert(model, (x,)), None, swish, silu)
    assert result.count == 0 and result.changes == []


def test_an_input_used_twice_must_be_one_value():
    class Two(nn.Module):
        def forward(self, x, y):
            return x * torch.sigmoid(y)

    result = replace_pattern(torch2ir.convert(Two(), (torch.randn(4), torch.randn(4))), None, swish, silu)
    assert result.count == 0


def test_constants_must_be_equal():
    class Plus(nn.Module):
        def forward(self, x):
            return (x + 2) * 3

    ir = torch2ir.convert(Plus(), (torch.randn(4),))
    assert replace_pattern(ir, None, lambda x: x + 1, lambda x: x - 1).count == 0
    result = replace_pattern(ir, None, lambda x: x + 2, lambda x: x - 2)
    assert result.count == 1
    x = torch.randn(4)
    assert torch.equal(ir2torch.convert(result.ir, {})(x), (x - 2) * 3)


def test_where_and_match_filters_select():
    model, x = Block().eval(), torch.randn(3, 8)
    ir = torch2ir.convert(model, (x,))
    only_inner = replace_pattern(ir, None, swish, silu, where="inner")
    assert [c.split(":")[0] for c in only_inner.changes] == ["inner"]
    no_root = replace_pattern(ir, None, swish, silu, match_filters=[lambda m, _ir: m.nodes[0].implementation != "root"])
    assert [c.split(":")[0] for c in no_root.changes] == ["inner"]
    seen = []
    replace_pattern(ir, None, swish, silu, match_filters=[lambda m, _ir: seen.append(m) or False])
    assert len(seen) == 2 and all([r.node for r in m.nodes][-1].startswith("mul") for m in seen)


def test_gpt2_gelu_formula_becomes_the_tanh_gelu_kernel():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16, use_cache=False,
                                     bos_token_id=0, eos_token_id=0)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 64, (2, 8))
    ir = torch2ir.convert(model, (ids,))

    def gelu_new(x):  # transformers' NewGELUActivation, as written there
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    result = replace_pattern(ir, model.state_dict(), gelu_new, lambda x: F.gelu(x, approximate="tanh"))
    assert result.count == 2
    rebuilt = ir2torch.convert(result.ir, result.state)
    config.activation_function = "gelu_pytorch_tanh"
    ref = transformers.GPT2LMHeadModel(config).eval()
    ref.load_state_dict(model.state_dict())
    assert torch.equal(rebuilt(ids).logits, ref(ids).logits)


def test_fake_quant_pattern_becomes_the_fused_op():
    class TeamFakeQuant(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.register_buffer("scale", torch.tensor([0.05]))
            self.register_buffer("zero_point", torch.tensor([3], dtype=torch.int32))

        def forward(self, x):
            y = self.conv(x)
            q = torch.clamp(torch.round(y * (1.0 / self.scale)) + self.zero_point, -128, 127)
            return (q - self.zero_point) * self.scale

    def pattern(x, scale, zp):
        return (torch.clamp(torch.round(x * (1.0 / scale)) + zp, -128, 127) - zp) * scale

    def replacement(x, scale, zp):
        return torch.fake_quantize_per_tensor_affine(x, scale, zp, -128, 127)

    torch.manual_seed(0)
    model, x = TeamFakeQuant().eval(), torch.randn(2, 3, 8, 8)
    ir = torch2ir.convert(model, (x,))
    examples = (torch.randn(2, 4, 6, 6), torch.tensor([0.05]), torch.tensor([3], dtype=torch.int32))
    result = replace_pattern(ir, model.state_dict(), pattern, replacement, example_inputs=examples)
    assert result.count == 1
    targets = [result.ir["root"].node(n).get("implementation") for n in result.ir["root"].nodes]
    assert "aten.fake_quantize_per_tensor_affine.tensor_qparams" in targets and "aten.round.default" not in targets
    rebuilt = ir2torch.convert(result.ir, result.state)
    want = torch.fake_quantize_per_tensor_affine(model.conv(x), model.scale, model.zero_point, -128, 127)
    assert torch.equal(rebuilt(x), want)


def test_dynamic_shapes_keep_symbolic_sizes_and_the_fixpoint():
    class Widen(nn.Module):
        def forward(self, x):
            return torch.cat([x, x], 1) * 2

    model, x = Widen(), torch.randn(4, 3)
    dims = ({0: torch.export.Dim("batch", min=2, max=64)},)
    ir = torch2ir.convert(model, (x,), dynamic_shapes=dims)
    result = replace_pattern(ir, None, lambda a: torch.cat([a, a], 1) * 2, lambda a: torch.cat([a * 2, a * 2], 1))
    assert result.count == 1
    root = result.ir["root"]
    cat = next(n for n in root.nodes if root.node(n).get("implementation") == "aten.cat.default")
    assert isinstance(root.node(cat)["meta"]["shape"][0], str) and root.node(cat)["meta"]["shape"][1] == 6
    rebuilt = ir2torch.convert(result.ir, {})
    y = torch.randn(9, 3)
    assert torch.equal(rebuilt(y), model(y))
    assert equal(torch2ir.convert(rebuilt, (x,), dynamic_shapes=dims), result.ir)


def test_json_round_trip_of_the_result(tmp_path):
    model, x = Block().eval(), torch.randn(3, 8)
    result = replace_pattern(torch2ir.convert(model, (x,)), model.state_dict(), swish, silu)
    result.ir.save(tmp_path / "silu.ir.json")
    assert IR.load(tmp_path / "silu.ir.json") == result.ir


@pytest.mark.parametrize(("pattern", "replacement", "match"), [
    (lambda x: (x + 1, x - 1), lambda x: x, "returns 2 values and the replacement 1"),
    (lambda x: (x + 1, x), lambda x: (x, x), "returns one of its arguments"),
    (lambda x: ((y := x + 1), y), lambda x: (x, x), "returns one value twice"),
    (lambda x: (x + 1, 2), lambda x: (x, x), "not all of them tensors|cannot be traced"),
    (lambda x: x, lambda x: x, "returns one of its arguments"),
    (lambda x: x + 1, lambda x, y: x + y, "cannot be traced|takes 1 arguments"),
    (lambda x: x + 1, lambda x: x + torch.tensor([1.0]), "tensor constant"),
    (lambda x: x + 1, lambda x: torch.ops.aten._print.default("x") or x, "_print.default, whose result"),
    (lambda x: x.tolist(), lambda x: x, "cannot be traced|returns"),
    (42, lambda x: x, "function of tensors"),
])
def test_bad_functions_are_refused_naming_the_problem(pattern, replacement, match):
    ir = torch2ir.convert(Block().eval(), (torch.randn(3, 8),))
    with pytest.raises(RewriteError, match=match):
        replace_pattern(ir, None, pattern, replacement)


def test_a_replacement_outside_the_allow_list_is_refused():
    ir = torch2ir.convert(Block().eval(), (torch.randn(3, 8),))
    with pytest.raises(RewriteError, match="allow"):
        replace_pattern(ir, None, swish, lambda x: torch.ops.aten._reshape_alias.default(x, [3, 8], [8, 1]),
                        example_inputs=(torch.randn(3, 8),))


class Leaves(nn.Module):
    """Activation modules (handled leaves, no graph): one matches a functional pattern, the in-place one must not."""

    def __init__(self, inplace: bool = False, approximate: str = "none") -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.act = nn.SiLU(inplace=inplace)
        self.gelu = nn.GELU(approximate=approximate)

    def forward(self, x):
        return self.gelu(self.act(self.lin(x)) + 1) * 2


def test_a_handled_activation_matches_as_its_op_and_the_loop_stays_a_fixpoint():
    torch.manual_seed(0)
    model, x = Leaves().eval(), torch.randn(3, 8)
    ir = torch2ir.convert(model, (x,))
    result = replace_pattern(ir, model.state_dict(), silu, swish)
    assert result.count == 1 and result.changes == ["root: act -> aten.sigmoid.default, aten.mul.Tensor"]
    rebuilt = ir2torch.convert(result.ir, result.state)
    lin = model.lin
    expected = F.gelu(swish(lin(x)) + 1) * 2  # the model written with the replacement, same weights
    assert torch.equal(rebuilt(x), expected)
    assert "act" in result.ir and not any(result.ir["root"].node(n).get("implementation") == "act"
                                          for n in result.ir["root"].nodes)  # kept, called by nothing
    assert equal(torch2ir.convert(rebuilt, (x,)), result.ir)


def test_an_in_place_activation_or_other_attributes_do_not_match():
    torch.manual_seed(0)
    x = torch.randn(3, 8)
    inplace = Leaves(inplace=True).eval()
    assert replace_pattern(torch2ir.convert(inplace, (x,)), None, silu, swish).count == 0  # it changes its input too
    tanh = Leaves(approximate="tanh").eval()
    ir = torch2ir.convert(tanh, (x,))
    assert replace_pattern(ir, None, lambda v: F.gelu(v), lambda v: v * 0.5).count == 0  # the exact gelu is not it
    result = replace_pattern(ir, tanh.state_dict(), lambda v: F.gelu(v, approximate="tanh"), lambda v: F.gelu(v))
    assert result.count == 1
    rebuilt = ir2torch.convert(result.ir, result.state)
    assert torch.equal(rebuilt(x), F.gelu(F.silu(tanh.lin(x)) + 1) * 2)


def test_a_match_reading_another_matchs_output():
    class Twice(nn.Module):
        def forward(self, x):
            s = swish(x)
            return swish(s) + s

    model, x = Twice().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))
    result = replace_pattern(ir, None, swish, silu)  # the second swish reads what the first computes
    assert result.count == 2
    rebuilt = ir2torch.convert(result.ir, {})
    assert torch.equal(rebuilt(x), F.silu(F.silu(x)) + F.silu(x))
    assert torch2ir.convert(rebuilt, (x,)) == result.ir
