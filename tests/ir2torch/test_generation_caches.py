"""The caches of ``generate()`` on a rebuilt decoder: the static cache (``cache_implementation="static"``) against
the original's, the refusals of every other cache kind, the ``DynamicCache`` built without copies (in the traced
step and in the rebuild's output), and the ``DynamicCache`` nodes a file may hold (hostile values)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils import _pytree as pytree

import ir2torch
from common.caches import UnsupportedCacheError, output_unflatten
from common.errors import IRFormatError
from common.ir import IR
from common.treespec import load_spec
from ir2torch.generation import cache_argument, for_generation
from tests.ir2torch.test_generation import _greedy, _llama, _prompts
from tests.security.refusals import refused
from torch2ir.generation import convert_for_generation

#: The ``DynamicCache`` context of the tiny Llama's specs as the file spells it (two layers, no sliding window).
CONTEXT = '[[\\"key_cache\\", \\"value_cache\\"], [null, null]]'


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path, Any]:
    """The original, its saved step IR and the rebuild for generation read back from it."""
    original = _llama()
    path = Path(tmp_path_factory.mktemp("caches")) / "llama.ir.json"
    convert_for_generation(original).save(path)
    rebuilt = ir2torch.convert(IR.load(path), original.state_dict())
    return original, path, for_generation(rebuilt, original.config, original.generation_config)


def _static(model: Any, ids: torch.Tensor, mask: torch.Tensor, tokens: int) -> torch.Tensor:
    with torch.inference_mode():
        return model.generate(ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                              do_sample=False, cache_implementation="static")


@pytest.mark.parametrize(("batch", "length"), [(1, 7), (3, 9)])
def test_static_cache_gives_the_original_tokens(saved: tuple[torch.nn.Module, Path, Any], batch: int,
                                               length: int) -> None:
    original, _, rebuilt = saved
    ids, mask = _prompts(batch, length)
    expected = _static(original, ids, mask, 20)
    assert expected.shape == (batch, length + 20)
    assert torch.equal(_static(rebuilt, ids, mask, 20), expected)
    assert torch.equal(_greedy(original, ids, mask, 20), expected)  # the static cache changes nothing here


def test_the_static_cache_holds_what_the_original_s_holds(saved: tuple[torch.nn.Module, Path, Any]) -> None:
    """After a step of each, the caches the wrapper and the original filled hold the same keys and values."""
    from transformers import StaticCache

    original, _, rebuilt = saved
    ids, mask = _prompts(2, 6)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 1)
    caches = [StaticCache(config=original.config, max_cache_len=16) for _ in range(2)]
    with torch.inference_mode():
        original(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=caches[0],
                 logits_to_keep=1)
        out = rebuilt(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=caches[1],
                      logits_to_keep=1)
    assert out.past_key_values is caches[1]
    for mine, theirs in zip(caches[1].layers, caches[0].layers, strict=True):
        assert int(mine.cumulative_length) == int(theirs.cumulative_length) == 6
        torch.testing.assert_close(mine.keys, theirs.keys, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(mine.values, theirs.values, rtol=1e-5, atol=1e-6)


def test_a_static_cache_without_room_is_refused(saved: tuple[torch.nn.Module, Path, Any]) -> None:
    from transformers import StaticCache

    original, _, rebuilt = saved
    ids, mask = _prompts(1, 12)
    with pytest.raises(UnsupportedCacheError, match="holds 0 of at most 8 tokens and the step adds 12"):
        rebuilt(input_ids=ids, attention_mask=mask, past_key_values=StaticCache(config=original.config,
                                                                                max_cache_len=8))


def test_static_caches_the_wrapper_cannot_copy_are_refused_by_name(saved: tuple[torch.nn.Module, Path, Any]) -> None:
    from transformers import StaticCache
    from transformers.cache_utils import StaticIndexedLayer

    original, _, rebuilt = saved
    ids, mask = _prompts(1, 5)
    with pytest.raises(UnsupportedCacheError, match="offloaded StaticCache"):
        rebuilt(input_ids=ids, attention_mask=mask,
                past_key_values=StaticCache(config=original.config, max_cache_len=16, offloading=True))
    cache = StaticCache(config=original.config, max_cache_len=16)
    cache.layers[1] = StaticIndexedLayer(max_cache_len=16)
    with pytest.raises(UnsupportedCacheError, match="layer 1 of the StaticCache is a StaticIndexedLayer"):
        rebuilt(input_ids=ids, attention_mask=mask, past_key_values=cache)
    cache = StaticCache(config=original.config, max_cache_len=16)
    with torch.inference_mode():
        rebuilt(input_ids=ids, attention_mask=mask, past_key_values=cache, logits_to_keep=1)
        cache.layers[0].cumulative_length.add_(1)
        with pytest.raises(UnsupportedCacheError, match="different numbers of tokens"):
            rebuilt(input_ids=ids[:, :1], attention_mask=torch.ones(1, 6, dtype=torch.long), past_key_values=cache)


def test_other_cache_classes_are_refused_by_name(saved: tuple[torch.nn.Module, Path, Any]) -> None:
    from transformers import DynamicCache, EncoderDecoderCache, StaticCache

    class MyStaticCache(StaticCache):
        pass

    original, _, rebuilt = saved
    ids, mask = _prompts(1, 5)
    for cache, name in ((EncoderDecoderCache(DynamicCache(), DynamicCache()), "EncoderDecoderCache"),
                        (MyStaticCache(config=original.config, max_cache_len=16), "MyStaticCache")):
        with pytest.raises(UnsupportedCacheError, match=f"not a {name}"):
            rebuilt(input_ids=ids, attention_mask=mask, past_key_values=cache)


def test_the_step_graph_copies_no_past(saved: tuple[torch.nn.Module, Path, Any]) -> None:
    """transformers' registered unflatten concatenates each past tensor onto an empty one: the traced step does not
    (the registration is put back after the conversion), and the rebuild's output cache holds the graph's tensors."""
    from transformers import DynamicCache
    from transformers.integrations.executorch import _unflatten_dynamic_cache

    original, _, rebuilt = saved
    targets = [str(node.target) for node in rebuilt.rebuilt.graph.nodes]
    assert not [t for t in targets if "lift_fresh" in t or "aten.cat" in t], targets
    assert pytree.SUPPORTED_NODES[DynamicCache].unflatten_fn is _unflatten_dynamic_cache
    ids, mask = _prompts(1, 5)
    with torch.inference_mode():
        cache = rebuilt(input_ids=ids, attention_mask=mask, past_key_values=DynamicCache(config=original.config),
                        logits_to_keep=1).past_key_values
    assert type(cache) is DynamicCache and cache.get_seq_length() == 5


def test_the_unflatten_without_copies_makes_transformers_cache() -> None:
    from transformers import DynamicCache
    from transformers.integrations.executorch import _unflatten_dynamic_cache

    fast = output_unflatten(DynamicCache)
    assert fast is not _unflatten_dynamic_cache  # the installed transformers builds caches as checked
    keys = [torch.randn(2, 3, 5, 4) for _ in range(3)]
    values = [torch.randn(2, 3, 5, 4) for _ in range(3)]
    context = (["key_cache", "value_cache"], [None, 4, 9])
    mine, theirs = fast([keys, values], context), _unflatten_dynamic_cache([keys, values], context)
    for a, b in zip(mine.layers, theirs.layers, strict=True):
        assert type(a) is type(b) and vars(a).keys() == vars(b).keys()
        for name, value in vars(b).items():
            assert torch.equal(getattr(a, name), value) if isinstance(value, torch.Tensor) else \
                getattr(a, name) == value
    assert mine.layers[0].keys is keys[0]  # no copy
    assert mine.layers[1].keys.shape[-2] == 3 and mine.layers[1].cumulative_length == 5  # window 4 keeps 3
    # window 9 keeps all 5: the tensor itself, not a view of all of it (the same elements; no slice op a step)
    assert mine.layers[2].keys is keys[2] and mine.layers[2].values is values[2]


@pytest.mark.parametrize("context", [
    '[[\\"keys\\", \\"value_cache\\"], [null, null]]',  # names transformers does not read
    '[[\\"key_cache\\", \\"value_cache\\"], [\\"x\\", null]]',  # a window that is not an int
    '[[\\"key_cache\\", \\"value_cache\\"], [0, null]]',
    '[[\\"key_cache\\", \\"value_cache\\"], [true, null]]',
    '[[\\"key_cache\\", \\"value_cache\\"], [null]]',  # fewer layers than key tensors
    '[[\\"key_cache\\", \\"value_cache\\"], 7]',
    '{\\"key_cache\\": 1}',
])
@pytest.mark.parametrize("field", ["in_spec", "out_spec"])
def test_a_hostile_dynamic_cache_node_is_refused(saved: tuple[torch.nn.Module, Path, Any], tmp_path: Path,
                                                 context: str, field: str) -> None:
    original, path, _ = saved
    doc = json.loads(path.read_text())
    meta = doc["implementations"]["root"]["meta"]
    assert CONTEXT in meta[field]  # the spec's text: the context is a JSON string inside it
    meta[field] = meta[field].replace(CONTEXT, context)
    bad = path.parent / f"bad-{tmp_path.name}.ir.json"  # beside the original: its tensors file is found
    bad.write_text(json.dumps(doc))
    error = refused(bad, original.state_dict(), [])
    assert isinstance(error, IRFormatError) and "DynamicCache" in str(error)


def test_unequal_key_and_value_lists_are_refused() -> None:
    leaf = {"type": None, "context": None, "children_spec": []}
    node = {"type": "transformers.cache_utils.DynamicCache", "context": '[["key_cache", "value_cache"], [null, null]]',
            "children_spec": [{"type": "builtins.list", "context": "null", "children_spec": [leaf, leaf]},
                              {"type": "builtins.list", "context": "null", "children_spec": [leaf]}]}
    with pytest.raises(IRFormatError, match="two lists of as many key and value tensors"):
        load_spec(json.dumps([1, node]))
    node["children_spec"][1]["children_spec"].append(leaf)
    assert load_spec(json.dumps([1, node])).num_leaves == 4


def test_a_cache_of_another_layer_layout_is_refused_naming_the_layouts(
        saved: tuple[torch.nn.Module, Path, Any]) -> None:
    """A ``DynamicCache`` whose layers have other sliding windows prints as the same structure text as the converted
    one: the refusal names where the structures differ (the context holding the windows)."""
    from transformers import DynamicCache

    from common.errors import InputMismatchError

    _, _, rebuilt = saved
    ids, _ = _prompts(1, 5)
    shape = rebuilt._past_leaves[0][0]
    past = [[torch.zeros(1, shape[1], 5, shape[3]) for _ in range(2)] for _ in range(2)]
    cache = output_unflatten(DynamicCache)(past, (["key_cache", "value_cache"], [None, 4]))
    with pytest.raises(InputMismatchError) as info, torch.inference_mode():
        rebuilt.rebuilt(input_ids=ids, attention_mask=torch.ones(1, 10, dtype=torch.long),
                        position_ids=torch.arange(5, 10)[None], **{cache_argument(rebuilt.rebuilt): cache},
                        logits_to_keep=1)
    text = str(info.value)
    assert "converted with DynamicCache([*, *], [*, *]) (at the top: DynamicCache with context " in text, text
    assert "[None, 4]], converted with [['key_cache', 'value_cache'], [None, None]]" in text, text
    assert cache_argument(rebuilt.rebuilt) in text, text
