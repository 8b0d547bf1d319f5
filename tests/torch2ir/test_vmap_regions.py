"""``torch.vmap`` inside a forward is carried as the batched operators it dispatches
(:mod:`torch2ir.frontend.vmap_regions`): transformers builds an attention mask this way whenever a model passes a
custom mask function (UnlimitedOCR's reference sliding window), which was refused before."""

from __future__ import annotations

import pytest
import torch
from torch import fx, nn
from torch.export import Dim

import ir2torch
import torch2ir
from common.errors import ConversionError
from tests.helpers import max_abs_diff
from torch2ir.frontend.vmap_regions import regions, unbatch


def _causal(b, h, q, kv):  # transformers' mask functions' form
    return kv <= q


def _window(b, h, q, kv):
    return q - kv < 3


def _both(b, h, q, kv):
    return _causal(b, h, q, kv) & _window(b, h, q, kv)


def _expanded(function):  # what masking_utils._vmap_expansion_sdpa does
    for dims in [(None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)]:
        function = torch.vmap(function, in_dims=dims, out_dims=0)
    return function


class _MaskedAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.out = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        mask = _expanded(_both)(torch.arange(b), torch.arange(1), torch.arange(n), torch.arange(n))
        q, k, v = self.qkv(x).unsqueeze(1).chunk(3, -1)
        return self.out(nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask).squeeze(1))


def _targets(ir: torch2ir.IR) -> list[str]:
    return [str(data.get("target", "")) for impl in ir.values() for _, data in impl.graph.nodes(data=True)]


def test_a_vmapped_mask_converts_exactly_closes_the_loop_and_lowers() -> None:
    model, x = _MaskedAttention().eval(), torch.randn(2, 6, 8)
    ir = torch2ir.convert(model, (x,))
    assert not any("functorch" in t or "vmap" in t or "batch_dim" in t for t in _targets(ir))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert max_abs_diff(rebuilt(x), model(x)) == 0
    assert torch2ir.convert(rebuilt, (x,)) == ir
    flat = ir.lower()
    assert max_abs_diff(ir2torch.convert(flat, model)(x), model(x)) == 0


def test_a_vmapped_mask_keeps_its_symbolic_sizes() -> None:
    model, x = _MaskedAttention().eval(), torch.randn(2, 6, 8)
    ir = torch2ir.convert(model, (x,), dynamic_shapes={"x": {1: Dim("n", min=2, max=64)}})
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for n in (2, 6, 11, 64):
        x = torch.randn(2, n, 8)
        assert max_abs_diff(rebuilt(x), model(x)) == 0, n


def test_in_the_training_graph_too() -> None:
    model, x = _MaskedAttention().train(), torch.randn(2, 6, 8, requires_grad=True)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict()).train()
    got, want = rebuilt(x), model(x)
    assert max_abs_diff(got, want) == 0
    (g_got,) = torch.autograd.grad(got.sum(), x)
    (g_want,) = torch.autograd.grad(want.sum(), x)
    assert max_abs_diff(g_got, g_want) == 0


class _VmappedLayer(nn.Module):
    """A module call inside ``torch.vmap``: the region is two modules' code, not one graph's."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.vmap(lambda row: self.proj(row).relu())(x)


def test_a_vmapped_module_call_is_still_refused_naming_vmap() -> None:
    model, x = _VmappedLayer().eval(), torch.randn(3, 4)
    with pytest.raises(ConversionError, match=r"torch\.vmap") as info:
        torch2ir.convert(model, (x,))
    assert "root" in str(info.value)


def test_unbatch_replaces_only_closed_regions_and_leaves_an_unclosed_one() -> None:
    model, x = _MaskedAttention().eval(), torch.randn(2, 6, 8)
    ep = torch.export.export(model, (x,), strict=False)
    assert len(regions(ep.graph_module.graph)) == 1
    graph = fx.Graph()  # an increment without its decrement (what a hand-edited graph could hold)
    size = graph.placeholder("size")
    graph.call_function(torch._functorch.predispatch._vmap_increment_nesting, (size, "error"))
    graph.output(size)
    assert regions(graph) == []
    assert unbatch(ep) == 1
    assert regions(ep.graph_module.graph) == []
    assert not any("functorch" in (getattr(n.target, "__module__", "") or "") for n in ep.graph_module.graph.nodes)
    assert max_abs_diff(ep.module()(x), model(x)) == 0


def test_a_transformers_model_with_a_custom_mask_function_converts() -> None:
    """UnlimitedOCR's text model passes an ``or_mask_function``, so transformers builds its mask with ``torch.vmap``
    (it was refused); small random config, no download."""
    modeling = pytest.importorskip("transformers.models.unlimited_ocr.modeling_unlimited_ocr")
    from transformers import UnlimitedOcrTextConfig

    config = UnlimitedOcrTextConfig(vocab_size=64, hidden_size=32, intermediate_size=48, moe_intermediate_size=16,
                                    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                    head_dim=8, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                                    mlp_layer_types=["dense", "sparse"], max_position_embeddings=64,
                                    layer_types=["reference_sliding_attention"] * 2, sliding_window=4)
    torch.manual_seed(0)
    model = modeling.UnlimitedOcrTextModel(config).eval()  # its reference sliding-window cache is not a pytree
    config.use_cache = False
    ids = torch.randint(0, 64, (1, 9))
    ir = torch2ir.convert(model, (), {"input_ids": ids})
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert max_abs_diff(rebuilt(input_ids=ids).last_hidden_state, model(input_ids=ids).last_hidden_state) == 0
    assert torch2ir.convert(rebuilt, (), {"input_ids": ids}) == ir


class _MaskMaker(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[1]
        return _expanded(_both)(torch.arange(x.shape[0]), torch.arange(1), torch.arange(n), torch.arange(n))


class _UsesMask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.masks = _MaskMaker()
        self.proj = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mask = self.masks(x)
        return self.proj(x).masked_fill(~mask[:, 0, :, :1], 0.0), mask


def test_a_region_computing_a_modules_or_the_models_output_keeps_the_signatures() -> None:
    """A region's value that a preserved module call returns, or the model returns, is named in the program's
    signatures: they name the new nodes."""
    model, x = _UsesMask().eval(), torch.randn(2, 6, 8)
    ir = torch2ir.convert(model, (x,))
    assert "masks" in ir
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for got, want in zip(rebuilt(x), model(x)):
        assert max_abs_diff(got, want) == 0
    assert torch2ir.convert(rebuilt, (x,)) == ir
