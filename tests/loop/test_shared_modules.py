"""Modules that stand where the tracer does not see them plainly keep their call signature and their place.

A module whose result comes from a preserved leaf (export reads it through a tracepoint it then removes), a module
registered under two paths (the tracer calls every module through a proxy), and a module shared inside an
``nn.Sequential`` (aliases are attached after a module's own children, and a Sequential runs its children in
order): signatures kept, outputs exact, the original order restored, the loop a fixpoint.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from tests.loop.test_signatures import _exact


class _Upsample(nn.Module):
    """Ends in a ConvTranspose2d, a leaf whose signature export preserves (it takes an optional ``output_size``):
    export reads the leaf's result through a tracepoint it removes afterwards."""

    def __init__(self) -> None:
        super().__init__()
        self.projection = nn.Conv2d(4, 4, 1)
        self.resize = nn.ConvTranspose2d(4, 4, kernel_size=2, stride=2)

    def forward(self, hidden_state: torch.Tensor) -> torch.Tensor:
        return self.resize(self.projection(hidden_state))


class _Stage(nn.Module):
    """DepthAnything's reassemble stage, reduced: a list argument, two ints, a list of upsampled results."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Upsample(), _Upsample()])

    def forward(self, hidden_states: list[torch.Tensor], height: int, width: int) -> list[torch.Tensor]:
        out = []
        for i, hidden_state in enumerate(hidden_states):
            hidden_state = hidden_state[:, 1:].reshape(hidden_state.shape[0], height, width, 4)
            out.append(self.layers[i](hidden_state.permute(0, 3, 1, 2).contiguous()))
        return out


class _Neck(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stage = _Stage()

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return self.stage([x, x * 2], 3, 3)


def test_modules_returning_a_preserved_leafs_result_keep_their_signature():
    torch.manual_seed(0)
    model, x = _Neck(), torch.randn(2, 10, 4)
    ir = torch2ir.convert(model, (x,))
    for key, names in (("stage", ["hidden_states", "height", "width"]), ("stage.layers.0", ["hidden_state"]),
                       ("stage.layers.1", ["hidden_state"])):
        assert ir[key].meta.get("forward_arg_names") == names, key
        assert "parameters" in ir[key].meta, key
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert _exact(rebuilt(x), model(x))
    assert list(inspect.signature(rebuilt.stage.layers[0].forward).parameters) == ["hidden_state"]
    rebuilt.stage.layers[1] = copy.deepcopy(model.stage.layers[1])  # the original fits where the rebuild was
    assert _exact(rebuilt(x), model(x))
    assert torch2ir.convert(ir2torch.convert(ir, model.state_dict()), (x,)) == ir


class _Cpe(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(x)


class _SharedBlock(nn.Module):
    def __init__(self, cpe: nn.Module) -> None:
        super().__init__()
        self.cpe = cpe
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.cpe(x))


class _Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * 2


class _SharedCpe(nn.Module):
    """timm's CoaT, reduced: one module registered under two paths (``cpe1`` and ``blocks.0.cpe``). The tracer then
    calls every module through a proxy of it, which the call recorder must see through."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = _Embed()
        self.cpe1 = _Cpe()
        self.blocks = nn.Sequential(_SharedBlock(self.cpe1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(self.emb(x))


def test_every_module_keeps_its_signature_when_one_is_registered_under_two_paths():
    torch.manual_seed(0)
    model, x = _SharedCpe().eval(), torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    for key in ("emb", "cpe1", "blocks.0"):
        assert ir[key].meta.get("forward_arg_names") == ["x"], key
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert _exact(rebuilt(x), model(x))
    rebuilt.emb = copy.deepcopy(model.emb)
    rebuilt.blocks[0] = copy.deepcopy(model.blocks[0])
    assert _exact(rebuilt(x), model(x))


@pytest.mark.parametrize("shared_at", [(1, 3), (0, 4), (1, 3, 5)])
def test_a_module_shared_inside_a_sequential_runs_in_its_place(shared_at):
    """One module at two or more positions of an ``nn.Sequential`` (diffusers' AutoencoderTiny: one ReLU at
    ``conv.1`` and ``conv.3``): the rebuild attaches aliases after the module's own children, so it must restore
    the recorded order, or the Sequential runs them in another (the output was silently wrong)."""
    torch.manual_seed(0)
    shared = nn.ReLU() if 0 not in shared_at else nn.Linear(4, 4)
    layers = [shared if i in shared_at else nn.Linear(4, 4) for i in range(max(shared_at) + 2)]
    model, x = nn.Sequential(*layers).eval(), torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert list(rebuilt._modules) == list(model._modules)
    assert list(rebuilt.state_dict()) == list(model.state_dict())
    assert _exact(rebuilt(x), model(x))
    # and the rebuilt Sequential (guarded in its instance's forward) converts back to the same IR
    assert torch2ir.convert(rebuilt, (x,)) == ir


def test_a_hostile_children_order_is_refused(tmp_path):
    import json

    from common.errors import IRFormatError
    from common.ir import IR

    act = nn.ReLU()
    model, x = nn.Sequential(nn.Linear(4, 4), act, nn.Linear(4, 4), act).eval(), torch.randn(2, 4)
    torch2ir.convert(model, (x,)).save(tmp_path / "m.ir.json")
    doc = json.loads((tmp_path / "m.ir.json").read_text())
    for hostile in (["0", "0", "1", "2", "3"], ["a.b"], "0123", [1, 2], [""]):
        doc["implementations"]["root"]["meta"]["children"] = hostile
        (tmp_path / "h.ir.json").write_text(json.dumps(doc))
        with pytest.raises(IRFormatError, match="children"):
            IR.load(tmp_path / "h.ir.json")
    # a list that names only some children (a rewrite added or removed one) orders those it names
    doc["implementations"]["root"]["meta"]["children"] = ["0", "3", "2"]
    (tmp_path / "h.ir.json").write_text(json.dumps(doc))
    rebuilt = ir2torch.convert(IR.load(tmp_path / "h.ir.json"), model.state_dict())
    assert list(rebuilt._modules) == ["0", "1", "3", "2"]  # "1", not named, keeps its place
