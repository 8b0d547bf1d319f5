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


def test_a_saved_rewritten_file_verifies_against_the_original_ir_without_code(tmp_path, capsys):
    """``verify FOLDED --state FOLDED.safetensors --against IN --original-state IN.safetensors``: both files rebuilt
    with their own weights, no --model (nothing imported); a broken rewrite is named through its provenance."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU()).eval()
    model[1].running_mean.uniform_(-1, 1)
    model[1].running_var.uniform_(0.5, 2)
    import torch2ir

    torch2ir.convert(model, (torch.randn(1, 3, 8, 8),)).save(tmp_path / "in.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "in.safetensors")
    assert main(["rewrite", str(tmp_path / "in.ir.json"), "--pass", "fold-batchnorm", "--state",
                 str(tmp_path / "in.safetensors"), "-o", str(tmp_path / "f.ir.json"), "--state-out",
                 str(tmp_path / "f.safetensors"), "-q"]) == 0
    against = ["verify", str(tmp_path / "f.ir.json"), "--state", str(tmp_path / "f.safetensors"), "--against",
               str(tmp_path / "in.ir.json"), "--original-state", str(tmp_path / "in.safetensors"), "-i", "1x3x8x8",
               "-q"]
    capsys.readouterr()
    assert main(against) == 0
    assert "verify: OK" in capsys.readouterr().out
    broken = load_safetensors(tmp_path / "f.safetensors")
    broken["0.bias"] = broken["0.bias"] + 1  # a wrong fold: the conv that replaced conv + batch norm diverges
    save_safetensors(broken, tmp_path / "broken.safetensors")
    assert main([*against[:3], str(tmp_path / "broken.safetensors"), *against[4:]]) == 1
    out = capsys.readouterr().out
    # the pair the fold replaced is compared where it ends: the original's batch norm, module '1'
    assert "verify: FAILED" in out and "first divergence: 1 (call 0)" in out, out


@pytest.mark.parametrize("drop, message", [
    ("--original-state", "--against, --original-state and --state go together"),
    ("-i", "needs example inputs"),
])
def test_verify_against_errors_are_one_line(tmp_path, capsys, drop, message):
    argv = ["verify", "f.ir.json", "--state", "f.safetensors", "--against", "in.ir.json", "--original-state",
            "in.safetensors", "-i", "1x3x8x8"]
    for name in ("f.ir.json", "f.safetensors", "in.ir.json", "in.safetensors"):
        (tmp_path / name).write_text("{}")
    i = argv.index(drop)
    argv = [str(tmp_path / a) if a.endswith((".json", ".safetensors")) else a for a in argv[:i] + argv[i + 2:]]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
