"""``torch2ir convert`` traces alike blocks once by default; ``--trace-every-block`` traces each one (same IR)."""

from __future__ import annotations

import pytest

import torch2ir.cli
import torch2ir.converter
from common.ir import IR

MODEL = "tests.models.zoo:NestedContainers"  # two alike SkipConnection blocks


def test_convert_traces_alike_blocks_once_unless_told(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []
    original = torch2ir.converter.build_ir

    def spy(*args: object, **kwargs: object) -> object:
        seen.append(kwargs["trace_once"])
        return original(*args, **kwargs)

    monkeypatch.setattr(torch2ir.converter, "build_ir", spy)
    once, every = tmp_path / "once.ir.json", tmp_path / "every.ir.json"
    argv = ["convert", MODEL, "-i", "2x8", "--import-path", ".", "-q"]
    assert torch2ir.cli.main([*argv, "-o", str(once)]) == 0
    assert torch2ir.cli.main([*argv, "-o", str(every), "--trace-every-block"]) == 0
    assert seen == [True, False]
    assert IR.load(once) == IR.load(every)
