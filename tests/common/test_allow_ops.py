"""Operators of other namespaces are opt-in: per converter, per call, per load; a file names the ones it needs."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR, FlatIR
from common.errors import ConversionError, UnsafeTargetError
from common.safety import Allowlist


@torch.library.custom_op("t2ir_test::scale", mutates_args=())
def _scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor


@_scale.register_fake
def _(x: torch.Tensor, factor: float) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.t2ir_test.scale(self.lin(x), 3.0)


def make_model() -> nn.Module:
    """The command-line factory of these tests (``tests.common.test_allow_ops:make_model``)."""
    torch.manual_seed(0)
    return UsesCustomOp().eval()


def _model():
    torch.manual_seed(0)
    return UsesCustomOp().eval(), (torch.randn(2, 4),)


def test_conversion_refuses_an_unknown_namespace_naming_the_op_and_the_opt_in():
    model, args = _model()
    with pytest.raises(ConversionError) as info:
        torch2ir.convert(model, args)
    assert "t2ir_test.scale.default" in str(info.value)
    assert "allow=['t2ir_test::scale']" in str(info.value) and "torch2ir bug" not in str(info.value)


@pytest.mark.parametrize("allow", [["t2ir_test::scale"], ["t2ir_test::*"], "t2ir_test::scale.default"])
def test_opted_in_ops_convert_save_load_and_rebuild_exactly(tmp_path, allow):
    model, args = _model()
    ir = torch2ir.convert(model, args, allow=allow)
    ir.save(tmp_path / "m.ir.json")
    assert json.loads((tmp_path / "m.ir.json").read_text())["ops"] == ["t2ir_test.scale.default"]
    with pytest.raises(UnsafeTargetError, match="t2ir_test.scale.default") as info:
        IR.load(tmp_path / "m.ir.json")  # a fresh loader has not opted in: refused, op and opt-in named
    assert "--allow-op t2ir_test::scale" in str(info.value)
    loaded = IR.load(tmp_path / "m.ir.json", allow=allow)
    assert loaded == ir
    with pytest.raises(UnsafeTargetError):
        ir2torch.convert(tmp_path / "m.ir.json", model.state_dict())
    rebuilt = ir2torch.convert(tmp_path / "m.ir.json", model.state_dict(), allow=allow)
    assert torch.equal(rebuilt(*args), model(*args))


def test_a_converters_own_allowlist_is_independent_of_others():
    model, args = _model()
    converter = torch2ir.get_default_converter()
    converter.allowlist.allow("t2ir_test::*")
    ir = converter.convert(model, args)
    with pytest.raises(ConversionError):
        torch2ir.get_default_converter().convert(model, args)
    rebuilder = ir2torch.get_default_converter()
    rebuilder.allowlist.allow("t2ir_test::scale")
    assert torch.equal(rebuilder.convert(ir, model.state_dict())(*args), model(*args))
    with pytest.raises(UnsafeTargetError):
        ir2torch.convert(ir, model.state_dict())


def test_flat_ir_needs_the_same_opt_in(tmp_path):
    model, args = _model()
    with pytest.raises(ConversionError, match="t2ir_test.scale.default"):
        torch2ir.lower(model, args)
    flat = torch2ir.lower(model, args, allow=["t2ir_test::*"])
    flat.save(tmp_path / "m.flat.json")
    with pytest.raises(UnsafeTargetError, match="t2ir_test.scale.default"):
        FlatIR.load(tmp_path / "m.flat.json")
    loaded = FlatIR.load(tmp_path / "m.flat.json", allow=["t2ir_test::*"])
    out = ir2torch.convert(loaded, model.state_dict(), allow=["t2ir_test::*"])(*args)
    assert torch.equal(out, model(*args))


@pytest.mark.parametrize("pattern", ["t2ir_test", "os.system", "::*", "a::b::c", ""])
def test_malformed_patterns_are_refused(pattern):
    with pytest.raises(UnsafeTargetError, match="not an operator pattern"):
        Allowlist().allow(pattern)


@pytest.mark.parametrize("name", ["import_module.os.default", "load_library.x.default", "t2ir_test.nope.default",
                                  "t2ir_test.scale.nope", "_t2ir_test.scale.default"])
def test_opt_in_resolves_only_registered_operators(name):
    allow = Allowlist().allow(f"{name.split('.')[0]}::*")
    assert not allow.is_allowed(name)
    with pytest.raises(UnsafeTargetError):
        allow.resolve(name)


def test_command_line_opt_in(tmp_path, capsys):
    """``--allow-op`` on convert and on every ir2torch command that reads the file."""
    from ir2torch.cli import main as ir2torch_main
    from torch2ir.cli import main as torch2ir_main

    out = tmp_path / "m.ir.json"
    base = ["convert", "tests.common.test_allow_ops:make_model", "-i", "2x4", "-o", str(out), "--quiet"]
    assert torch2ir_main(base) == 2
    assert "--allow-op t2ir_test::scale" in capsys.readouterr().err
    assert torch2ir_main([*base, "--allow-op", "t2ir_test::scale"]) == 0
    assert ir2torch_main(["show", str(out)]) == 2
    assert "t2ir_test.scale.default" in capsys.readouterr().err
    assert ir2torch_main(["show", str(out), "--allow-op", "t2ir_test::*"]) == 0
    assert ir2torch_main(["diff", str(out), str(out), "--allow-op", "t2ir_test::*"]) == 0
