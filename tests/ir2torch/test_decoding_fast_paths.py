"""The decoding step's exact fast paths (issue 52): an all-true attention mask made in one op
(:mod:`ir2torch.codegen.causal_mask`), the experts' product as ``torch._grouped_mm`` and size reads
(:mod:`ir2torch.codegen.fast_paths`). Real transformers decoders from small configs: the default rebuild's logits and
cache equal, bit for bit, the rebuild without a folded forward (``fold_constants=False``: none of these paths) and
eager transformers, with the fast paths taken (counted with the profiler, which is no dispatch mode) or not (a
padded batch, a prompt of several tokens)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import ir2torch
from common.caches import forward_cache_name, output_cache_field
from ir2torch.codegen import causal_mask, fast_paths
from ir2torch.codegen.fold_cache import FOLD_ATTR

transformers = pytest.importorskip("transformers")
from transformers import DynamicCache  # noqa: E402

from torch2ir.generation import convert_for_generation  # noqa: E402

_SIZES = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 128, "pad_token_id": 0}
_MODELS: dict[str, Callable[[], nn.Module]] = {
    "llama": lambda: transformers.LlamaForCausalLM(transformers.LlamaConfig(**_SIZES)),
    "qwen2": lambda: transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**_SIZES)),
    "mixtral": lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
        **_SIZES, num_local_experts=4, num_experts_per_tok=2)),
    # soft-capped eager attention: a float mask (all zero) for full and sliding-window layers (window above the pasts)
    "gemma2": lambda: transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**_SIZES, head_dim=16,
                                                                               sliding_window=40)),
    "gpt2": lambda: transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=128, pad_token_id=0)),
}
#: key/value heads of each model's cache (GPT-2 has no grouped heads)
_HEADS = {"gpt2": 4}


@pytest.fixture(scope="module", params=list(_MODELS))
def models(request: pytest.FixtureRequest) -> tuple[str, nn.Module, nn.Module, nn.Module]:
    """(name, eager original, default rebuild, rebuild without a folded forward)."""
    torch.manual_seed(0)
    original = _MODELS[request.param]().eval()
    ir = convert_for_generation(original)
    state = original.state_dict()
    return (request.param, original, ir2torch.convert(ir, state),
            ir2torch.convert(ir, state, fold_constants=False))


def _step(model: nn.Module, batch: int, past: int, new: int, padded: bool, heads: int, layout: Any = None, *,
          eager: bool) -> tuple[Any, ...]:
    """One decoding step of ``model`` on a past of ``past`` tokens (seeded), as ``generate()`` calls it (a rebuild's
    cache has the layers of config ``layout``: plain ones when it is None)."""
    generator = torch.Generator().manual_seed(past * 10 + batch)
    config = model.config if eager else layout
    layers, dim = 2, 16
    keys = [torch.randn(batch, heads, past, dim, generator=generator) for _ in range(layers)]
    values = [torch.randn(batch, heads, past, dim, generator=generator) for _ in range(layers)]
    cache = DynamicCache(config=config) if config is not None else DynamicCache()
    for i in range(layers):
        cache.update(keys[i], values[i], i)
    ids = torch.randint(3, 100, (batch, new), generator=generator)
    mask = torch.ones(batch, past + new, dtype=torch.long)
    if padded:
        mask[1:, : max(past // 2, 1)] = 0
    position = (mask.cumsum(-1) - 1).clamp(min=0)[:, past:]
    with torch.inference_mode():
        out = model(input_ids=ids, **{forward_cache_name(model): cache}, position_ids=position, attention_mask=mask,
                    logits_to_keep=1)
    returned = getattr(out, output_cache_field(out))
    return (out.logits, *[t for layer in returned.layers for t in (layer.keys, layer.values)])


def _layout(models: Any) -> Any:
    """The config whose cache layers a rebuild takes: Gemma-2's (sliding and full layers), plain ones otherwise."""
    return models[1].config if models[0] == "gemma2" else None


def _ops(model: nn.Module, *args: Any) -> dict[str, int]:
    """How many times each operator ran in a step of ``model`` (the profiler: no dispatch mode)."""
    with torch.profiler.profile() as prof:
        _step(model, *args, eager=False)
    return {e.key: e.count for e in prof.key_averages()}


@pytest.mark.parametrize(("batch", "past", "new", "padded"), [(1, 9, 1, False), (3, 20, 1, False),
                                                              (2, 9, 1, True), (1, 5, 3, False)])
def test_step_equals_unoptimised_and_eager(models: Any, batch: int, past: int, new: int, padded: bool) -> None:
    name, original, rebuilt, unfolded = models
    args = (batch, past, new, padded, _HEADS.get(name, 2), _layout(models))
    fast = _step(rebuilt, *args, eager=False)
    assert all(torch.equal(a, b) for a, b in zip(fast, _step(unfolded, *args, eager=False), strict=True))
    eager = _step(original, *args, eager=True)
    skipped = new == 1 and not padded
    # where the mask is built, the traced attention differs from eager's in the last bits (docs/generation.md)
    assert torch.equal(fast[0], eager[0]) if skipped else torch.allclose(fast[0], eager[0], rtol=0, atol=1e-6)
    ops = _ops(rebuilt, *args)
    assert ("aten::le" not in ops) is skipped  # the mask's causal comparison: built only when it is not skipped
    assert ("aten::le" in _ops(unfolded, *args))
    # the attention modules read their sizes without the dispatcher (Gemma-2's eager attention, Mixtral's MoE blocks
    # and GPT-2's attention and Conv1D modules too: a folded forward for their fast entries alone,
    # fast_paths.MIN_ENTRIES); only the root's one read goes through the dispatcher (with 4: 21 for GPT-2, 5 Mixtral)
    assert ops.get("aten::sym_size", 0) <= 1, ops
    if name == "mixtral":
        assert ops.get("aten::_grouped_mm", 0) == 2 * 2, ops  # two products a layer, as eager runs them
        assert "transformers::grouped_mm_fallback" in _ops(unfolded, *args)


def test_skip_forward_equals_folded_forward_over_sizes(models: Any) -> None:
    """The module building the mask, run both ways on the same inputs: equal outputs wherever the skip applies; it
    does not apply to a mask with a zero, a prompt of two tokens, a mask shorter than the keys (indexing it
    raises), a complex mask or a call with other arguments. A longer mask applies: the ops read its first columns."""
    name, _, rebuilt, _ = models
    module = rebuilt.transformer if name == "gpt2" else rebuilt.model
    plan = module.__dict__[FOLD_ATTR].plan
    assert plan.skip is not None
    names = [n.name for n in module.graph.nodes if n.op == "placeholder"]
    heads = _HEADS.get(name, 2)
    checked = 0
    with torch.inference_mode():
        for batch, past in itertools.product((1, 2, 4), (0, 1, 7, 31)):
            generator = torch.Generator().manual_seed(batch * 100 + past)
            ids = torch.randint(3, 100, (batch, 1), generator=generator)
            caches = [torch.randn(batch, heads, past, 16, generator=generator) for _ in names]

            def call(ids: torch.Tensor, mask: torch.Tensor, past: int = past, caches: list = caches) -> tuple:
                by_name = {"input_ids": ids, "attention_mask": mask, "sym_size": past,
                           "position_ids": torch.full(ids.shape, past)}
                return tuple(next((v for k, v in by_name.items() if k in n), c) for n, c in zip(names, caches))

            args = call(ids, torch.ones(batch, past + 1, dtype=torch.long))
            assert plan.skip.applies(args, {})
            module.__dict__[FOLD_ATTR].ready(module)
            made = plan.skip.forward(module, *args)
            built = plan.forward(module, *args)
            assert all(torch.equal(a, b) and a.stride() == b.stride() for a, b in zip(made, built, strict=True)), \
                (name, batch, past)
            checked += 1
            wrong = call(ids, torch.ones(batch, past, dtype=torch.long))  # too short: indexing it raises
            zeros = call(ids, torch.zeros(batch, past + 1, dtype=torch.long))
            prompt = call(torch.randint(3, 100, (batch, 2), generator=generator),
                          torch.ones(batch, past + 2, dtype=torch.long))
            complex_mask = call(ids, torch.ones(batch, past + 1, dtype=torch.complex64))
            assert not any(plan.skip.applies(a, {}) for a in (wrong, zeros, prompt, complex_mask))
            assert not plan.skip.applies(args[:-1], {}) and not plan.skip.applies(args, {"x": 1})
            longer = call(ids, torch.ones(batch, past + 2, dtype=torch.long))
            assert plan.skip.applies(longer, {})
            made, built = plan.skip.forward(module, *longer), plan.forward(module, *longer)
            assert all(torch.equal(a, b) and a.stride() == b.stride() for a, b in zip(made, built, strict=True))
            if name == "gemma2":  # the sliding window's mask is all true while the past is below the window - 1
                last, beyond = (call(ids, torch.ones(batch, n + 1, dtype=torch.long), n, [
                    torch.randn(batch, heads, n, 16, generator=generator) for _ in names]) for n in (39, 40))
                assert plan.skip.applies(last, {}) and not plan.skip.applies(beyond, {})
                made, built = plan.skip.forward(module, *last), plan.forward(module, *last)
                assert all(torch.equal(a, b) and a.stride() == b.stride() for a, b in zip(made, built, strict=True))
    assert checked == 12


def test_all_true_equals_built_mask_layout() -> None:
    """What the mask ops give for an unpadded decoding step (transformers' own sdpa mask, as traced) is the
    contiguous all-true tensor :func:`causal_mask.all_true` makes: values, dtype, shape and strides."""
    from transformers.masking_utils import sdpa_mask

    for batch, past in itertools.product((1, 2, 5), (0, 3, 40)):
        built = sdpa_mask(batch_size=batch, q_length=1, kv_length=past + 1, q_offset=past,
                          attention_mask=torch.ones(batch, past + 1, dtype=torch.bool), allow_is_causal_skip=False)
        made = causal_mask.all_true(((batch, ()), (1, ()), (1, ()), (past + 1, ())))
        assert torch.equal(built, made) and built.stride() == made.stride() and built.dtype == made.dtype


def test_grouped_mm_equals_the_operator() -> None:
    """``fast_paths.grouped_mm`` gives the operator's tensor bit for bit, through ``torch._grouped_mm`` where that is
    exact and through the checked operator otherwise; bad offsets are refused as before."""
    import random

    import transformers.integrations.moe  # noqa: F401 - registers the operator (alone, no model built it yet)

    op = torch.ops.transformers.grouped_mm_fallback.default
    rng = random.Random(0)
    fast_cases = 0
    for _ in range(150):
        experts, k, n = rng.choice([2, 4, 8]), rng.choice([8, 64]), rng.choice([4, 6, 16, 128])
        rows = rng.choice([1, 2, 3, 9])
        dtype = rng.choice([torch.float32, torch.bfloat16, torch.float16])
        counts = [0] * experts
        for _ in range(rows):
            counts[rng.randrange(experts)] += 1
        offs = torch.tensor(counts).cumsum(0).to(rng.choice([torch.int32, torch.int32, torch.int64]))
        weight = torch.randn(experts, n, k, dtype=dtype).transpose(-2, -1) if rng.random() < 0.7 else \
            torch.randn(experts, k, n, dtype=dtype)
        x = torch.randn(rows, k, dtype=dtype)
        fast_cases += fast_paths._as_aten(x, weight, offs)
        assert torch.equal(fast_paths.grouped_mm(x, weight, offs), op(x, weight, offs))
    assert fast_cases > 50
    x, weight = torch.randn(3, 8), torch.randn(2, 8, 4)
    short = torch.tensor([1, 2], dtype=torch.int32)  # the last row is no group's: the operator leaves it zero
    assert not fast_paths._as_aten(x, weight, short)
    assert torch.equal(fast_paths.grouped_mm(x, weight, short), op(x, weight, short))
    with pytest.raises(RuntimeError, match="refused before it runs"):
        fast_paths.grouped_mm(x, weight, torch.tensor([2, 1], dtype=torch.int32))


def test_tensor_size_equals_the_operator() -> None:
    t = torch.zeros(2, 3, 5)
    for dim in (0, 1, 2, -1, -3):
        assert fast_paths.tensor_size(t, dim) == torch.ops.aten.sym_size.int(t, dim)
    for call in (fast_paths.tensor_size, torch.ops.aten.sym_size.int):
        with pytest.raises(IndexError):
            call(t, 3)


def test_step_calls_indexing_and_slicing_through_the_fast_entries(models: Any, monkeypatch: Any) -> None:
    """In a decoding step, the folded forwards call ``aten.index.Tensor`` and ``aten.slice.Tensor`` through
    :mod:`ir2torch.codegen.fast_paths`' entries, not ``OpOverload.__call__`` (the root, which has no folded
    forward, slices its last hidden state: 1); the unoptimised rebuild calls them all through it."""
    name, _, rebuilt, unfolded = models
    calls: dict[str, int] = {}
    call = torch._ops.OpOverload.__call__

    def counted(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        calls[str(self)] = calls.get(str(self), 0) + 1
        return call(self, *args, **kwargs)

    args, layout = (1, 9, 1, False, _HEADS.get(name, 2)), _layout(models)
    _step(rebuilt, *args, layout, eager=False)  # a fresh rebuild's first call computes its folded values
    monkeypatch.setattr(torch._ops.OpOverload, "__call__", counted)
    _step(rebuilt, *args, layout, eager=False)
    assert calls.get("aten.index.Tensor", 0) == 0, calls
    # Gemma-2's eager attention modules too: a folded forward for their fast entries alone (fast_paths.MIN_ENTRIES).
    # The root has no folded forward (3 fast entries): it slices its last hidden state, and Gemma-2's root also
    # the sliding layer's past keys and values to the window (``[:, :, -39:]``)
    assert calls.get("aten.slice.Tensor", 0) <= (3 if name == "gemma2" else 1), calls
    calls.clear()
    _step(unfolded, *args, layout, eager=False)
    if name == "mixtral":
        assert calls.get("aten.index.Tensor", 0) >= 2 * 3, calls  # the experts' three gathers a layer (and the mask's)
    if name != "gpt2":
        assert calls.get("aten.slice.Tensor", 0) >= 2 * 4, calls  # the rotary halves of queries and keys


def test_step_casts_to_the_dtype_a_tensor_has_dispatch_nothing(models: Any, monkeypatch: Any) -> None:
    """The RMS norms' two casts to the dtype their input already has (``aten.to.dtype``) run as the tensor itself in
    the folded forwards (:func:`ir2torch.codegen.fast_paths.to_dtype`): a step dispatches at least two ``aten::to`` a
    norm fewer than the same rebuild built without that entry, with equal logits and caches."""
    name, original, rebuilt, _ = models
    norms = sum(type(m).__name__ in ("LlamaRMSNorm", "Qwen2RMSNorm", "MixtralRMSNorm") for m in original.modules())
    torch.manual_seed(0)
    ir = convert_for_generation(original)
    with monkeypatch.context() as patch:
        patch.setattr(fast_paths, "_TO_DTYPE", object())  # no node is the overload: the entry is never made
        without = ir2torch.convert(ir, original.state_dict())
    args = (1, 9, 1, False, _HEADS.get(name, 2), _layout(models))
    fast, plain = _step(rebuilt, *args, eager=False), _step(without, *args, eager=False)  # (folded values computed)
    assert all(torch.equal(a, b) for a, b in zip(fast, plain, strict=True))
    fewer = _ops(without, *args).get("aten::to", 0) - _ops(rebuilt, *args).get("aten::to", 0)
    assert fewer >= 2 * norms, (name, norms, fewer)
    assert norms == (0 if name in ("gpt2", "gemma2") else 5)  # 2 layers of 2 norms, and the final one
