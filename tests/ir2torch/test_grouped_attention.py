"""Attention on repeated key/value heads runs on the grouped heads in the folded forward
(``ir2torch.codegen.grouped_attention``): outputs bit for bit the graph's, the graph itself unchanged."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from torch.profiler import ProfilerActivity, profile

import ir2torch
import torch2ir
from ir2torch.codegen import grouped_attention
from ir2torch.codegen.fold_cache import FOLD_ATTR


def _repeat(kv: torch.Tensor, groups: int) -> torch.Tensor:
    b, h, n, d = kv.shape
    return kv[:, :, None].expand(b, h, groups, n, d).reshape(b, h * groups, n, d)


class GroupedAttention(nn.Module):
    """transformers' ``repeat_kv`` + SDPA: 8 query heads, 2 key/value heads, a cache concatenated in front."""

    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(64, 64)
        self.kv = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor, mask: torch.Tensor) -> tuple:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, 8, 8).transpose(1, 2)
        k, v = self.kv(x).view(b, n, 2, 16).transpose(1, 2).split(8, dim=-1)
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        out = F.scaled_dot_product_attention(q, _repeat(k, 4), _repeat(v, 4), attn_mask=mask, scale=0.3)
        return out.transpose(1, 2).reshape(b, n, 64), k, v


def _inputs(batch: int, new: int, past: int) -> tuple:
    generator = torch.Generator().manual_seed(batch * 100 + new * 10 + past)
    mask = torch.rand(batch, 1, new, past + new, generator=generator) > 0.3
    mask[..., -1] = True
    return (torch.randn(batch, new, 64, generator=generator), torch.randn(batch, 2, past, 8, generator=generator),
            torch.randn(batch, 2, past, 8, generator=generator), mask)


@pytest.fixture(scope="module")
def converted() -> tuple[nn.Module, object]:
    torch.manual_seed(0)
    model = GroupedAttention().eval()
    batch, new, past = torch.export.Dim("batch"), torch.export.Dim("new"), torch.export.Dim("past")
    dynamic = ({0: batch, 1: new}, {0: batch, 2: past}, {0: batch, 2: past},
               {0: batch, 2: new, 3: torch.export.Dim.AUTO})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir = torch2ir.convert(model, _inputs(2, 3, 4), dynamic_shapes=dynamic)
    return model, ir


def _aten(module: nn.Module, args: tuple) -> dict[str, int]:
    with torch.inference_mode(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(*args)
    return {e.key: e.count for e in prof.key_averages()}


def test_the_folded_forward_groups_heads_and_computes_the_same(converted: tuple) -> None:
    model, ir = converted
    rebuilt = ir2torch.convert(ir, model.state_dict())
    plain = ir2torch.convert(ir, model.state_dict(), fold_constants=False)
    assert FOLD_ATTR in rebuilt.__dict__ and FOLD_ATTR not in plain.__dict__
    assert grouped_attention.find(rebuilt.graph)  # the graph keeps the repeats: only the folded forward differs
    for batch, new, past in [(1, 1, 5), (3, 1, 17), (2, 6, 0), (1, 4, 30)]:
        args = _inputs(batch, new, past)
        with torch.inference_mode():
            expected = model(*args)
            for _ in range(2):  # the first call of a signature is probed (plain forward), later ones run folded
                got = rebuilt(*args)
                assert all(torch.equal(a, b) for a, b in zip(got, expected))
            assert all(torch.equal(a, b) for a, b in zip(plain(*args), expected))
    args = _inputs(2, 1, 9)
    rebuilt(*args), plain(*args)  # probed: the calls profiled below run the real ops only
    folded, unfolded = _aten(rebuilt, args), _aten(plain, args)
    assert unfolded.get("aten::expand", 0) >= 2 and folded.get("aten::expand", 0) == unfolded["aten::expand"] - 2
    with warnings.catch_warnings():  # the loop closes: tracers see the graph as the IR has it
        warnings.simplefilter("ignore")
        assert torch2ir.convert(rebuilt, _inputs(2, 3, 4)) == torch2ir.convert(plain, _inputs(2, 3, 4))


def test_gradients_run_the_repeat(converted: tuple) -> None:
    model, ir = converted
    rebuilt = ir2torch.convert(ir, model.state_dict())
    x, past_k, past_v, mask = _inputs(2, 2, 3)
    rebuilt(x, past_k, past_v, mask)  # probed
    leaves = [t.clone().requires_grad_() for t in (x, past_k, past_v)]
    out = rebuilt(*leaves, mask)[0]
    expected_leaves = [t.clone().requires_grad_() for t in (x, past_k, past_v)]
    expected = model(*expected_leaves, mask)[0]
    assert torch.equal(out, expected)
    out.square().sum().backward()
    expected.square().sum().backward()
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(leaves, expected_leaves))


@pytest.mark.parametrize(("dtype", "masked", "causal"), [  # torch refuses a mask together with is_causal
    (dtype, masked, causal) for dtype, masked, causal in itertools.product(
        [torch.float32, torch.bfloat16], [None, "bool", "float"], [False, True]) if not (masked and causal)])
def test_grouped_sdpa_is_the_repeat_bit_for_bit(dtype: torch.dtype, masked: str | None, causal: bool) -> None:
    generator = torch.Generator().manual_seed(3)
    for b, heads, groups, length, new, dim in [(1, 2, 4, 1, 1, 32), (3, 4, 2, 37, 1, 64), (2, 1, 8, 70, 5, 80),
                                               (1, 2, 3, 9, 9, 16)]:
        q = torch.randn(b, new, heads * groups, dim, generator=generator).to(dtype).transpose(1, 2)
        k = torch.randn(b, heads, length, dim, generator=generator).to(dtype)
        v = torch.randn(b, heads, length, dim, generator=generator).to(dtype)
        mask = None
        if masked == "bool":
            mask = torch.rand(b, 1, new, length, generator=generator) > 0.4
            mask[..., 0] = True
        elif masked == "float":
            mask = torch.randn(b, 1, new, length, generator=generator).to(dtype)
        sizes, shape = [b, heads, groups, length, dim], [b, heads * groups, length, dim]
        options = {"attn_mask": mask, "is_causal": causal and new <= length, "scale": 0.2}
        expected = F.scaled_dot_product_attention(q, _repeat(k, groups), _repeat(v, groups), **options)
        got = grouped_attention.grouped_sdpa(q, k, v, sizes, shape, sizes, shape, **options)
        assert torch.equal(got, expected)


def test_sizes_the_repeat_would_refuse_still_fail_as_the_graph_does() -> None:
    q, k = torch.randn(1, 8, 1, 16), torch.randn(1, 2, 5, 16)
    wrong = [1, 2, 4, 6, 16]  # a length the tensor does not have: expand raises, as in the graph
    with pytest.raises(RuntimeError, match="expand"):
        grouped_attention.grouped_sdpa(q, k, k, wrong, [1, 8, 6, 16], wrong, [1, 8, 6, 16])
