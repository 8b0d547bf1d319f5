"""A sample of the corpus compiles as one graph after the round trip: ``torch.compile(rebuilt, backend="aot_eager",
fullgraph=True)`` runs and matches the rebuilt model, or, where it raises, compiling the original model raises the
same (dynamo does not trace ``nn.LSTM``: the rebuild keeps the real class). ``benchmarks/compile_corpus.py`` runs
the whole corpus."""

from __future__ import annotations

import pytest
import torch
from torch.utils._pytree import tree_leaves

from tests.real.corpus import CORPUS
from tests.real.shared import converted, converters

#: one architecture per family the corpus covers (encoders, decoders with SDPA, encoder-decoders, vision, audio,
#: recurrent, mixture of experts)
SAMPLE = ("bert_sdpa", "llama", "gpt2", "t5", "whisper", "vit", "resnet", "swin", "wav2vec2", "lstm",
          "mixtral_batched")
ARCHS = [a for a in CORPUS if a.name in SAMPLE]
#: architectures dynamo cannot compile as one graph in their original form either
UNTRACED = ("lstm",)


def test_the_sample_is_of_the_corpus():
    assert sorted(a.name for a in ARCHS) == sorted(SAMPLE)


@pytest.mark.parametrize("arch", ARCHS, ids=lambda a: a.name)
def test_rebuilt_corpus_models_compile_as_one_graph(arch):
    kept = converted(arch)
    rebuilt = converters(arch)["rebuilder"].convert(kept.ir, kept.model.state_dict())
    args, kwargs = arch.inputs()
    torch._dynamo.reset()
    with torch.no_grad():
        want = rebuilt(*args, **kwargs)
        try:
            got = torch.compile(rebuilt, backend="aot_eager", fullgraph=True)(*args, **kwargs)
        except torch._dynamo.exc.Unsupported as exc:
            torch._dynamo.reset()
            with pytest.raises(type(exc)):
                torch.compile(kept.model, backend="aot_eager", fullgraph=True)(*args, **kwargs)
            assert arch.name in UNTRACED
            return
    pairs = [(g, w) for g, w in zip(tree_leaves(got), tree_leaves(want)) if isinstance(w, torch.Tensor)]
    assert pairs and len(tree_leaves(got)) == len(tree_leaves(want))
    for g, w in pairs:
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
