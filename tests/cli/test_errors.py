"""Bad inputs: exit code 2 and exactly one line on stderr, no traceback unless --debug."""

from __future__ import annotations

import json

import pytest

import ir2torch.cli
import torch2ir.cli
from common.cli.app import one_line
from common.errors import IRFormatError
from tests.cli.helpers import command, explain, run_all

SMALL = "tests.models.zoo:SkipConnection"


@pytest.fixture(scope="module")
def small_ir(tmp_path_factory):
    """An IR file of SkipConnection, converted once for the module."""
    path = tmp_path_factory.mktemp("small") / "skip.ir.json"
    assert torch2ir.cli.main(["convert", SMALL, "-i", "2x8", "-o", str(path)]) == 0
    return path


def test_bad_inputs_exit_2_with_one_line(tmp_path):
    malformed = tmp_path / "malformed.ir.json"
    malformed.write_text('{"format": "torch2ir.ir", "format_version": 1, "implementations": {', encoding="utf-8")
    out = tmp_path / "x.ir.json"
    results = run_all({
        "missing file": command("ir2torch", "show", tmp_path / "missing.ir.json"),
        "malformed JSON": command("ir2torch", "show", malformed),
        "unknown factory": command("torch2ir", "convert", "tests.models.zoo:NoSuchModel", "-i", "2x8", "-o", out,
                                   "--import-path", "."),
        "shape syntax": command("torch2ir", "convert", SMALL, "-i", "2x8x", "-o", out),
    })
    expected = {
        "missing file": "ir2torch: error: no such file: ",
        "malformed JSON": "ir2torch: error: ",
        "unknown factory": "torch2ir: error: model factory 'tests.models.zoo:NoSuchModel': tests.models.zoo has no "
                           "attribute 'NoSuchModel'",
        "shape syntax": "torch2ir: error: cannot read --input '2x8x': shape '2x8x' is not sizes joined by 'x' (hint: ",
    }
    for name, start in expected.items():
        result = results[name]
        assert result.returncode == 2, f"{name}: {explain(result)}"
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith(start), f"{name}: {explain(result)}"
        assert "Traceback" not in result.stderr and result.stdout == ""
    assert "is not valid JSON" in results["malformed JSON"].stderr
    assert not out.exists()


def test_debug_shows_the_traceback(tmp_path, capsys):
    argv = ["convert", "tests.models.zoo:NoSuchModel", "-i", "2x8", "-o", str(tmp_path / "x.json")]
    assert torch2ir.cli.main([*argv, "--debug"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "common.cli.app.CommandError: model factory" in err
    assert err.rstrip().splitlines()[-1].startswith("torch2ir: error: model factory")
    assert torch2ir.cli.main(["--debug", *argv]) == 2  # before the command name too
    assert capsys.readouterr().err.startswith("Traceback")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["ir2torch", "render", "{ir}", "-o", "{tmp}/x.jpg"], "cannot tell the picture format"),
        (["ir2torch", "render", "{ir}", "-o", "{tmp}/x.png", "--impl", "nope"], "the IR has no implementation 'nope'"),
        (["ir2torch", "render", "{ir}", "-o", "{tmp}/x.dot", "--depth", "-1"], "depth must be 0 or more"),
        (["ir2torch", "show", "{tmp}/list.json"], "is a JSON list, not an object"),
        (["ir2torch", "diff", "{ir}", "{tmp}/missing.json"], "no such file"),
        (["ir2torch", "verify", "{ir}", "--model", SMALL, "-i", "2x8", "--state", "{tmp}/none.safetensors"],
         "no such state file"),
        (["ir2torch", "verify", "{ir}", "--model", "tests.models.zoo:ConvNet", "-i", "2x3x8x8"],
         "entries of the IR are missing from the state dict"),
        (["ir2torch", "nosuchcommand"], "invalid choice: 'nosuchcommand'"),
        (["torch2ir", "convert", SMALL, "-i", "2x8", "-o", "{tmp}/y.json", "--config", "{bad"],
         "--config is not valid"),
        (["torch2ir", "convert", SMALL, "-i", "2x8", "-o", "{tmp}/y.json", "--config", "[1]"], "must be a JSON object"),
        (["torch2ir", "convert", SMALL, "-i", "2x8", "-o", "{tmp}/y.json", "--config", '{"nope": 1}'],
         "model factory 'tests.models.zoo:SkipConnection' raised TypeError"),
        (["torch2ir", "convert", "tests.models.zoo", "-i", "2x8", "-o", "{tmp}/y.json"], "package.module:factory"),
        (["torch2ir", "convert", "tests.models.zoo:D", "-i", "2x8", "-o", "{tmp}/y.json"], "is a int, not a callable"),
        (["torch2ir", "convert", "tests.models.case:gen", "-i", "2x8", "-o", "{tmp}/y.json"],
         "returned a Generator, not an nn.Module"),
        (["torch2ir", "convert", SMALL, "-o", "{tmp}/y.json"], "no example input given"),
        (["torch2ir", "convert", SMALL, "-i", "2x8:float33", "-o", "{tmp}/y.json"], "unknown dtype 'float33'"),
        (["torch2ir", "convert", SMALL, "-i", "2x8", "-o", "{tmp}/y.json", "--meta", "--state", "{tmp}/s.st"],
         "--state needs real weights"),
        (["torch2ir", "convert", SMALL, "-i", "2x7", "-o", "{tmp}/y.json"], "torch.export could not trace"),
        (["torch2ir", "convert", "nosuch", "--hf", "-i", "2x8:int64", "-o", "{tmp}/y.json"],
         "unknown transformers model type 'nosuch'"),
    ],
)
def test_errors_in_process(argv, message, small_ir, tmp_path, capsys):
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    tool, *args = (a.replace("{ir}", str(small_ir)).replace("{tmp}", str(tmp_path)) for a in argv)
    main = {"torch2ir": torch2ir.cli.main, "ir2torch": ir2torch.cli.main}[tool]
    assert main(args) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(f"{tool}: error: "), err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "y.json").exists()


def test_help_on_every_command(capsys):
    for main, commands in ((torch2ir.cli.main, ["demo", "convert", "lower"]),
                           (ir2torch.cli.main, ["show", "render", "view", "verify", "diff"])):
        for argv in ([], *([c] for c in commands)):
            with pytest.raises(SystemExit) as stop:
                main([*argv, "--help"])
            assert stop.value.code == 0
            text = capsys.readouterr().out
            assert text.startswith("usage: ") and "--debug" in text and "--quiet" in text


def test_one_line_joins_messages_and_hints():
    error = IRFormatError("3 problems:\n  a: missing\n  b: extra", key="state", hint="fix them")
    assert one_line(error) == "at state: 3 problems: a: missing; b: extra (hint: fix them)"
    assert one_line(ValueError("boom")) == "ValueError: boom (hint: run with --debug for the traceback)"


def test_diff_refuses_an_ir_against_a_flat_ir(tmp_path, capsys):
    ir, flat = tmp_path / "m.ir.json", tmp_path / "m.flat.json"
    assert torch2ir.cli.main(["convert", SMALL, "-i", "2x8", "-o", str(ir)]) == 0
    assert torch2ir.cli.main(["lower", SMALL, "-i", "2x8", "-o", str(flat)]) == 0
    assert json.loads(flat.read_text(encoding="utf-8"))["format"] == "torch2ir.flat"
    capsys.readouterr()
    assert ir2torch.cli.main(["diff", str(ir), str(flat)]) == 2
    assert "cannot compare a IR" in capsys.readouterr().err
