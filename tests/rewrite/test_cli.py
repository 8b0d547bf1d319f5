"""``ir2torch rewrite``: passes in order, counts printed, --verify, files written only on success, one-line errors."""

from __future__ import annotations

import pytest
import torch

import ir2torch
from common.ir import IR
from common.state_dict import load_safetensors, save_safetensors
from ir2torch.cli import main
from tests.rewrite.helpers import corpus_model


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    model, args, _, ir = corpus_model("resnet")
    folder = tmp_path_factory.mktemp("cli")
    ir.save(folder / "in.ir.json")
    save_safetensors(model.state_dict(), folder / "in.safetensors")
    return model, args, folder


def test_rewrite_folds_verifies_and_writes(resnet, capsys):
    model, args, folder = resnet
    code = main(["rewrite", str(folder / "in.ir.json"), "--pass", "fold-batchnorm", "--pass", "remove-dropout",
                 "--state", str(folder / "in.safetensors"), "-o", str(folder / "out.ir.json"),
                 "--state-out", str(folder / "out.safetensors"), "--verify", "-i", "1x3x32x32", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "fold-batchnorm: 6 changes" in out and "remove-dropout: 0 changes" in out and "verify: OK" in out
    rebuilt = ir2torch.convert(IR.load(folder / "out.ir.json"), load_safetensors(folder / "out.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(*args)[0], model(*args)[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("extra, message", [
    (["--pass", "fold-batchnorm"], "no state was given"),
    (["--pass", "fold-batchnorm", "--state", "in.safetensors"], "--state and --state-out go together"),
    (["--pass", "remove-dropout", "--verify"], "--verify needs example inputs"),
    (["--pass", "nope"], "invalid choice"),
])
def test_rewrite_errors_are_one_line(resnet, capsys, monkeypatch, extra, message):
    _, _, folder = resnet
    monkeypatch.chdir(folder)
    code = main(["rewrite", "in.ir.json", "-o", "bad.ir.json", *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not (folder / "bad.ir.json").exists()
