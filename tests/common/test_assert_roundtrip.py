"""common.testing.assert_roundtrip: passes on faithful rebuilds, fails with the verify table otherwise."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
from common.testing import assert_roundtrip
from tests.models.zoo import by_name


@pytest.mark.parametrize("name", ["dict_output", "shared_sequential", "bert"])
def test_faithful_rebuilds_pass(name):
    case = by_name(name)
    model = case.build()
    args, kwargs = case.inputs()
    ir, rebuilt, report = assert_roundtrip(model, args, kwargs)
    assert report.ok and report.max_abs_diff == 0.0
    assert "root" in ir and isinstance(rebuilt, nn.Module)


class _Shifted(nn.Linear):
    """A wrong 'hardware' linear: adds 0.5 to every output."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 0.5


def test_a_broken_override_fails_with_the_verify_table():
    case = by_name("skip_connection")
    model = case.build()
    args, kwargs = case.inputs()
    rebuilder = ir2torch.get_default_converter()
    rebuilder.register_override("linear", lambda impl: _Shifted(**impl.data))
    with pytest.raises(AssertionError, match="(?s)rebuilt outputs differ.*first divergence"):
        assert_roundtrip(model, args, kwargs, rebuilder=rebuilder)
