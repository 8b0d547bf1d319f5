"""Property tests at scale: random models from common.testing round-trip exactly.

200 models in eval mode and 50 in train mode per default run; ``HYPOTHESIS_PROFILE=long`` runs 10x as many.
"""

from __future__ import annotations

import torch
from hypothesis import HealthCheck, find, given, settings
from torch import nn

import ir2torch
from common.testing import assert_roundtrip, models_and_inputs
from tests.conftest import examples


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(models_and_inputs())
def test_random_models_round_trip_exactly(case):
    model, args, kwargs = case
    _, _, report = assert_roundtrip(model, args, kwargs)
    # the rebuild runs the same ops in the same order: not merely close, equal
    assert report.max_abs_diff == 0.0, report


@settings(max_examples=examples(50), suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(models_and_inputs(training=True))
def test_random_models_in_train_mode_match_step_for_step(case):
    """Same seed, same dropout masks; batch-norm statistics updated alike (checked by assert_roundtrip)."""
    model, args, kwargs = case
    _, rebuilt, report = assert_roundtrip(model, args, kwargs)
    assert rebuilt.training and report.max_abs_diff == 0.0, report


class _OffByHalf(nn.Linear):
    """A faulty 'hardware' linear layer: every output is 0.5 too large."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 0.5


def test_shrinking_finds_the_smallest_failing_model():
    """A broken override is reported on a one-step model (the shrunk counterexample), not on a big one."""
    rebuilder = ir2torch.get_default_converter()
    rebuilder.register_override("linear", lambda impl: _OffByHalf(**impl.data))

    def fails(case) -> bool:
        model, args, kwargs = case
        try:
            assert_roundtrip(model, args, kwargs, rebuilder=rebuilder, same_classes=False)
        except AssertionError:
            return True
        return False

    strategy = models_and_inputs(max_steps=4)
    model, _, _ = find(strategy, fails, settings=settings(max_examples=300, database=None, derandomize=True))
    assert len(model.steps) == 1, repr(model)
    assert [type(m) for m in model.children()] == [nn.Linear], repr(model)
    assert list(model.inputs) == ["x"] and model.output_format == "tensor"
    assert "linear0(v0)" in repr(model)
