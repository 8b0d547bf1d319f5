"""`make demo` runs `torch2ir demo`: convert, lower, save, draw, rebuild, load state and reproduce the outputs."""

from __future__ import annotations

import json

from torch2ir import demo


def test_demo_model_has_a_conv_stem_and_transformer_blocks():
    model = demo.DemoModel()
    kinds = {type(m).__name__ for m in model.modules()}
    assert {"Conv2d", "BatchNorm2d", "MultiheadAttention", "LayerNorm", "ModuleList", "Sequential"} <= kinds
    out = model.eval()(*demo.example_inputs())
    assert sorted(out) == ["logits", "tokens"] and tuple(out["logits"].shape) == (2, 10)
    assert demo.example_inputs("meta")[0].is_meta


def test_demo_writes_the_files_and_reproduces_outputs(tmp_path, capsys):
    assert demo.main(["--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "demo.ir.json").read_text(encoding="utf-8"))
    assert doc["format"] == "torch2ir.ir"
    attn = doc["implementations"]["blocks.0.attn"]
    assert doc["bodies"][attn["$body"]]["type"] == "multiheadattention"  # the two blocks share their bodies
    assert (tmp_path / "demo.hierarchy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    mermaid = (tmp_path / "demo.hierarchy.mmd").read_text(encoding="utf-8")
    assert "%% n1: stem" in mermaid and "MultiheadAttention" in mermaid
    printed = capsys.readouterr().out
    assert "max |original - rebuilt| = 0 " in printed
    assert "same module paths: True" in printed
    assert "max |original - FlatIR| = " in printed
    assert "verify: OK" in printed
