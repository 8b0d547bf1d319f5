"""``python -m torch2ir demo`` writes the IR, the FlatIR, the weights and the pictures, quietly off a terminal."""

from __future__ import annotations

import json

from tests.cli.helpers import command, explain, run
from tests.cli.test_chain import png_size


def test_demo_command_writes_files_and_a_png(tmp_path):
    out = tmp_path / "demo"
    result = run(command("torch2ir", "demo", "--out", out))
    assert result.returncode == 0, explain(result)
    assert result.stderr == ""  # stderr is a pipe, not a terminal: no progress bar, no warnings
    for name in ("demo.ir.json", "demo.flat.json", "demo.safetensors", "demo.hierarchy.png",
                 "demo.hierarchy.dot", "demo.hierarchy.mmd", "demo.html"):
        assert (out / name).stat().st_size > 0, name
    assert sorted(p.name for p in out.iterdir()) == sorted(  # nothing else: no lock or temporary file left behind
        ["demo.ir.json", "demo.flat.json", "demo.safetensors", "demo.hierarchy.png", "demo.hierarchy.dot",
         "demo.hierarchy.mmd", "demo.html"])
    assert json.loads((out / "demo.ir.json").read_text(encoding="utf-8"))["format"] == "torch2ir.ir"
    flat = json.loads((out / "demo.flat.json").read_text(encoding="utf-8"))
    assert flat["format"] == "torch2ir.flat" and flat["meta"]["device"] == "meta"
    width, height = png_size((out / "demo.hierarchy.png").read_bytes())
    assert width >= 800 and height >= 800  # 27 boxes, one row each
    assert (out / "demo.html").read_text(encoding="utf-8").lstrip().lower().startswith("<!doctype html")
    for stage in ("convert", "lower", "save weights", "draw", "view", "rebuild", "verify", "run FlatIR"):
        assert f"\n  {stage} " in result.stdout, stage
    assert "max |original - rebuilt| = 0 " in result.stdout
    assert f"files in {out}" in result.stdout
