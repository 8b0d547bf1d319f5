"""``generate()`` on a rebuilt decoder (``torch2ir.generation`` / ``ir2torch.generation``), against the original
transformers model's own ``generate()``: a tiny Llama here, the other decoders in ``tests/real/test_generate.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import ir2torch
import torch2ir
from common.caches import UnsupportedCacheError
from common.errors import BuildError, ConversionError, IRError, IRFormatError
from common.ir import IR
from common.treespec import load_spec
from ir2torch.generation import for_generation
from torch2ir.generation import convert_for_generation


def _llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=100, max_position_embeddings=128, pad_token_id=0,
                         bos_token_id=1, eos_token_id=2)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Any]:
    """The original and its rebuild for generation, through a saved file (the cache class is read from it)."""
    original = _llama()
    path = Path(tmp_path_factory.mktemp("generate")) / "llama.ir.json"
    convert_for_generation(original).save(path)
    rebuilt = ir2torch.convert(IR.load(path), original.state_dict())
    return original, for_generation(rebuilt, original.config, original.generation_config)


def _prompts(batch: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(batch * 100 + length)
    ids = torch.randint(3, 100, (batch, length), generator=generator)
    mask = torch.ones_like(ids)
    for row in range(1, batch):
        mask[row, : row * 2] = 0  # left padding, a different amount per row
    ids[mask == 0] = 0
    return ids, mask


def _greedy(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: int) -> torch.Tensor:
    with torch.inference_mode():
        return model.generate(ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                              do_sample=False)


def test_single_prompt_gives_the_original_tokens(llama: tuple[torch.nn.Module, Any]) -> None:
    original, rebuilt = llama
    ids, mask = _prompts(1, 7)
    expected = _greedy(original, ids, mask, 20)
    assert expected.shape == (1, 27)
    assert torch.equal(_greedy(rebuilt, ids, mask, 20), expected)


def test_padded_batch_gives_the_original_tokens(llama: tuple[torch.nn.Module, Any]) -> None:
    original, rebuilt = llama
    ids, mask = _prompts(3, 9)
    expected = _greedy(original, ids, mask, 20)
    assert torch.equal(_greedy(rebuilt, ids, mask, 20), expected)


def test_generation_without_attention_mask(llama: tuple[torch.nn.Module, Any]) -> None:
    original, rebuilt = llama
    ids, _ = _prompts(1, 5)
    with torch.inference_mode():
        expected = original.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
        assert torch.equal(rebuilt.generate(ids, max_new_tokens=16, min_new_tokens=16, do_sample=False), expected)


def test_beam_search_and_sampling_give_the_original_tokens(llama: tuple[torch.nn.Module, Any]) -> None:
    """generate()'s own strategies run on the rebuild's logits and caches (beam search reorders the cache)."""
    original, rebuilt = llama
    ids, mask = _prompts(2, 8)
    with torch.inference_mode():
        beams = original.generate(ids, attention_mask=mask, max_new_tokens=16, num_beams=3, do_sample=False)
        assert torch.equal(rebuilt.generate(ids, attention_mask=mask, max_new_tokens=16, num_beams=3,
                                            do_sample=False), beams)
        torch.manual_seed(7)
        sampled = original.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=True, top_k=20)
        torch.manual_seed(7)
        assert torch.equal(rebuilt.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=True, top_k=20),
                           sampled)


def test_the_config_passed_is_not_changed() -> None:
    original = _llama()
    before = original.config.to_dict()
    rebuilt = ir2torch.convert(convert_for_generation(original), original.state_dict())
    wrapper = for_generation(rebuilt, original.config)
    assert original.config.to_dict() == before
    assert wrapper.rebuilt is rebuilt


def test_an_offloaded_cache_is_refused(llama: tuple[torch.nn.Module, Any]) -> None:
    from transformers import DynamicCache

    original, rebuilt = llama
    ids, mask = _prompts(1, 5)
    with pytest.raises(UnsupportedCacheError, match="offloaded DynamicCache"):
        rebuilt(input_ids=ids, attention_mask=mask, past_key_values=DynamicCache(config=original.config,
                                                                                 offloading=True))


def test_a_spec_naming_a_cache_outside_the_allow_list_is_refused() -> None:
    text = ('[1, {"type": "transformers.cache_utils.StaticCache", "context": "null", "children_spec": '
            '[{"type": null, "context": null, "children_spec": []}]}]')
    with pytest.raises(IRFormatError, match="StaticCache"):
        load_spec(text)


def test_plain_conversion_with_the_default_config_points_to_convert_for_generation() -> None:
    original = _llama()
    ids, _ = _prompts(1, 6)
    with pytest.raises(ConversionError, match="DynamicCache") as info:
        torch2ir.convert(original, (ids,))
    assert "convert_for_generation" in str(info.value)


def test_a_rebuild_without_a_past_cannot_generate() -> None:
    original = _llama()
    ids, _ = _prompts(1, 6)
    rebuilt = ir2torch.convert(torch2ir.convert(original, (ids,), {"use_cache": False}), original.state_dict())
    with pytest.raises(BuildError, match="takes no cache"):
        for_generation(rebuilt, original.config)


def test_the_errors_are_ir_errors() -> None:
    assert issubclass(UnsupportedCacheError, IRError)
