"""``torch2ir convert --opaque`` and ``ir2torch verify --allow-op package.module.Class`` (docs/cli.md)."""

from __future__ import annotations

import ir2torch.cli
import torch2ir.cli
from tests.cli.helpers import REPO

MODEL = "tests.torch2ir.test_opaque:Model"
GATE = "tests.torch2ir.test_opaque.Gate"


def test_convert_with_opaque_and_verify_with_the_class_allowed(tmp_path, capsys) -> None:
    ir, state = str(tmp_path / "m.json"), str(tmp_path / "m.safetensors")
    common = ["--import-path", str(REPO), "-i", "2x4"]
    assert torch2ir.cli.main(["convert", MODEL, *common, "-o", ir, "--state", state, "--opaque", "auto"]) == 0
    assert "1 opaque" in capsys.readouterr().out
    verify = ["verify", ir, "--model", MODEL, *common, "--state", state]
    assert ir2torch.cli.main(verify) != 0
    assert f"not allowed: {GATE}" in capsys.readouterr().err
    assert ir2torch.cli.main([*verify, "--allow-op", GATE]) == 0
    assert "max abs diff 0.0e+00" in capsys.readouterr().out


def test_auto_and_a_class_together(tmp_path, capsys) -> None:
    """``--opaque auto --opaque CLASS`` keeps both: FakeQuant, whose estimator "auto" finds, and the two linears,
    named (a named class is kept opaque even when it has a handler)."""
    ir = str(tmp_path / "m.json")
    common = ["--import-path", str(REPO), "-i", "2x4"]
    assert torch2ir.cli.main(["convert", "tests.torch2ir.test_custom_backward_opaque:Net", *common, "-o", ir,
                              "--opaque", "auto", "--opaque", "torch.nn.modules.linear.Linear"]) == 0
    assert "(3 opaque, 1 module)" in capsys.readouterr().out
    assert torch2ir.cli.main(["convert", "tests.torch2ir.test_custom_backward_opaque:Net", *common, "-o", ir,
                              "--opaque", "auto"]) == 0
    assert "(2 linear, 1 module, 1 opaque)" in capsys.readouterr().out
