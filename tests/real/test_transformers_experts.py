"""transformers' eager experts loops traced exactly (issue 49: LongCat-Flash, the OpenAI privacy filter).

Both loop over the experts some token was routed to, a tensor of data-dependent length ``torch.export`` cannot
trace: plain export fails, and ``opaque="auto"`` kept the experts opaque (94.7 % and 79.5 % of the parameters in
the opaque sweep). While a conversion exports, a reviewed source runs its traceable form
(``torch2ir.frontend.transformers_experts``): every expert in order, an expert with no token adding nothing. The
experts are then graphs, exact against eager on every routing (random ones, experts with no token, every token to
one expert), in eval and train mode, with their gradients; rebuilt with no ``allow=``, lowered and executed equal,
and the loop closes. Another source is not decided: it stays opaque.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from torch2ir.frontend import transformers_experts

tf = pytest.importorskip("transformers")

T, H, K = 7, 16, 2


def _longcat_experts() -> tuple[torch.nn.Module, int]:
    from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashExperts

    config = tf.LongcatFlashConfig(hidden_size=H, expert_ffn_hidden_size=8, n_routed_experts=4, zero_expert_num=2,
                                   moe_topk=K)
    return LongcatFlashExperts(config), 6  # 4 routed experts and 2 identity ("zero") experts


def _privacy_experts() -> tuple[torch.nn.Module, int]:
    from transformers.models.openai_privacy_filter.modeling_openai_privacy_filter import OpenAIPrivacyFilterExperts

    config = tf.OpenAIPrivacyFilterConfig(hidden_size=H, intermediate_size=8, num_local_experts=4,
                                          num_experts_per_tok=K)
    config._experts_implementation = "eager"  # what its model chooses
    return OpenAIPrivacyFilterExperts(config), 4


EXPERTS = {"longcat_flash": _longcat_experts, "openai_privacy_filter": _privacy_experts}


def _routings(experts: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    random = [torch.stack([torch.randperm(experts, generator=g)[:K] for _ in range(T)]) for _ in range(2)]
    two = torch.tensor([[0, 1]] * T)  # the other experts get no token
    last_first = torch.tensor([[experts - 1, 0]] * T)
    one = torch.full((T, K), 1)  # every token (both slots) to one expert
    return [*random, two, last_first, one]


def _run(module: torch.nn.Module, x: torch.Tensor, index: torch.Tensor, w: torch.Tensor) -> list:
    module.zero_grad(set_to_none=True)
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    y = module(x, index, w)
    y.backward(torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape).sin())
    return [y.detach(), x.grad, w.grad, *(p.grad for _, p in sorted(module.named_parameters()))]


@pytest.mark.parametrize("name", list(EXPERTS))
def test_the_experts_trace_exactly_on_every_routing(name: str) -> None:
    torch.manual_seed(0)
    experts, count = EXPERTS[name]()
    experts.eval()
    with torch.no_grad():
        for p in experts.parameters():
            p.normal_()
    args = (torch.randn(T, H), _routings(count, 0)[0], torch.rand(T, K))
    with pytest.raises(Exception, match="data-dependent"):  # the eager loop does not trace
        torch.export.export(experts, args, strict=False)
    ir = torch2ir.convert(experts, args)
    assert ir.capture.opaque == [] and ir.root.type == "module"
    rebuilt = ir2torch.convert(ir, experts.state_dict())  # no allow=: the default surface and run-time checks
    executed = ir2torch.convert(ir.lower(), experts.state_dict())
    for seed in range(3):
        for index in _routings(count, seed):
            x, w = torch.randn(T, H), torch.rand(T, K)
            for training in (False, True):
                experts.train(training)
                rebuilt.train(training)
                expected, got = _run(experts, x, index, w), _run(rebuilt, x, index, w)
                assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True)), (seed, index, training)
            experts.eval()
            with torch.no_grad():
                assert torch.equal(executed(x, index, w), experts(x, index, w))
    rebuilt.eval()
    assert torch2ir.convert(rebuilt, args) == ir


def _model(name: str) -> tuple[torch.nn.Module, dict]:
    from benchmarks.sweep_transformers import _small

    config = _small(name)
    if name == "longcat_flash":
        config.zero_expert_num = 2  # the default's 256 identity experts trace as 256 loop bodies per layer
    torch.manual_seed(0)
    model = tf.AutoModel.from_config(config).eval()
    return model, {"input_ids": torch.randint(0, 100, (2, 8))}


def _bias(model: torch.nn.Module, name: str) -> torch.Tensor:
    router = model.layers[0].mlp.router
    return router.e_score_correction_bias if name == "longcat_flash" else router.bias


def _outputs(module: torch.nn.Module, kwargs: dict) -> list:
    with torch.no_grad():
        return [t for t in pytree.tree_leaves(module(**kwargs)) if isinstance(t, torch.Tensor)]


@pytest.mark.parametrize("name", list(EXPERTS))
def test_the_models_convert_whole_with_and_without_opaque(name: str) -> None:
    model, kwargs = _model(name)
    with pytest.raises(Exception, match="data-dependent"):
        torch.export.export(model, (), kwargs, strict=False)
    ir = torch2ir.convert(model, (), kwargs)
    assert ir.capture.opaque == [] and ir["layers.0.mlp.experts"].type == "module"
    auto = torch2ir.convert(model, (), kwargs, opaque="auto")
    assert auto.capture.opaque == []  # nothing left for opaque="auto" to keep
    rebuilt = ir2torch.convert(ir, model.state_dict())
    flat = ir2torch.convert(ir.lower(), model.state_dict())
    rebuilt_auto = ir2torch.convert(auto, model.state_dict())
    for routed in (None, 0, 3):  # the router's own choice; then a bias sends every token's first slot to one expert
        if routed is not None:
            with torch.no_grad():
                _bias(model, name).zero_()[routed] = 1e4
            for module in (rebuilt, flat, rebuilt_auto):
                module.load_state_dict(model.state_dict())
        expected = _outputs(model, kwargs)
        for got in (_outputs(rebuilt, kwargs), _outputs(flat, kwargs), _outputs(rebuilt_auto, kwargs)):
            assert len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))
    model, kwargs = _model(name)
    assert torch2ir.convert(ir2torch.convert(ir, model.state_dict()), (), kwargs) == ir


def test_another_source_is_not_decided_and_stays_opaque(monkeypatch: pytest.MonkeyPatch) -> None:
    from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashExperts

    model, kwargs = _model("longcat_flash")
    original = LongcatFlashExperts.forward
    site = transformers_experts.SITES[0]
    assert transformers_experts.reviewed(site) is not None

    def forward(self, hidden_states, top_k_index, top_k_weights):  # another source, the same computation
        return original(self, hidden_states, top_k_index, top_k_weights)

    monkeypatch.setattr(LongcatFlashExperts, "forward", forward)
    assert transformers_experts.reviewed(site) is None
    ir = torch2ir.convert(model, (), kwargs, opaque="auto")
    opaque = [path for path, _, _ in ir.capture.opaque]
    assert "layers.0.mlp.experts" in opaque and "layers.1.mlp.experts" in opaque
    assert LongcatFlashExperts.forward is forward  # put back as it was


def test_the_forwards_are_put_back_after_a_conversion() -> None:
    # the classes imported here: the sites are looked up in the modules already imported (alone, or first in a
    # worker, this test would find LongCat-Flash's module not imported yet)
    from transformers.models.longcat_flash.modeling_longcat_flash import LongcatFlashExperts  # noqa: F401
    from transformers.models.openai_privacy_filter.modeling_openai_privacy_filter import OpenAIPrivacyFilterExperts
    from transformers.models.switch_transformers.modeling_switch_transformers import (  # noqa: F401
        SwitchTransformersExperts,
    )

    held = {site.cls: transformers_experts.reviewed(site) for site in transformers_experts.SITES}
    assert all(v is not None for v in held.values())
    dispatcher = OpenAIPrivacyFilterExperts.forward
    model, kwargs = _model("openai_privacy_filter")
    with transformers_experts.traced_experts():
        inside = transformers_experts.reviewed(transformers_experts.SITES[1])
        assert inside is None  # the stand-in holds the dispatcher's cell: its source is not the reviewed one
    torch2ir.convert(model, (), kwargs)
    assert OpenAIPrivacyFilterExperts.forward is dispatcher
    assert {site.cls: transformers_experts.reviewed(site)[0] for site in transformers_experts.SITES} == \
        {k: v[0] for k, v in held.items()}
