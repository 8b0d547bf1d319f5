"""`make demo` runs torch2ir.demo: it must convert, save, rebuild and reproduce the outputs."""

from __future__ import annotations

import json

from torch2ir import demo


def test_demo_writes_the_ir_and_reproduces_outputs(tmp_path, capsys):
    assert demo.main(["--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "demo.ir.json").read_text(encoding="utf-8"))
    assert doc["format"] == "torch2ir.ir"
    assert doc["implementations"]["blocks.0.attn"]["type"] == "multiheadattention"
    printed = capsys.readouterr().out
    assert "max |original - rebuilt| = 0" in printed
    assert "same module paths: True" in printed
