"""What a rebuild reads once and reuses: calling-convention specs per text within one conversion
(``CodeCache.spec``), and ``sanitize``'s shortcut for names that are already ASCII identifiers."""

from __future__ import annotations

import random
import string

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import IRFormatError
from common.names import MAX_NAME_LENGTH, sanitize


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.lin(x)
        return y, y * 2 if scale is None else y * scale


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([_Block() for _ in range(3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            a, b = block(x, scale=x)
            x = a + b
        return x


def _converted() -> tuple[nn.Module, IR, torch.Tensor]:
    model = _Net().eval()
    x = torch.randn(2, 4)
    return model, torch2ir.convert(model, (x,)), x


def test_identical_layers_share_their_read_specs_and_run_as_the_original():
    model, ir, x = _converted()
    rebuilt = ir2torch.convert(ir, model.state_dict())
    blocks = list(rebuilt.blocks)
    assert ir["blocks.0"].meta["in_spec"] == ir["blocks.2"].meta["in_spec"]
    assert blocks[0]._in_spec is blocks[1]._in_spec is blocks[2]._in_spec
    assert blocks[0]._out_spec is blocks[2]._out_spec
    with torch.no_grad():
        assert torch.equal(rebuilt(x), model(x))
        for mine, theirs in zip(blocks, model.blocks, strict=True):
            got, expected = mine(x, scale=x), theirs(x, scale=x)
            assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=True))


def test_an_unreadable_spec_after_a_read_one_names_its_own_implementation():
    _, ir, _ = _converted()
    ir["blocks.2"].meta["out_spec"] = '[1, {"type": "os.system", "context": "null", "children_spec": []}]'
    with pytest.raises(IRFormatError) as info:
        ir2torch.convert(ir, device="meta")
    assert "blocks.2" in str(info.value)


def _sanitize_by_walk(name: str) -> str:
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name[:MAX_NAME_LENGTH])
    if not cleaned or cleaned[0].isdigit():
        cleaned = f"n_{cleaned}"
    return cleaned


def test_sanitize_shortcut_agrees_with_the_character_walk():
    rng = random.Random(0)
    alphabet = string.ascii_letters + string.digits + "_.- é\u00b2\u0661\u017fK"
    cases = ["", "a", "_", "1a", "add_14", "x" * (MAX_NAME_LENGTH + 5), "é", "\u0661", "\u017f", "K", "self"]
    cases += ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(20000)]
    for case in cases:
        assert sanitize(case) == _sanitize_by_walk(case), case
