"""A model converted weight-free on ``meta`` rebuilds and runs with the real weights on CPU.

Device arguments recorded on ``meta`` (``arange(..., device=meta)``) follow the weights at run time, and
the values that no state dict holds (non-persistent buffers such as BERT's ``position_ids``) come from
the state passed in, or a clear error names them.
"""

from __future__ import annotations

import copy

import pytest
import torch

import ir2torch
import torch2ir
from common import verify
from common.errors import StateDictError
from tests.models.zoo import by_name


def _on_meta(name: str):
    case = by_name(name)
    model = case.build()
    args, kwargs = case.inputs()

    def meta(t):
        return t.to("meta") if isinstance(t, torch.Tensor) else t

    ir = torch2ir.convert(copy.deepcopy(model).to("meta"), tuple(map(meta, args)),
                          {k: meta(v) for k, v in kwargs.items()})
    return model, args, kwargs, ir


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert", "t5_encoder", "resnet"])
def test_meta_conversion_rebuilds_exactly_with_the_real_weights(name):
    model, args, kwargs, ir = _on_meta(name)
    state = {**model.state_dict(), **dict(model.named_buffers())}
    report = verify(model, ir2torch.convert(ir, state), args, kwargs)
    assert report.ok and report.max_abs_diff == 0.0, report


def test_missing_non_persistent_values_are_named():
    model, _, _, ir = _on_meta("bert")
    with pytest.raises(StateDictError, match="embeddings.position_ids") as info:
        ir2torch.convert(ir, model.state_dict())
    assert "named_buffers" in info.value.hint
