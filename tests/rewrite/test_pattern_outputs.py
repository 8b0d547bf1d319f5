"""replace_pattern with patterns and replacements of several outputs (a tuple, as torch.fx's subgraph rewriter):
transformers' BERT and Llama (grouped-query) attention, whose query/key/value Linears one pattern matches and a
fused linear + split replaces; the rebuild computes exactly what the model computes, converting it gives the
rewritten IR back, and ``==``, ``differences``, ``ir2torch diff`` and the saved bytes agree. A match whose inner
value is read outside, or whose replacement would need a value computed after its first output, is not replaced.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn
from torch.nn import functional as F

import ir2torch
import torch2ir
from common.compare import differences
from common.ir import IR
from common.rewrite import RewriteError, replace_pattern
from ir2torch.cli.commands import main as ir2torch_main
from tests.rewrite.helpers import corpus_model, nodes_without_meta


def qkv(x, wq, bq, wk, bk, wv, bv):
    return F.linear(x, wq, bq), F.linear(x, wk, bk), F.linear(x, wv, bv)


def fused_qkv(x, wq, bq, wk, bk, wv, bv):
    y = F.linear(x, torch.cat([wq, wk, wv]), torch.cat([bq, bk, bv]))
    return y.split([wq.shape[0], wk.shape[0], wv.shape[0]], -1)


def qkv_no_bias(x, wq, wk, wv):
    return F.linear(x, wq), F.linear(x, wk), F.linear(x, wv)


def fused_qkv_no_bias(x, wq, wk, wv):
    return F.linear(x, torch.cat([wq, wk, wv])).split([wq.shape[0], wk.shape[0], wv.shape[0]], -1)


def _examples(n_weights: int, bias: bool) -> list[torch.Tensor]:
    out = [torch.randn(2, 5, 8)]
    for _ in range(n_weights):
        out += [torch.randn(8, 8)] + ([torch.randn(8)] if bias else [])
    return out


def _agree(x: IR, y: IR, tmp_path: Path) -> list[str]:
    """``==``, ``differences``, ``ir2torch diff`` and the saved bytes say the same of two IRs (saved under one file
    name in two folders: the name of a file's tensor sidecar follows its own)."""
    (tmp_path / "a").mkdir(exist_ok=True)
    (tmp_path / "b").mkdir(exist_ok=True)
    a, b = tmp_path / "a" / "model.ir.json", tmp_path / "b" / "model.ir.json"
    x.save(a)
    y.save(b)
    lines = differences(x, y)
    same = (x == y, not lines, a.read_bytes() == b.read_bytes(), ir2torch_main(["diff", str(a), str(b)]) == 0)
    assert len(set(same)) == 1, (same, lines[:5])
    return lines


CASES = {  # corpus model, attention graphs, the projections, pattern, replacement, examples
    "bert": ("encoder.layer.{}.attention.self", ("query", "key", "value"), qkv, fused_qkv, _examples(3, True)),
    "llama": ("model.layers.{}.self_attn", ("q_proj", "k_proj", "v_proj"), qkv_no_bias, fused_qkv_no_bias,
              _examples(3, False)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_qkv_projections_by_one_pattern_exact_and_a_fixpoint(name, tmp_path):
    block, parts, pattern, replacement, examples = CASES[name]
    model, args, kwargs, ir = corpus_model(name)
    state = model.state_dict()
    result = replace_pattern(ir, state, pattern, replacement, example_inputs=examples)
    assert result.count == 2 and result.skipped == [], (result.changes, result.skipped)
    for layer in range(2):
        graph = result.ir[block.format(layer)]
        called = [graph.node(n).get("implementation") for n in graph.nodes]
        assert called.count("aten.linear.default") == 1 and called.count("aten.split_with_sizes.default") == 1
        assert not any(f"{block.format(layer)}.{p}" == c for p in parts for c in called)
        # the projections stay, with their state, read by get_attr nodes of the attention's graph
        reads = sorted(graph.node(n)["implementation"] for n in graph.nodes if graph.node(n)["type"] == "get_attr")
        assert reads == sorted(f"{p}.{t}" for p in parts for t in (("weight", "bias") if name == "bert"
                                                                      else ("weight",)))
    assert set(result.state) == set(state) and all(torch.equal(result.state[k], state[k]) for k in state)
    assert nodes_without_meta(ir, result.ir) == []
    rebuilt = ir2torch.convert(result.ir, result.state)
    with torch.no_grad():
        want, got = model(*args, **kwargs), rebuilt(*args, **kwargs)
    # one matmul over the concatenated weights, then split: each output column sums over the same inputs in the
    # same order as the separate matmuls do, so the result is bitwise the same on this CPU build
    assert torch.equal(got.last_hidden_state if name == "bert" else got.logits,
                       want.last_hidden_state if name == "bert" else want.logits)
    assert _agree(torch2ir.convert(rebuilt, args, kwargs), result.ir, tmp_path) == []
    assert _agree(ir, result.ir, tmp_path) != []


def test_match_filters_see_every_matched_node_and_where_selects():
    _, _, _, ir = corpus_model("bert")
    seen = []

    def keep(match, ir):
        seen.append([(ref.node, key) for ref, key in zip(match.nodes, match.implementations)])
        return True

    aliased = [torch.randn(2, 5, 8)] + [torch.randn(8, 8), torch.randn(8)] * 3  # one weight passed thrice: copied
    one = replace_pattern(ir, None, qkv, fused_qkv, example_inputs=aliased, where="encoder.layer.1.*",
                          match_filters=[keep])
    assert one.count == 1 and [c.split(":")[0] for c in one.changes] == ["encoder.layer.1.attention.self"]
    block = "encoder.layer.1.attention.self"
    assert seen == [[(p, f"{block}.{p}") for p in ("query", "key", "value")]]
    assert replace_pattern(ir, None, qkv, fused_qkv, example_inputs=_examples(3, True),
                           match_filters=[lambda match, ir: False]).count == 0


class QK(nn.Module):
    """Two projections of one input; ``leak`` also returns the query projection, which the pattern keeps inside."""

    def __init__(self, leak: bool) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(8, 8), nn.Linear(8, 8)
        self.leak = leak

    def forward(self, x):
        q = self.q(x)
        out = torch.relu(q) * self.k(x)
        return (out, q) if self.leak else out


def qk_relu(x, wq, bq, wk, bk):
    return torch.relu(F.linear(x, wq, bq)), F.linear(x, wk, bk)


def qk_fused(x, wq, bq, wk, bk):
    q, k = F.linear(x, torch.cat([wq, wk]), torch.cat([bq, bk])).split([wq.shape[0], wk.shape[0]], -1)
    return torch.relu(q), k


@pytest.mark.parametrize("leak", [False, True])
def test_an_inner_value_read_outside_is_not_a_match(leak):
    torch.manual_seed(0)
    model, x = QK(leak).eval(), torch.randn(3, 8)
    ir = torch2ir.convert(model, (x,))
    result = replace_pattern(ir, model.state_dict(), qk_relu, qk_fused, example_inputs=_examples(2, True))
    assert result.count == (0 if leak else 1)
    if leak:
        assert result.ir == ir
        return
    assert nodes_without_meta(ir, result.ir) == []
    rebuilt = ir2torch.convert(result.ir, result.state)
    # not bitwise here: for a (3, 8) input the BLAS computes the 16-wide product with another kernel than the two
    # 8-wide ones (an ulp apart); at BERT's and Llama's sizes above they agree exactly
    torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=1e-6)
    assert torch2ir.convert(rebuilt, (x,)) == result.ir


class Late(nn.Module):
    """``a`` is read before ``b`` is computed: a replacement of both at ``a``'s place would read ``b`` too early."""

    def forward(self, x, z):
        a = torch.sigmoid(x)
        c = a + 1
        b = torch.exp(z)
        return c * torch.tanh(b)


class Shared(nn.Module):
    """One output of the pattern read by its other output and by the rest of the model (allowed: it is an output)."""

    def forward(self, x):
        s = torch.sigmoid(x)
        return (s + 1) * (s * x)


def test_a_replacement_needing_a_later_value_is_left_and_said():
    model, x, z = Late().eval(), torch.randn(3, 4), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x, z))
    result = replace_pattern(ir, None, lambda x, b: (torch.sigmoid(x), torch.tanh(b)),
                             lambda x, b: (torch.sigmoid(x), torch.tanh(b) + 0), example_inputs=(x, z))
    assert result.count == 0 and result.ir == ir
    assert result.skipped == ["root: sigmoid, tanh (a value the replacement reads is computed after 'sigmoid', "
                              "where it would go)"]


def test_an_output_may_be_read_by_another_output_and_outside():
    model, x = Shared().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,))

    def pattern(x):
        s = torch.sigmoid(x)
        return s, s * x

    result = replace_pattern(ir, None, pattern, lambda x: (torch.sigmoid(x), F.silu(x)), example_inputs=(x,))
    assert result.count == 1, result.skipped
    rebuilt = ir2torch.convert(result.ir, {})
    s = torch.sigmoid(x)
    assert torch.equal(rebuilt(x), (s + 1) * F.silu(x))
    assert torch2ir.convert(rebuilt, (x,)) == result.ir
    assert nodes_without_meta(ir, result.ir) == []


def test_items_of_a_split_are_outputs_and_their_readers_follow():
    class Halves(nn.Module):
        def forward(self, x):
            a, b = x.chunk(2, -1)
            return a * 2 - b

    model, x = Halves().eval(), torch.randn(3, 8)
    ir = torch2ir.convert(model, (x,))
    half = x.shape[-1] // 2
    result = replace_pattern(ir, None, lambda x: x.chunk(2, -1), lambda x: (x[..., :half], x[..., half:]),
                             example_inputs=(x,))
    assert result.count == 1
    called = [result.ir["root"].node(n).get("implementation") for n in result.ir["root"].nodes]
    assert called.count("aten.slice.Tensor") == 2 and "aten.split.Tensor" not in called
    rebuilt = ir2torch.convert(result.ir, {})
    assert torch.equal(rebuilt(x), model(x))
    assert torch2ir.convert(rebuilt, (x,)) == result.ir


@pytest.mark.parametrize(("replacement", "match"), [
    (lambda x, wq, bq, wk, bk, wv, bv: F.linear(x, wq, bq), "returns 3 values and the replacement 1"),
    (lambda x, wq, bq, wk, bk, wv, bv: (x, x, x, x), "returns 3 values and the replacement 4"),
])
def test_output_counts_must_agree(replacement, match):
    _, _, _, ir = corpus_model("bert")
    with pytest.raises(RewriteError, match=match):
        replace_pattern(ir, None, qkv, replacement, example_inputs=_examples(3, True))


def _rotate_half(x):  # transformers' Llama
    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)


def rope(q, k, cos, sin):
    """transformers' ``apply_rotary_pos_emb``: two outputs, both read later (the scores, the repeated keys)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def rope_once(q, k, cos, sin):
    """The same on the query and key heads stacked: one pass of each op, split back."""
    both = torch.cat([q, k], 1)
    out = both * cos.unsqueeze(1) + _rotate_half(both) * sin.unsqueeze(1)
    return out.split([q.shape[1], k.shape[1]], 1)


def test_llama_rotary_embedding_of_queries_and_keys_in_one_pass(tmp_path):
    model, args, kwargs, ir = corpus_model("llama")
    examples = (torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(1, 8, 16), torch.randn(1, 8, 16))
    result = replace_pattern(ir, None, rope, rope_once, example_inputs=examples)
    assert result.count == 2 and result.skipped == [], (result.changes, result.skipped)
    graph = result.ir["model.layers.0.self_attn"]
    called = [graph.node(n).get("implementation") for n in graph.nodes]
    assert called.count("aten.split_with_sizes.default") == 1 and called.count("aten.neg.default") == 1
    assert nodes_without_meta(ir, result.ir) == []
    rebuilt = ir2torch.convert(result.ir, model.state_dict())
    with torch.no_grad():
        assert torch.equal(rebuilt(*args, **kwargs).logits, model(*args, **kwargs).logits)  # elementwise: exact
    assert _agree(torch2ir.convert(rebuilt, args, kwargs), result.ir, tmp_path) == []


def test_a_dynamic_batch_keeps_its_symbol_on_every_output():
    torch.manual_seed(0)
    model, x = QK(leak=False).eval(), torch.randn(4, 8)
    dims = ({0: torch.export.Dim("batch", min=2, max=64)},)
    ir = torch2ir.convert(model, (x,), dynamic_shapes=dims)
    result = replace_pattern(ir, model.state_dict(), qk_relu, qk_fused, example_inputs=_examples(2, True))
    assert result.count == 1 and nodes_without_meta(ir, result.ir) == []
    root = result.ir["root"]
    split = next(n for n in root.nodes if root.node(n).get("implementation") == "aten.split_with_sizes.default")
    shapes = [m["shape"] for m in root.node(split)["meta"]]
    assert [s[1] for s in shapes] == [8, 8] and all(isinstance(s[0], str) for s in shapes)
    rebuilt = ir2torch.convert(result.ir, result.state)
    y = torch.randn(9, 8)
    torch.testing.assert_close(rebuilt(y), model(y), rtol=0, atol=1e-6)
    assert torch2ir.convert(rebuilt, (x,), dynamic_shapes=dims) == result.ir


class Proj(nn.Linear):
    """A Linear subclass with a forward of its own: rebuilt from its graph (``F.linear`` of its parameters)."""

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class ProjAttention(nn.Module):
    """Query/key/value projections that are modules with graphs, and an output projection the pattern does not need."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.v, self.o = Proj(8, 8), Proj(8, 8), Proj(8, 8), Proj(8, 8)

    def forward(self, x):
        scores = (self.q(x) @ self.k(x).transpose(-1, -2)).softmax(-1)
        return self.o(scores @ self.v(x))


def test_a_match_over_several_module_calls_inlines_those_it_needs(tmp_path):
    torch.manual_seed(0)
    model, x = ProjAttention().eval(), torch.randn(2, 5, 8)
    ir = torch2ir.convert(model, (x,))
    assert replace_pattern(ir, None, qkv, fused_qkv, example_inputs=_examples(3, True), across_calls=False).count == 0
    result = replace_pattern(ir, model.state_dict(), qkv, fused_qkv, example_inputs=_examples(3, True))
    assert result.count == 1 and len(result.inlined) == 3, (result.changes, result.inlined)
    assert [line.split(": ")[0] for line in result.inlined] == ["root:q", "root:k", "root:v"]
    root = result.ir["root"]
    called = [root.node(n).get("implementation") for n in root.nodes]
    assert "o" in called and not {"q", "k", "v"} & set(called)  # the output projection stays a call
    assert nodes_without_meta(ir, result.ir) == []
    rebuilt = ir2torch.convert(result.ir, result.state)
    torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=1e-6)
    assert _agree(torch2ir.convert(rebuilt, (x,)), result.ir, tmp_path) == []
