"""Switch Transformers and LongT5 traced whole (issue 49: Switch Transformers had the largest opaque share, 29.8 %
at the default dimensions, its stacks opaque).

Their stacks build the all-ones mask of an unmasked call only when ``not is_torchdynamo_compiling()``, so plain
``torch.export`` subscripts ``None`` (or reads its ``shape``); Switch Transformers' router also moves its
classifier to its own dtype inside ``forward`` (a call export cannot trace) and its experts loop over the experts
hit (a data-dependent length). While a conversion exports, reviewed sources answer ``is_torchdynamo_compiling()``
as eager mode does (``torch2ir.frontend.transformers_compiling``), the router skips that ``to`` when it changes
nothing and the experts run every expert in order (``torch2ir.frontend.experts_forwards``): both models convert
whole, by default and with ``opaque="auto"``, exact against eager on every routing (experts with no token,
every token to one expert, tokens over capacity dropped), with and without a padding mask, and the loop closes.
Another source is not decided: the stacks stay opaque, as before.
"""

from __future__ import annotations

import threading
import warnings

import pytest
import torch
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from torch2ir.frontend import experts_forwards, transformers_compiling

tf = pytest.importorskip("transformers")

SWITCH = "transformers.models.switch_transformers.modeling_switch_transformers"


def _model(name: str, **overrides: object) -> tuple[torch.nn.Module, dict]:
    from benchmarks.sweep_transformers import _small

    config = _small(name)
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    model = tf.AutoModel.from_config(config).eval()
    ids = torch.randint(0, config.vocab_size, (2, 8))
    return model, {"input_ids": ids, "decoder_input_ids": ids.flip(-1)}


def _outputs(module: torch.nn.Module, kwargs: dict) -> list:
    with torch.no_grad():
        return [t for t in pytree.tree_leaves(module(**kwargs)) if isinstance(t, torch.Tensor)]


def _equal(expected: list, got: list) -> bool:
    return len(expected) == len(got) and all(torch.equal(a, b) for a, b in zip(expected, got, strict=True))


def _routers(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__ == "SwitchTransformersTop1Router"]


CASES = {
    "switch_transformers": {"encoder_sparse_step": 1, "decoder_sparse_step": 2},  # every encoder layer sparse
    "switch_transformers-capacity": {"encoder_sparse_step": 1, "expert_capacity": 3},  # tokens over it dropped
    "longt5": {},  # local attention in the encoder
    "longt5-global": {"encoder_attention_type": "transient-global"},
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_stacks_trace_whole_and_exact(case: str) -> None:
    name = case.split("-")[0]
    model, kwargs = _model(name, **CASES[case])
    with pytest.raises(Exception, match="NoneType|Sizes of tensors"):  # plain export builds no mask, uses it
        torch.export.export(model, (), kwargs, strict=False)
    ir = torch2ir.convert(model, (), kwargs)
    auto = torch2ir.convert(model, (), kwargs, opaque="auto")
    assert ir.capture.opaque == [] and auto.capture.opaque == []  # nothing left for opaque="auto" to keep
    assert ir["encoder"].type == "module" and ir["decoder"].type == "module"
    masked = dict(kwargs, attention_mask=torch.tensor([[1] * 8, [1] * 5 + [0] * 3]))  # a padded call
    ir_masked = torch2ir.convert(model, (), masked)
    rebuilt, rebuilt_masked = ir2torch.convert(ir, model.state_dict()), ir2torch.convert(ir_masked, model.state_dict())
    flat = ir2torch.convert(ir.lower(), model.state_dict())
    rebuilt_auto = ir2torch.convert(auto, model.state_dict())
    routings = [None]
    if name == "switch_transformers":
        assert all(ir[f"encoder.block.{i}.layer.1.mlp.experts.expert_{e}"].type == "module"
                   for i in range(2) for e in range(4))
        routings.append("one")
    for routing in routings:  # the router's own choice; then every token to expert 0
        if routing == "one":
            with torch.no_grad():
                for router in _routers(model):
                    router.classifier.weight.zero_()  # equal logits: argmax picks expert 0, the others get none
        for module in (rebuilt, flat, rebuilt_auto, rebuilt_masked):  # the lowered model holds a tied weight once
            assert module.load_state_dict(model.state_dict(), strict=module is not flat).missing_keys == []
        expected = _outputs(model, kwargs)
        assert all(_equal(expected, _outputs(m, kwargs)) for m in (rebuilt, flat, rebuilt_auto)), routing
        assert _equal(_outputs(model, masked), _outputs(rebuilt_masked, masked)), routing
    model, kwargs = _model(name, **CASES[case])
    assert torch2ir.convert(ir2torch.convert(ir, model.state_dict()), (), kwargs) == ir


def test_another_source_is_not_decided_and_the_stacks_stay_opaque(monkeypatch: pytest.MonkeyPatch) -> None:
    model, kwargs = _model("switch_transformers")
    module = __import__(SWITCH, fromlist=["_"])
    original = module.is_torchdynamo_compiling
    assert transformers_compiling.reviewed(SWITCH) is not None
    monkeypatch.setattr(transformers_compiling, "SITES", {SWITCH: frozenset({"0" * 64})})  # another source
    assert transformers_compiling.reviewed(SWITCH) is None
    ir = torch2ir.convert(model, (), kwargs, opaque="auto")
    assert {path for path, _, _ in ir.capture.opaque} >= {"encoder", "decoder"}
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=sorted({c for _, c, _ in ir.capture.opaque}))
    assert _equal(_outputs(model, kwargs), _outputs(rebuilt, kwargs))
    assert module.is_torchdynamo_compiling is original  # never replaced


def test_the_answer_is_eager_modes_in_the_converting_thread_only(monkeypatch: pytest.MonkeyPatch) -> None:
    module = __import__(SWITCH, fromlist=["_"])
    asked: list[str] = []

    def compiling() -> bool:  # the original's eager answer, counted
        asked.append(threading.current_thread().name)
        return False

    monkeypatch.setattr(module, "is_torchdynamo_compiling", compiling)
    with transformers_compiling.eager_answers():
        assert module.is_torchdynamo_compiling is not compiling
        asked.clear()
        assert module.is_torchdynamo_compiling() is False and asked == []  # answered here without the original
        other = threading.Thread(target=module.is_torchdynamo_compiling, name="other")
        other.start()
        other.join()
        assert asked == ["other"]  # another thread asks the original
    assert module.is_torchdynamo_compiling is compiling  # put back
    monkeypatch.setattr(module, "is_torchdynamo_compiling", lambda: True)  # not eager's False: nothing replaced
    assert transformers_compiling.reviewed(SWITCH) is None


def test_the_routers_to_is_skipped_only_when_it_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    linear = torch.nn.Linear(4, 2)
    assert experts_forwards._to_changes_nothing(linear, torch.float32)
    assert not experts_forwards._to_changes_nothing(linear, torch.float64)  # converts: made as the original
    assert not experts_forwards._to_changes_nothing(linear, torch.int64)  # raises: made as the original
    assert not experts_forwards._to_changes_nothing(type("Sub", (torch.nn.Linear,), {})(4, 2), torch.float32)
    monkeypatch.setattr(torch.__future__, "get_swap_module_params_on_conversion", lambda: True)
    assert not experts_forwards._to_changes_nothing(linear, torch.float32)  # to swaps the tensors


def test_the_experts_trace_exactly_on_every_routing() -> None:
    from transformers.models.switch_transformers.modeling_switch_transformers import SwitchTransformersExperts

    torch.manual_seed(0)
    config = tf.SwitchTransformersConfig(d_model=16, d_ff=8, num_experts=4)
    experts = SwitchTransformersExperts(config).eval()
    t = 7

    def routing(index: torch.Tensor) -> torch.Tensor:  # one-hot (tokens, 1, experts); -1: dropped (over capacity)
        return torch.nn.functional.one_hot(index.clamp(min=0), 4).mul((index >= 0)[:, None].long())[:, None]

    args = (torch.randn(t, 16), routing(torch.randint(0, 4, (t,))), torch.rand(t, 1))
    with pytest.raises(Exception, match="data-dependent"):  # the eager loop does not trace
        torch.export.export(experts, args, strict=False)
    ir = torch2ir.convert(experts, args)
    assert ir.capture.opaque == [] and all(ir[f"expert_{e}"].type == "module" for e in range(4))
    rebuilt = ir2torch.convert(ir, experts.state_dict())
    indices = [torch.randint(0, 4, (t,)), torch.tensor([3, 0] * 3 + [3]), torch.full((t,), 2),
               torch.tensor([1, -1, 1, -1, 0, 0, -1])]
    for index in indices:
        for training in (False, True):
            results = []
            for module in (experts, rebuilt):
                module.train(training)
                module.zero_grad(set_to_none=True)
                torch.manual_seed(1)
                x, w = torch.randn(t, 16, requires_grad=True), torch.rand(t, 1, requires_grad=True)
                y = module(x, routing(index), w)
                y.backward(torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape).sin())
                results.append([y.detach(), x.grad, w.grad, *(p.grad for _, p in sorted(module.named_parameters()))])
            outputs = zip(results[0][:3], results[1][:3], strict=True)  # y, x.grad, w.grad
            assert all(torch.equal(a, b) for a, b in outputs), (index, training)
            hit = {f"expert_{e}" for e in index[index >= 0].tolist()}
            names = [n for n, _ in sorted(experts.named_parameters())]
            for name, a, b in zip(names, results[0][3:], results[1][3:], strict=True):
                if name.split(".")[0] in hit:  # an expert some token reached: its gradient, bit for bit
                    assert torch.equal(a, b), (index, training, name)
                else:  # eager never calls it: no gradient; the graph calls it on no token: exact zeros
                    assert a is None and torch.equal(b, torch.zeros_like(b)), (index, training, name)
    rebuilt.eval()
    experts.eval()
    dropped = (torch.randn(t, 16), routing(torch.full((t,), -1)), torch.rand(t, 1))  # every token over capacity
    with torch.no_grad():
        assert torch.equal(rebuilt(*dropped), experts(*dropped))
    assert torch2ir.convert(rebuilt, args) == ir


def test_converting_and_rebuilding_warn_about_the_experts_no_token_reached(tmp_path) -> None:
    """An expert no token reached gets zero gradients from the graph where eager mode leaves ``.grad`` undefined:
    both directions say so, naming the experts layers (the rebuild from a saved file too); a model whose experts
    are parameter tensors (Mixtral) has nothing to say."""
    from common.ir import IR
    from common.notes import UnreachedExpertsWarning

    model, kwargs = _model("switch_transformers", encoder_sparse_step=1, decoder_sparse_step=2)
    with pytest.warns(UnreachedExpertsWarning, match=r"encoder\.block\.0\.layer\.1\.mlp\.experts.*zero gradients"):
        ir = torch2ir.convert(model, (), kwargs)
    ir.save(tmp_path / "switch.json")
    with pytest.warns(UnreachedExpertsWarning, match="Adam"):
        ir2torch.convert(IR.load(tmp_path / "switch.json"), model.state_dict())
    mixtral = tf.MixtralModel(tf.MixtralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                               num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                               num_experts_per_tok=2, vocab_size=50)).eval()
    ids = torch.randint(0, 50, (1, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreachedExpertsWarning)
        ir2torch.convert(torch2ir.convert(mixtral, (ids,)), mixtral.state_dict())
