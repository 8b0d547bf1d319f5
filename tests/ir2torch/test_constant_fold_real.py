"""Constant folding on real transformers models (the corpus' BEiT, data2vec-vision and ViT configs): outputs
exactly eager's and the unfolded rebuild's, fewer ATen ops per call, and the loop still closes."""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._pytree import tree_leaves

from ir2torch.codegen.fold_cache import FOLD_ATTR
from tests.real.corpus import CORPUS
from tests.real.shared import converters


def _aten_ops(module: torch.nn.Module, args: tuple, kwargs: dict) -> Counter:
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
        module(*args, **kwargs)
    return Counter({e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")})


def _exact(a, b) -> bool:
    left, right = tree_leaves(a), tree_leaves(b)
    return len(left) == len(right) and all(torch.equal(x, y) for x, y in zip(left, right))


@pytest.mark.parametrize("name", ["beit", "data2vec_vision", "squeezebert"])
def test_real_models_fold_exactly_and_run_fewer_ops(name: str) -> None:
    arch = next(a for a in CORPUS if a.name == name)
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    pair = converters(arch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir = pair["converter"].convert(model, args, kwargs)
    folded = pair["rebuilder"].convert(ir, model.state_dict())
    plain = pair["rebuilder"].convert(ir, model.state_dict(), fold_constants=False)
    assert any(FOLD_ATTR in m.__dict__ for m in folded.modules())
    assert not any(FOLD_ATTR in m.__dict__ for m in plain.modules())
    assert folded.state_dict().keys() == plain.state_dict().keys()
    with torch.no_grad():
        expected = model(*args, **kwargs)
        for _ in range(2):  # the first call computes the values, the second reads them
            assert _exact(folded(*args, **kwargs), expected)
        assert _exact(plain(*args, **kwargs), expected)
    ran, plain_ran = _aten_ops(folded, args, kwargs), _aten_ops(plain, args, kwargs)
    assert sum(ran.values()) < sum(plain_ran.values())
    assert ran["aten::arange"] < plain_ran["aten::arange"]
    if name != "squeezebert":  # the relative-position index: meshgrid and stack no longer run
        assert plain_ran["aten::meshgrid"] and not ran["aten::meshgrid"] and not ran["aten::stack"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert pair["converter"].convert(folded, args, kwargs) == ir  # the loop closes with cached values
