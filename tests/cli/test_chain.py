"""convert -> show -> render -> verify -> diff -> lower on a zoo model.

The steps whose exit code and streams matter run as real subprocesses (``python -m torch2ir``, the
installed ``ir2torch`` console script); the picture formats, which only need the files, call the same
``main`` in-process to keep the suite fast.
"""

from __future__ import annotations

import json
import struct
import xml.etree.ElementTree as ET

import ir2torch.cli
import torch2ir.cli
from tests.cli.helpers import BIN, command, explain, run, run_all

MODEL = "tests.models.zoo:ConvNet"  # Conv2d, BatchNorm2d, pooling, Sequential, Dropout, Linear
IMAGE = "2x3x16x16"


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk (after checking the signature)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_convert_show_verify_diff_as_subprocesses(tmp_path):
    ir_path, state = tmp_path / "out" / "convnet.ir.json", tmp_path / "out" / "convnet.safetensors"
    converted = run(command("torch2ir", "convert", MODEL, "-i", IMAGE, "-o", ir_path, "--state", state,
                            "--import-path", "."))
    assert converted.returncode == 0, explain(converted)
    assert f"wrote {ir_path}" in converted.stdout and converted.stderr == ""  # no bar: stderr is not a terminal
    doc = json.loads(ir_path.read_text(encoding="utf-8"))
    assert doc["format"] == "torch2ir.ir" and doc["implementations"]["features.0"]["type"] == "conv2d"
    assert state.stat().st_size > 0

    changed = json.loads(ir_path.read_text(encoding="utf-8"))  # one attribute differs: a BatchNorm's eps
    changed["implementations"]["features.1"]["eps"] = 0.5
    other = tmp_path / "changed.ir.json"
    other.write_text(json.dumps(changed), encoding="utf-8")

    results = run_all({
        "show": [str(BIN / "ir2torch"), "show", str(ir_path)],  # the installed console script
        "verify_changed": command("ir2torch", "verify", other, "--model", MODEL, "-i", IMAGE, "--state", state,
                                  "--import-path", "."),
        "diff": command("ir2torch", "diff", ir_path, other),
    })
    show = results["show"]
    assert show.returncode == 0 and show.stderr == "", explain(show)
    assert "model            tests.models.zoo.ConvNet" in show.stdout
    assert "implementations  13: 2 conv2d, 2 batchnorm2d, 2 relu" in show.stdout
    assert "inputs           x: float32[2, 3, 16, 16]" in show.stdout
    assert "│  ├─ 0  Conv2d  (224 params)" in show.stdout and "└─ fc  Linear  (170 params)" in show.stdout

    failed = results["verify_changed"]  # the eps change alters the outputs: a failed check is exit code 1
    assert failed.returncode == 1, explain(failed)
    assert "verify: FAILED" in failed.stdout and "first divergence: features.1 (call 0)" in failed.stdout

    diff = results["diff"]
    assert diff.returncode == 1, explain(diff)
    changes = [line for line in diff.stdout.splitlines() if line[:2] in ("~ ", "+ ", "- ")]
    assert changes == ["~ features.1: eps: 1e-05 -> 0.5"]


def test_render_verify_lower_in_process(tmp_path, capsys):
    ir_path, state = tmp_path / "convnet.ir.json", tmp_path / "convnet.safetensors"
    assert torch2ir.cli.main(["convert", MODEL, "-i", IMAGE, "-o", str(ir_path), "--state", str(state)]) == 0

    assert ir2torch.cli.main(["render", str(ir_path), "-o", str(tmp_path / "tree.png")]) == 0
    width, height = png_size((tmp_path / "tree.png").read_bytes())
    assert width > 300 and height > 300

    assert ir2torch.cli.main(["render", str(ir_path), "-o", str(tmp_path / "f.svg"), "--impl", "features"]) == 0
    svg = ET.parse(tmp_path / "f.svg").getroot()
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    assert "adaptiveavgpool2d" in "".join(svg.itertext())  # a node of the graph of `features`

    assert ir2torch.cli.main(["render", str(ir_path), "-o", str(tmp_path / "tree.mmd"), "--depth", "1"]) == 0
    mermaid = (tmp_path / "tree.mmd").read_text(encoding="utf-8")
    assert mermaid.startswith("flowchart LR") and "features<br/>Sequential<br/>+9 modules" in mermaid

    verify = ["verify", str(ir_path), "--model", MODEL, "-i", IMAGE]
    assert ir2torch.cli.main([*verify, "--state", str(state)]) == 0
    assert ir2torch.cli.main(verify) == 0  # without --state: the original's own weights go into the rebuild
    assert ir2torch.cli.main(["diff", str(ir_path), str(ir_path)]) == 0
    flat_path = tmp_path / "convnet.flat.json"
    assert torch2ir.cli.main(["lower", MODEL, "-i", IMAGE, "--meta", "-o", str(flat_path)]) == 0
    assert ir2torch.cli.main(["show", str(flat_path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert out.count("verify: OK (max abs diff 0.0e+00") == 2 and "hold equal IRs" in out
    assert "(torch2ir.flat," in out and "traced on meta" in out and "2 aten.conv2d.default" in out

    flat = json.loads(flat_path.read_text(encoding="utf-8"))
    ops = [n["op_type"] for n in flat["nodes"]]
    assert ops.count("aten.conv2d.default") == 2 and ops[-1] == "aten.linear.default"
