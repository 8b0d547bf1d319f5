"""A PT2E model handed over through a file, then finished by the colleague who gets it (issue 51, point 1).

The original is prepared (PTQ or QAT) and calibrated once; its IR is saved and loaded, rebuilt from its state,
and both calibrate (or train) on the same further batches; then ``convert_pt2e`` of each must give the same int8
model: outputs bit-exact and every state entry of the rebuild's equal to the original's. The original's converted
model may hold more entries, but only ones its own graph does not read (a QAT batch norm's folded ``bn.*``).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.pt2e_prepared import PT2E_PREPARED_KEY

ALLOW = ["quantized_decomposed::*"]


def read_attributes(model: torch.fx.GraphModule) -> set[str]:
    """The attributes (``get_attr`` targets) of ``model``'s graph."""
    return {str(n.target) for n in model.graph.nodes if n.op == "get_attr"}


def assert_finishes_alike(prepared: nn.Module, args: tuple, batches: list[tuple], folder: Path) -> torch.nn.Module:
    """Hand ``prepared`` over through a file, calibrate both on ``batches``, ``convert_pt2e`` both: the same int8
    model. Returns the rebuilt model's converted one."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e

    state = {k: v.clone() for k, v in prepared.state_dict().items()}
    ir = torch2ir.convert(prepared, args, allow=ALLOW)
    assert PT2E_PREPARED_KEY in ir.root.meta
    ir.save(folder / "prepared.ir.json")
    rebuilt = ir2torch.convert(IR.load(folder / "prepared.ir.json", allow=ALLOW), state, allow=ALLOW)
    for batch in batches:
        torch.manual_seed(0)
        want = prepared(*batch)
        torch.manual_seed(0)
        got = rebuilt(*batch)
        assert torch.equal(got, want)
    ours, theirs = convert_pt2e(rebuilt), convert_pt2e(prepared)
    for batch in (args, *batches):
        assert torch.equal(ours(*batch), theirs(*batch))
    mine, want_state = ours.state_dict(), theirs.state_dict()
    assert mine.keys() <= want_state.keys()
    assert [k for k, v in mine.items() if not torch.equal(v, want_state[k])] == []
    assert not (want_state.keys() - mine.keys()) & read_attributes(theirs)  # only entries nothing reads
    return ours
