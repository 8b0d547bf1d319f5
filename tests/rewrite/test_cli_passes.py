"""Every built-in pass through ``ir2torch rewrite`` in-process: counts per pass printed, the written files
rebuilt (strict loading) and compared with the input model, --where, and one-line errors for missing options."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
from common.ir import IR
from common.rewrite import find
from common.rewrite.core import call_sites
from common.rewrite.passes import DROPOUT_FUNCTIONS
from common.state_dict import load_safetensors, save_safetensors
from ir2torch.cli import main
from ir2torch.cli.rewrite import PASSES
from tests.rewrite.helpers import corpus_model

#: every pass, and the test below running it through the CLI
COVERED = {"fold-batchnorm": "test_fold_with_where", "fuse-qkv": "test_fuse_qkv_and_remove_dropout_on_bert",
           "remove-dropout": "test_fuse_qkv_and_remove_dropout_on_bert",
           "remove-identity": "test_insert_after_then_remove_identity", "replace-type": "test_replace_type",
           "insert-after": "test_insert_after_then_remove_identity", "reparameterize": "test_reparameterize"}


def _files(folder, name):
    model, args, kwargs, ir = corpus_model(name)
    ir.save(folder / "in.ir.json")
    save_safetensors(model.state_dict(), folder / "in.safetensors")
    return model, args, kwargs, ir


def _run(folder, capsys, *argv: str, state: bool = True) -> tuple[int, str]:
    files = ["--state", str(folder / "in.safetensors"), "--state-out", str(folder / "out.safetensors")] if state else []
    code = main(["rewrite", str(folder / "in.ir.json"), "-o", str(folder / "out.ir.json"), "-q", *files, *argv])
    return code, capsys.readouterr().out


def _rebuilt(folder) -> nn.Module:
    return ir2torch.convert(IR.load(folder / "out.ir.json"), load_safetensors(folder / "out.safetensors"))


@pytest.fixture(scope="module")
def resnet(tmp_path_factory):
    folder = tmp_path_factory.mktemp("resnet")
    return (*_files(folder, "resnet"), folder)


def test_every_pass_is_tested():
    assert set(COVERED) == set(PASSES) and all(name in globals() for name in COVERED.values())


def test_fold_with_where(resnet, capsys):
    model, args, _, _, folder = resnet
    code, out = _run(folder, capsys, "--pass", "fold-batchnorm", "--where", "encoder.*")
    assert code == 0, out
    assert "fold-batchnorm: 5 changes, 1 left alone" in out  # the embedder's BN is outside encoder.*
    rebuilt = _rebuilt(folder)
    left = [k for k, m in rebuilt.named_modules() if isinstance(m, nn.BatchNorm2d)]
    assert left == ["embedder.embedder.normalization"]
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(*args)[0], model(*args)[0], atol=1e-5, rtol=0)


def test_replace_type(resnet, capsys):
    model, args, _, ir, folder = resnet
    relus = sum(impl.type == "relu" for impl in ir.values())
    code, out = _run(folder, capsys, "--pass", "replace-type", "--type", "relu", "--new-type", "relu6",
                     "--data", '{"inplace": false}')
    assert code == 0, out
    assert f"replace-type: {relus} changes" in out and relus > 0
    rebuilt = _rebuilt(folder)
    assert sum(isinstance(m, nn.ReLU6) for m in rebuilt.modules()) == relus
    assert not any(type(m) is nn.ReLU for m in rebuilt.modules())
    with torch.no_grad():  # equal to the model with every ReLU clamped at 6
        for module in model.modules():
            for name, child in module.named_children():
                if type(child) is nn.ReLU:
                    setattr(module, name, nn.ReLU6())
        torch.testing.assert_close(rebuilt(*args)[0], model(*args)[0], atol=0, rtol=0)


def test_insert_after_then_remove_identity(resnet, capsys):
    _, _, _, ir, folder = resnet
    convs = sum(impl.type == "conv2d" for impl in ir.values())
    identities = sum(impl.type == "identity" for impl in ir.values())  # 3, none of them called
    called = sum(ir[key].type == "identity" for key in call_sites(ir))
    code, out = _run(folder, capsys, "--pass", "insert-after", "--type", "conv2d", "--new-type", "identity",
                     "--pass", "remove-identity", "--verify", "-i", "1x3x32x32")
    assert code == 0, out
    assert f"insert-after: {convs} changes" in out and f"remove-identity: {convs + called} changes" in out
    assert "verify: OK" in out
    code, out = _run(folder, capsys, "--pass", "insert-after", "--type", "conv2d", "--new-type", "identity")
    assert code == 0 and sum(isinstance(m, nn.Identity) for m in _rebuilt(folder).modules()) == convs + identities


def test_fuse_qkv_and_remove_dropout_on_bert(tmp_path, capsys):
    model, args, kwargs, ir = _files(tmp_path, "bert")
    called = sum(ir[key].type == "dropout" for key in call_sites(ir))
    unused = sum(impl.type == "dropout" for impl in ir.values()) - called  # kept: the graphs never call them
    dropouts = called + len(find(ir, [DROPOUT_FUNCTIONS]))  # modules and functional dropouts
    code, out = _run(tmp_path, capsys, "--pass", "fuse-qkv", "--pass", "remove-dropout")
    assert code == 0, out
    assert "fuse-qkv: 2 changes" in out and f"remove-dropout: {dropouts} changes" in out and dropouts > 0
    rebuilt = _rebuilt(tmp_path)
    assert sum(isinstance(m, nn.Dropout) for m in rebuilt.modules()) == unused
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(*args, **kwargs)[0], model(*args, **kwargs)[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("extra, message", [
    (["--pass", "replace-type", "--type", "relu"], "replace-type needs --new-type and --type or --where"),
    (["--pass", "replace-type", "--new-type", "relu6"], "replace-type needs --new-type and --type or --where"),
    (["--pass", "insert-after", "--new-type", "identity"], "insert-after needs --type"),
    (["--pass", "insert-after", "--type", "conv2d", "--new-type", "identity", "--data", "[1]"], "--data"),
])
def test_missing_options_are_one_line_errors(resnet, capsys, extra, message):
    folder = resnet[-1]
    (folder / "out.ir.json").unlink(missing_ok=True)
    code = main(["rewrite", str(folder / "in.ir.json"), "-o", str(folder / "out.ir.json"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not (folder / "out.ir.json").exists()


def test_reparameterize(tmp_path, capsys):
    import torch2ir
    from tests.rewrite.helpers import randomize_batchnorms
    from tests.rewrite.test_reparam import Rep

    torch.manual_seed(0)
    model, x = nn.Sequential(Rep(8), Rep(8, stride=2)).eval(), torch.randn(1, 8, 8, 8)
    randomize_batchnorms(model)
    torch2ir.convert(model, (x,)).save(tmp_path / "in.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "in.safetensors")
    code, out = _run(tmp_path, capsys, "--pass", "reparameterize")
    assert code == 0 and "reparameterize: 2 changes" in out, out
    with torch.no_grad():
        torch.testing.assert_close(_rebuilt(tmp_path)(x), model(x), rtol=1e-5, atol=1e-5)
