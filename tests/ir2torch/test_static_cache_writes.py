"""The static cache's writes (``ir2torch.generation._write_all``): the ops ``StaticLayer.update`` and
``StaticSlidingWindowLayer.update`` run, without their per-layer position tensors, where their code was read; the
caches and tokens equal bit for bit those of each layer's own ``update`` (and the original's tokens), and every other
case runs ``update`` (raising what it raises). Tiny Llama (plain layers) and Gemma-2 (sliding-window layers)."""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
import torch

import ir2torch
from ir2torch import generation
from ir2torch.generation import for_generation
from tests.ir2torch.test_generation import _llama, _prompts
from torch2ir.generation import convert_for_generation

transformers = pytest.importorskip("transformers")
from transformers import DynamicCache, StaticCache, StaticLayer, StaticSlidingWindowLayer  # noqa: E402


def _gemma2() -> torch.nn.Module:
    torch.manual_seed(0)
    config = transformers.Gemma2Config(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                       num_key_value_heads=2, head_dim=16, intermediate_size=128, vocab_size=100,
                                       max_position_embeddings=128, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                       sliding_window=40)
    return transformers.Gemma2ForCausalLM(config).eval()


@pytest.fixture(scope="module", params=["llama", "gemma2"])
def models(request: pytest.FixtureRequest) -> tuple[torch.nn.Module, Any]:
    original = _llama() if request.param == "llama" else _gemma2()
    rebuilt = ir2torch.convert(convert_for_generation(original), original.state_dict())
    return original, for_generation(rebuilt, original.config, original.generation_config)


class _Updates:
    """Counts the calls of both static layer classes' ``update`` (the classes themselves are kept)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        for cls in (StaticLayer, StaticSlidingWindowLayer):
            monkeypatch.setattr(cls, "update", self._counted(cls.update))

    def _counted(self, update: Any) -> Any:
        def counted(layer: Any, *args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return update(layer, *args, **kwargs)
        return counted


def _generate(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: int) -> tuple[torch.Tensor, Any]:
    cache = StaticCache(config=model.config, max_cache_len=ids.shape[1] + tokens)
    with torch.inference_mode():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                             do_sample=False, past_key_values=cache, return_dict_in_generate=True,
                             output_logits=True)
    return out, cache


@pytest.mark.parametrize("batch", [1, 3])
def test_static_writes_equal_the_layers_updates(models: Any, batch: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The decoding steps write without ``update`` (the prompt step's layers are not initialized: ``update``
    allocates them); tokens, logits, keys, values and counters equal those of ``update`` at every step (the
    fast writes switched off), and the tokens the original's."""
    original, rebuilt = models
    ids, mask = _prompts(batch, 7)
    updates = _Updates(monkeypatch)
    fast, fast_cache = _generate(rebuilt, ids, mask, 12)
    layers = len(fast_cache.layers)
    assert updates.calls == layers  # the prompt step only
    monkeypatch.setattr(generation, "_static_layers", lambda: None)
    updates.calls = 0
    slow, slow_cache = _generate(rebuilt, ids, mask, 12)
    assert updates.calls == 12 * layers
    assert torch.equal(fast.sequences, slow.sequences)
    assert all(torch.equal(a, b) for a, b in zip(fast.logits, slow.logits, strict=True))
    for a, b in zip(fast_cache.layers, slow_cache.layers, strict=True):
        assert type(a) is type(b) and torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
        assert torch.equal(a.cumulative_length, b.cumulative_length)
        assert getattr(a, "cumulative_length_int", None) == getattr(b, "cumulative_length_int", None)
    expected, _ = _generate(original, ids, mask, 12)
    assert torch.equal(fast.sequences, expected.sequences)


def _filled(config: Any, seen: int, new: int) -> tuple[Any, list[Any]]:
    """A ``StaticCache`` of ``config`` holding ``seen`` tokens, and the layers of a returned ``DynamicCache`` holding
    those and ``new`` more (seeded)."""
    generator = torch.Generator().manual_seed(seen)
    cache = StaticCache(config=config, max_cache_len=seen + new + 2)
    full = DynamicCache(config=config)
    for i, layer in enumerate(cache.layers):
        keys, values = (torch.randn(2, 2, seen + new, 16, generator=generator) for _ in range(2))
        layer.update(keys[:, :, :seen], values[:, :, :seen])
        full.update(keys, values, i)
    return cache, full.layers


def _ops(call: Any) -> dict[str, int]:
    """The ATen ops ``call()`` dispatches from Python (not those an ATen op calls)."""
    with torch.profiler.profile() as prof:
        call()
    counts: dict[str, int] = {}
    for event in prof.events():
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if event.name.startswith("aten::") and parent is None:
            counts[event.name] = counts.get(event.name, 0) + 1
    return counts


@pytest.mark.parametrize("make", [_llama, _gemma2])
def test_write_all_runs_updates_ops_with_one_position_tensor(make: Any) -> None:
    """Equal caches to the updates', with one ``arange`` for all layers and no ``add`` (``update``: an ``arange``
    and an ``add`` a layer) or ``slice`` through indexing."""
    config = make().config
    for seen, new in ((5, 1), (3, 2)):
        cache, returned = _filled(config, seen, new)
        expected = copy.deepcopy(cache)
        for layer, source in zip(expected.layers, returned, strict=True):
            layer.update(source.keys[:, :, -new:], source.values[:, :, -new:])
        ops = _ops(functools.partial(generation._write_all, cache.layers, returned, seen, new))
        layers = len(cache.layers)
        assert ops.get("aten::arange") == 1 and "aten::add" not in ops and "aten::slice" not in ops, ops
        assert ops["aten::index_copy_"] == 2 * layers, ops
        for a, b in zip(cache.layers, expected.layers, strict=True):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
            assert torch.equal(a.cumulative_length, b.cumulative_length)
            assert getattr(a, "cumulative_length_int", None) == getattr(b, "cumulative_length_int", None)


def test_write_all_runs_update_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sliding layer whose counter tensor is not at its count, an uninitialized layer, fewer returned tokens than
    new ones, or an unread transformers release: ``update`` runs for that layer, and raises what it raises (another
    dtype: ``index_copy_``'s error, the same either way)."""
    config = _gemma2().config
    updates = _Updates(monkeypatch)
    cache, returned = _filled(config, 4, 1)
    sliding = next(i for i, layer in enumerate(cache.layers) if type(layer) is StaticSlidingWindowLayer)
    cache.layers[sliding].cumulative_length.add_(1)  # off its count: update writes where its tensor says
    updates.calls = 0
    generation._write_all(cache.layers, returned, 4, 1)
    assert updates.calls == 1
    assert torch.equal(cache.layers[sliding].keys[:, :, 5], returned[sliding].keys[:, :, -1])
    short = [copy.copy(layer) for layer in returned]
    short[0].keys = short[0].keys[:, :, :0]  # no token: update's index_copy_ refuses it
    cache, _ = _filled(config, 4, 1)
    updates.calls = 0
    with pytest.raises(IndexError):
        generation._write_all(cache.layers, short, 4, 1)
    assert updates.calls == 1
    wrong = [copy.copy(layer) for layer in returned]
    wrong[0].keys = wrong[0].keys.double()
    errors = []
    for _ in range(2):  # the fast writes, then update alone: the same error
        cache, _ = _filled(config, 4, 1)
        with pytest.raises(RuntimeError) as error:
            generation._write_all(cache.layers, wrong, 4, 1)
        errors.append((type(error.value), str(error.value)))
        monkeypatch.setattr(generation, "_static_layers", lambda: None)
    assert errors[0] == errors[1], errors
    empty = StaticCache(config=config, max_cache_len=8)
    updates.calls = 0
    generation._write_all(empty.layers, returned, 0, 5)  # not initialized: update allocates them
    assert updates.calls == len(empty.layers)
