"""A failed export names the smallest module whose own trace failed (``torch2ir.opaque.attribution``): its path,
qualified class and why, and says how to keep it as an opaque leaf."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch2ir
from torch2ir.frontend.export import ExportFailedError
from torch2ir.opaque.attribution import alone, in_traceback


class Gate(nn.Module):
    """A data-dependent branch: torch.export cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.lin(x) * self.scale
        return -x


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4)
        self.gate = Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.gate(self.norm(x)) + x


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.blocks = nn.Sequential(Block(), Block())
        self.post = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(self.blocks(self.pre(x)))


GATE = f"{__name__}.Gate"


def test_the_refusal_names_the_smallest_failing_module() -> None:
    with pytest.raises(ExportFailedError) as info:
        torch2ir.convert(Model(), (torch.randn(2, 4),))
    error = info.value
    assert error.implementation == "blocks.0.gate"
    assert f"torch.export could not trace Model in blocks.0.gate ({GATE}): GuardOnDataDependentSymNode" \
        in error.message
    assert 'opaque="auto"' in error.hint and f"opaque=[{GATE}]" in error.hint
    assert "torch.cond" in error.hint  # export's own hint is kept


def test_a_failure_in_the_roots_own_forward_names_the_root() -> None:
    class Root(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.lin(x)
            return y if y.sum() > 0 else -y

    with pytest.raises(ExportFailedError) as info:
        torch2ir.convert(Root(), (torch.randn(2, 4),))
    assert info.value.implementation == "root"
    assert "in its own forward" in info.value.message and "opaque" not in info.value.hint


def test_attribute_proxies_are_matched_by_their_dict() -> None:
    """Export may run a module through a proxy sharing its ``__dict__``: the traceback's frame still names it."""
    model = Model()

    class Proxy:
        pass

    proxy = Proxy()
    object.__setattr__(proxy, "__dict__", model.blocks[1].gate.__dict__)

    def fail(self: object) -> None:
        raise RuntimeError("boom")

    try:
        fail(proxy)
    except RuntimeError as exc:
        assert in_traceback(exc, model) == ("blocks.1.gate", model.blocks[1].gate)


def test_alone_exports_candidates_on_recorded_inputs_of_a_copy() -> None:
    model = Model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    failure = alone(model, (torch.randn(2, 4),), None, [("blocks.0.norm", model.blocks[0].norm),
                                                       ("blocks.1.gate", model.blocks[1].gate)])
    assert failure is not None and failure.path == "blocks.1.gate" and failure.qualname == GATE
    assert failure.why.startswith("GuardOnDataDependentSymNode")
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in before.items())
