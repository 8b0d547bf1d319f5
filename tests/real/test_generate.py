"""``generate()`` on rebuilt transformers decoders (issue 52): Llama, GPT-2, Qwen2, Gemma-2 (sliding window) and
Mixtral (mixture of experts), each converted with its default config by ``torch2ir.generation`` and rebuilt through
a saved file, give the original ``generate()``'s greedy tokens (a single prompt and a left-padded batch with an
attention mask, 24 new tokens), with the default dynamic cache and with ``cache_implementation="static"``; a Gemma-2
generating past its sliding window is refused with either cache. Small configs, random
weights, the default (sdpa) attention."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

import ir2torch
from common.errors import IRError
from common.ir import IR
from ir2torch.generation import cache_argument, for_generation
from torch2ir.generation import convert_for_generation

_SIZES = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 128, "pad_token_id": 0,
          "bos_token_id": 1, "eos_token_id": 2}
WINDOW = 48
NEW = 24
#: The largest difference allowed between the rebuild's and the original's logits at each generated step: the
#: traced graph may take another, equally exact branch than eager transformers (docs/generation.md, Exactness).
LOGITS_ATOL = 5e-7


def _models() -> dict[str, Callable[[], nn.Module]]:
    import transformers as tf

    gpt2 = {"n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 128, "pad_token_id": 0,
            "bos_token_id": 1, "eos_token_id": 2}
    return {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(**_SIZES)),
        "gpt2": lambda: tf.GPT2LMHeadModel(tf.GPT2Config(**gpt2)),
        "qwen2": lambda: tf.Qwen2ForCausalLM(tf.Qwen2Config(**_SIZES)),
        "gemma2": lambda: tf.Gemma2ForCausalLM(tf.Gemma2Config(**_SIZES, head_dim=16, sliding_window=WINDOW)),
        "mixtral": lambda: tf.MixtralForCausalLM(tf.MixtralConfig(**_SIZES, num_local_experts=4,
                                                                  num_experts_per_tok=2)),
    }


NAMES = ["llama", "gpt2", "qwen2", "gemma2", "mixtral"]


@pytest.fixture(scope="module", params=NAMES)
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, nn.Module, Any]:
    """(name, the original, the rebuild for generation read back from a saved file)."""
    pytest.importorskip("transformers")
    torch.manual_seed(0)
    original = _models()[request.param]().eval()
    path = Path(tmp_path_factory.mktemp(request.param)) / "model.ir.json"
    convert_for_generation(original).save(path)
    rebuilt = ir2torch.convert(IR.load(path), original.state_dict())
    return request.param, original, for_generation(rebuilt, original.config, original.generation_config)


def _greedy(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: int = NEW, cache: str = "dynamic",
            ) -> torch.Tensor:
    options = {"cache_implementation": "static"} if cache == "static" else {}
    with torch.inference_mode():
        return model.generate(ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                              do_sample=False, **options)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_single_prompt(pair: tuple[str, nn.Module, Any], cache: str) -> None:
    _, original, rebuilt = pair
    ids = torch.randint(3, 100, (1, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    expected = _greedy(original, ids, mask, cache=cache)
    assert expected.shape == (1, 7 + NEW)
    assert torch.equal(_greedy(rebuilt, ids, mask, cache=cache), expected)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_padded_batch(pair: tuple[str, nn.Module, Any], cache: str) -> None:
    _, original, rebuilt = pair
    ids = torch.randint(3, 100, (4, 12), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    for row in range(1, 4):
        mask[row, : 3 * row] = 0  # left padding
    ids[mask == 0] = 0
    expected = _greedy(original, ids, mask, cache=cache)
    assert torch.equal(_greedy(rebuilt, ids, mask, cache=cache), expected)


@pytest.mark.parametrize("cache", ["dynamic", "static"])
def test_every_steps_logits_are_within_float32_rounding(pair: tuple[str, nn.Module, Any], cache: str) -> None:
    _, original, rebuilt = pair
    ids = torch.randint(3, 100, (1, 7), generator=torch.Generator().manual_seed(1))
    options = {"cache_implementation": "static"} if cache == "static" else {}
    logits = []
    for model in (original, rebuilt):
        with torch.inference_mode():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
                                 do_sample=False, output_logits=True, return_dict_in_generate=True, **options)
        logits.append(torch.stack(out.logits))
    expected, got = logits
    assert got.shape == expected.shape == (NEW, 1, 100)
    torch.testing.assert_close(got, expected, rtol=0, atol=LOGITS_ATOL)


@pytest.mark.parametrize("pair", ["gemma2"], indirect=True)  # the one with a sliding window
def test_past_the_sliding_window_is_refused(pair: tuple[str, nn.Module, Any]) -> None:
    _, _, rebuilt = pair
    ids = torch.randint(3, 100, (1, 8), generator=torch.Generator().manual_seed(3))
    name = cache_argument(rebuilt.rebuilt)  # the argument the guard names: the converting release's
    with pytest.raises(IRError, match=name):
        _greedy(rebuilt, ids, torch.ones_like(ids), WINDOW)
    with pytest.raises(IRError, match=name):  # the views of the static layers: the same guard
        _greedy(rebuilt, ids, torch.ones_like(ids), WINDOW, cache="static")
