"""The real-architecture corpus round-trips exactly (see tests/real/corpus.py and docs/supported.md).

Each passing architecture: convert, JSON save/load, rebuild, load the original state dict, outputs equal,
same module paths and state-dict keys, every handled module rebuilt as its own class (``assert_roundtrip``),
and the rebuilt model converts back to the same IR (the loop closes); then the same in train mode (same seed,
same dropout masks, same batch-norm statistics after the step).
"""

from __future__ import annotations

import copy
import re
import warnings

import pytest
import torch

import torch2ir
from common.errors import ConversionError
from common.testing import assert_roundtrip
from tests.real.corpus import CORPUS, UNSUPPORTED, Arch
from tests.real.shared import converters, keep
from torch2ir.train.dropout import TrainModeWarning

# LeViT caches a tensor on itself while traced; export warns, the round trip is still exact
pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")


def _ids(arch: Arch) -> str:
    return arch.name


_converters = converters  # a converter and a rebuilder with the operators ``arch`` opts in to


@pytest.mark.parametrize("arch", CORPUS, ids=_ids)
def test_eval_mode_round_trip_is_exact(arch):
    model = arch.build()
    built = copy.deepcopy(model)  # for the next tests of this architecture (see shared.py)
    args, kwargs = arch.inputs()
    converters = _converters(arch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TrainModeWarning)  # about train mode only; eval is checked here
        ir, rebuilt, report = assert_roundtrip(model, args, kwargs, **converters)
        keep(arch, built, ir)
        again = converters["converter"].convert(rebuilt, args, kwargs)
    assert report.max_abs_diff <= 1e-5, report
    assert not rebuilt.training
    # the loop closes: the rebuilt model converts back to the IR it was rebuilt from
    assert again == ir, sorted(k for k in ir if k not in again or ir[k] != again[k])


@pytest.mark.parametrize("arch", [a for a in CORPUS if not a.train_differs], ids=_ids)
def test_train_mode_round_trip_is_exact(arch):
    model = arch.build().train()
    args, kwargs = arch.inputs()
    try:
        with torch.no_grad():
            copy.deepcopy(model)(*args, **kwargs)
    except ValueError as exc:  # batch norm on one value per channel: the rebuild must refuse alike
        pair = _converters(arch)
        rebuilt = pair["rebuilder"].convert(pair["converter"].convert(model.eval(), args, kwargs),
                                            model.state_dict()).train()
        with pytest.raises(ValueError, match=re.escape(str(exc)[:40])):
            rebuilt(*args, **kwargs)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainModeWarning)
        _, rebuilt, report = assert_roundtrip(model, args, kwargs, **_converters(arch))
    assert report.max_abs_diff <= 1e-5, report
    assert rebuilt.training


@pytest.mark.parametrize("arch", [a for a in CORPUS if "TrainModeWarning" in a.train_differs], ids=_ids)
def test_train_only_randomness_is_reported(arch):
    model = arch.build().train()
    args, kwargs = arch.inputs()
    with pytest.warns(TrainModeWarning, match="random ops only in train mode in: "):
        ir = _converters(arch)["converter"].convert(model, args, kwargs)
    assert "random ops only in train mode" in ir.root.meta["train_trace"]


@pytest.mark.parametrize("arch", UNSUPPORTED, ids=_ids)
def test_unsupported_architectures_fail_clearly(arch):
    model = arch.build()
    args, kwargs = arch.inputs()
    with pytest.raises(ConversionError, match=re.escape(arch.match)) as info:
        torch2ir.convert(model, args, kwargs)
    assert info.value.hint, "a ConversionError says what to do"


def test_the_corpus_covers_every_family():
    kinds = {a.kind for a in CORPUS}
    assert {"text encoder", "text decoder", "encoder-decoder", "vision", "audio", "torch.nn"} <= kinds
    assert len(CORPUS) >= 60
    assert torch.__version__  # the table in docs/supported.md is generated for this torch
