"""Converting leaves torch's process-wide module hook tables as they were (the train-mode recorder registers global
hooks for one call; torch keeps a removed ``with_kwargs`` hook's id in ``_global_forward_hooks_with_kwargs``)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.modules import module as torch_module

import ir2torch
import torch2ir


def _tables() -> dict[str, dict]:
    return {name: dict(getattr(torch_module, name)) for name in dir(torch_module)
            if name.startswith("_global_") and isinstance(getattr(torch_module, name), dict)}


class Drop(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.lin(x))) + nn.functional.dropout(x, 0.1, self.training)


def test_convert_and_rebuild_leave_the_global_hook_tables_unchanged():
    before = _tables()
    assert len(before) >= 8  # the tables this test watches exist in this torch
    model, x = Drop().eval(), torch.randn(2, 4)
    for _ in range(3):
        ir = torch2ir.convert(model, (x,))
        ir2torch.convert(ir, model.state_dict())(x)
    assert _tables() == before
