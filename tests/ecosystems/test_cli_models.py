"""The command-line examples of docs/cli.md for torchvision and timm models run as written (the docs test
environment has neither library, so that page marks the block not-run and this test runs it)."""

from __future__ import annotations

import os
import re
import shlex

import ir2torch.cli
import torch2ir.cli
from tests.cli.helpers import REPO


def _block() -> list[str]:
    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    block = re.search(r"torchvision and timm models are factories.*?```sh\n(.*?)```", text, re.S)
    assert block is not None, "docs/cli.md lost its torchvision/timm example"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_docs_cli_torchvision_and_timm_commands_run(tv, timm, tmp_path, capsys) -> None:
    lines = _block()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert all(line in readme for line in lines), "README.md shows the same torchvision and timm commands"
    assert any("torchvision.models:" in line for line in lines) and any("timm:" in line for line in lines)
    mains = {"torch2ir": torch2ir.cli.main, "ir2torch": ir2torch.cli.main}
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        for line in lines:
            tool, *argv = shlex.split(line)
            assert mains[tool]([*argv, "-q"]) == 0, f"{line}\n{capsys.readouterr().err}"
    finally:
        os.chdir(here)
    assert "verify: OK" in capsys.readouterr().out
    assert (tmp_path / "resnet18.ir.json").is_file() and (tmp_path / "convnext.ir.json").is_file()
