"""MODEL is code and must be trusted; the current folder is searched only when asked (``--import-path``).

A module planted in the current folder (``torch2ir_evil.py``, or a ``transformers.py`` shadowing the
real package) writes a marker file when imported: the marker shows whether it ran.
"""

from __future__ import annotations

import sys

import pytest
import torch

import ir2torch.cli
import torch2ir.cli
from common.cli.app import CommandError
from common.cli.model import TRUST_NOTE, load_factory
from tests.cli.helpers import BIN, REPO, command, explain, run_all

PLANTED = """\
import pathlib
import torch
pathlib.Path(__file__).with_name("{marker}").write_text("imported", encoding="utf-8")
def build():
    return torch.nn.Linear(2, 3)
"""


def _words(text: str) -> str:
    return " ".join(text.split())  # argparse wraps help text: compare with single spaces


@pytest.mark.parametrize(("main", "argv", "option"), [
    (torch2ir.cli.main, ["convert"], "MODEL"),
    (torch2ir.cli.main, ["lower"], "MODEL"),
    (ir2torch.cli.main, ["verify"], "--model MODEL"),
])
def test_help_of_every_model_option_says_it_runs_code(main, argv, option, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*argv, "--help"])
    assert stop.value.code == 0
    text = _words(capsys.readouterr().out)
    assert TRUST_NOTE.startswith("MODEL imports and runs Python code") and "read as data" in TRUST_NOTE
    assert _words(TRUST_NOTE) in text, text
    assert "--import-path DIR" in text and "current folder, which is not searched otherwise" in text
    assert option in text


def test_the_current_folder_is_not_searched_in_process(tmp_path, monkeypatch):
    name = "torch2ir_evil_inprocess"
    (tmp_path / f"{name}.py").write_text(PLANTED.format(marker="marker"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, name, raising=False)
    before = list(sys.path)
    with pytest.raises(CommandError, match=f"no module named '{name}'") as error:
        load_factory(f"{name}:build")
    assert "pass --import-path ." in str(error.value.hint)
    assert sys.path == before and not (tmp_path / "marker").exists()

    factory = load_factory(f"{name}:build", import_path=["."])  # asked for: found, and put first
    assert isinstance(factory(), torch.nn.Linear) and (tmp_path / "marker").read_text(encoding="utf-8") == "imported"
    assert sys.path[0] == str(tmp_path) and sys.path.count(str(tmp_path)) == 1
    monkeypatch.delitem(sys.modules, name)
    with pytest.raises(CommandError, match="--import-path 'nowhere' is not a folder"):
        load_factory(f"{name}:build", import_path=["nowhere"])


def test_a_planted_module_runs_only_with_import_path(tmp_path):
    """Both the console script and ``python -m`` (which puts the current folder on sys.path) refuse it."""
    refused, allowed = tmp_path / "refused", tmp_path / "allowed"
    for folder in (refused, allowed):
        folder.mkdir()
        (folder / "torch2ir_evil.py").write_text(PLANTED.format(marker="evil.marker"), encoding="utf-8")
    (refused / "transformers.py").write_text(PLANTED.format(marker="shadow.marker"), encoding="utf-8")
    convert = ["convert", "torch2ir_evil:build", "-i", "4x2"]
    hf = ["convert", "nosuchtype", "--hf", "-i", "2x8:int64", "-o", str(tmp_path / "hf.json")]
    results = run_all({
        "script": [str(BIN / "torch2ir"), *convert, "-o", str(tmp_path / "a.json")],
        "python -m": command("torch2ir", *convert, "-o", tmp_path / "b.json"),
        "python -m --hf": command("torch2ir", *hf),
    }, cwd=refused)
    results |= run_all({"allowed": [str(BIN / "torch2ir"), *convert, "-o", str(tmp_path / "c.json"),
                                    "--import-path", "."]}, cwd=allowed)
    for name in ("script", "python -m", "python -m --hf"):
        result = results[name]
        assert result.returncode == 2, f"{name}: {explain(result)}"
        assert len(result.stderr.splitlines()) == 1 and "Traceback" not in result.stderr, f"{name}: {explain(result)}"
    for name in ("script", "python -m"):
        assert "no module named 'torch2ir_evil'" in results[name].stderr, explain(results[name])
        assert "pass --import-path . if you trust" in results[name].stderr
    # the real transformers was imported (it knows no such model type), not the planted one
    assert "unknown transformers model type 'nosuchtype'" in results["python -m --hf"].stderr
    assert not (refused / "evil.marker").exists() and not (refused / "shadow.marker").exists()
    assert not (tmp_path / "a.json").exists() and not (tmp_path / "b.json").exists()

    assert results["allowed"].returncode == 0, explain(results["allowed"])
    assert (allowed / "evil.marker").read_text(encoding="utf-8") == "imported"
    assert (tmp_path / "c.json").stat().st_size > 0


def test_the_docs_say_model_is_trusted_code_and_document_import_path():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Command line"):readme.index("## Usage")]
    cli = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    for text in (section, cli):
        words = _words(text)
        assert "`MODEL` (`pkg.mod:factory`) imports and runs Python code, so it must be code you trust" in words
        assert "unlike an IR file, which is only read as data" in words
        assert "--import-path ." in words
    assert "| `--import-path DIR` |" in cli
