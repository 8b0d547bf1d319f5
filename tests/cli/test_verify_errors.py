"""A forward pass or a rebuild that raises ends as one line on stderr and an exit code; --debug adds the traceback.

The IR files are edited the way a damaged or crafted file would be: the rebuild succeeds but its forward
raises (a MaxPool2d kernel larger than the image), or building a module raises (``groups: 0``).
"""

from __future__ import annotations

import json

import pytest
import torch

import common.cli.summary
import common.render
import ir2torch.cli
import ir2torch.converter
import torch2ir.cli
from tests.cli.helpers import BIN, explain, run_all

MODEL = "tests.models.zoo:ConvNet"
IMAGE = "2x3x8x8"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """ConvNet's IR and weights, and two edited copies of the IR."""
    folder = tmp_path_factory.mktemp("verify")
    ir_path, state = folder / "convnet.ir.json", folder / "convnet.safetensors"
    assert torch2ir.cli.main(["convert", MODEL, "-i", IMAGE, "-o", str(ir_path), "--state", str(state), "-q"]) == 0
    doc = json.loads(ir_path.read_text(encoding="utf-8"))
    assert doc["implementations"]["features.3"]["type"] == "maxpool2d"
    assert doc["implementations"]["features.0"]["groups"] == 1
    out = {"ir": ir_path, "state": state}
    for name, key, field, value in (("big_kernel", "features.3", "kernel_size", 50),
                                    ("zero_groups", "features.0", "groups", 0)):
        edited = json.loads(ir_path.read_text(encoding="utf-8"))
        edited["implementations"][key][field] = value
        out[name] = folder / f"{name}.ir.json"
        out[name].write_text(json.dumps(edited), encoding="utf-8")
    return out


def test_the_edits_really_break_pytorch():
    with pytest.raises(RuntimeError, match="Output size is too small"):
        torch.nn.MaxPool2d(50)(torch.randn(2, 8, 8, 8))
    with pytest.raises(ValueError, match="groups must be a positive integer"):
        torch.nn.Conv2d(3, 8, 3, groups=0)


def test_failing_forwards_as_subprocesses(files):
    """Real processes, so every line written to stderr (warnings included) is counted."""
    def verify(path, image=IMAGE):
        return [str(BIN / "ir2torch"), "verify", str(path), "--model", MODEL, "-i", image,
                "--state", str(files["state"]), "--import-path", "."]

    results = run_all({
        "rebuilt raises": verify(files["big_kernel"]),
        "rebuilt raises, debug": [*verify(files["big_kernel"]), "--debug"],
        "original raises": verify(files["ir"], image="2x3x8"),  # one dimension short
        "rebuild raises": verify(files["zero_groups"]),
    })
    expected = {
        # the kernel's size check runs in its fake kernel first: the op is refused before the real one runs
        "rebuilt raises": (1, f"ir2torch: failed: the model rebuilt from {files['big_kernel']} raised during its "
                              "forward pass, where the original ran: ResourceBudgetError: implementation 'root': "
                              "aten.max_pool2d_with_indices.default sizes its output from its arguments and its fake "
                              "kernel refused them (RuntimeError: "),
        "original raises": (2, f"ir2torch: error: the original model '{MODEL}' raised on the example inputs: "
                               "RuntimeError: "),
        "rebuild raises": (2, "ir2torch: error: implementation 'features.0': the builder of type 'conv2d' failed: "
                              "ValueError: groups must be a positive integer (hint: "),
    }
    for name, (code, start) in expected.items():
        result = results[name]
        assert result.returncode == code, f"{name}: {explain(result)}"
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), f"{name}: {explain(result)}"
        assert "Traceback" not in result.stderr and result.stdout == "", f"{name}: {explain(result)}"
    assert "Output size is too small" in results["rebuilt raises"].stderr

    debug = results["rebuilt raises, debug"]
    assert debug.returncode == 1, explain(debug)
    lines = debug.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and len(lines) > 10, explain(debug)
    assert any("Output size is too small" in line for line in lines)
    assert lines[-1] == results["rebuilt raises"].stderr.strip()


def test_a_good_file_still_verifies(files, capsys):
    argv = ["verify", str(files["ir"]), "--model", MODEL, "-i", IMAGE, "--state", str(files["state"])]
    assert ir2torch.cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("verify: OK") and err == ""


@pytest.mark.parametrize(("argv", "patch", "message"), [
    (["show", "{ir}"], "common.cli.summary.describe", "cannot summarise {ir}: RecursionError: too deep"),
    (["render", "{ir}", "-o", "{tmp}/x.dot"], "common.cli.summary.load_any",
     "cannot read {ir}: RecursionError: too deep"),
    (["render", "{ir}", "-o", "{tmp}/x.dot"], "common.render.render", "cannot draw {ir}: RecursionError: too deep"),
    (["diff", "{ir}", "{ir}"], "common.cli.summary.diff", "cannot compare {ir} with {ir}: RecursionError: too deep"),
    (["verify", "{ir}", "--model", MODEL, "-i", IMAGE], "ir2torch.converter.convert",
     "cannot rebuild {ir}: RecursionError: too deep"),
])
def test_any_exception_from_a_file_is_one_line(argv, patch, message, files, tmp_path, monkeypatch, capsys):
    """Whatever a library raises on a file (here a multi-line RecursionError) is one line naming the file."""
    def boom(*args, **kwargs):
        raise RecursionError("too deep\nline two\nline three")

    module, name = patch.rsplit(".", 1)
    monkeypatch.setattr({"common.cli.summary": common.cli.summary, "common.render": common.render,
                         "ir2torch.converter": ir2torch.converter}[module], name, boom)
    fill = {"{ir}": str(files["ir"]), "{tmp}": str(tmp_path)}
    argv = [fill.get(a, a).replace("{tmp}", str(tmp_path)) for a in argv]
    assert ir2torch.cli.main(argv) == 2
    out, err = capsys.readouterr()
    expected = message.replace("{ir}", str(files["ir"]))
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"ir2torch: error: {expected} (hint: the file may be damaged"), err
    assert "line two" not in err and "Traceback" not in err

    assert ir2torch.cli.main([*argv, "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):") and "RecursionError: too deep" in err
    assert err.rstrip().splitlines()[-1].startswith(f"ir2torch: error: {expected}")
