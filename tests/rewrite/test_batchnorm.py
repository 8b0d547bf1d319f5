"""fold_batchnorm on the corpus' CNNs: every BN after a Conv/Linear folded, outputs within 1e-5, strict loading,
JSON round trip of the rewritten IR."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import ir2torch
import torch2ir
from common.compare import equal
from common.errors import StateDictError
from common.ir import IR
from common.rewrite import RewriteError, find, fold_batchnorm
from common.rewrite.batchnorm import CONVS, NORMS
from common.state_dict import save_safetensors
from common.verify import verify
from tests.rewrite.helpers import corpus_model, randomize_batchnorms

#: corpus CNN -> batch norms folded: every one. EfficientNet's depthwise convolutions are an nn.Conv2d subclass (a
#: "module" rebuilt from its graph, 7 BNs) and LeViT normalizes a flattened Linear output through a reshape (22).
FOLDED = {"resnet": 6, "resnet_bottleneck": 12, "regnet": 9, "mobilenet_v1": 27, "mobilenet_v2": 52,
          "efficientnet": 22, "mobilevit": 32, "segformer": 1, "levit": 26}
#: of those, folded through a module computing one convolution / through a reshape: the fold's change line says so
VIA = {"efficientnet": ("module (one convolution)", 7), "levit": ("(through a reshape)", 22)}


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_fold_batchnorm_on_corpus_cnns(name, tmp_path):
    model, args, kwargs, ir = corpus_model(name)
    bns = sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    new_ir, new_state = result = fold_batchnorm(ir, model.state_dict())
    assert result.count == FOLDED[name], result.changes
    how, count = VIA.get(name, ("(through a reshape)", 0))
    assert sum(how in line for line in result.changes) == count, result.changes
    assert find(new_ir, [CONVS, NORMS]) == []  # every BN right after a Conv/Linear is gone
    left = [k for k, impl in new_ir.items() if impl.type in NORMS]
    assert len(left) == bns - FOLDED[name] == len(result.skipped), result.skipped
    rebuilt = ir2torch.convert(new_ir, new_state)  # strict=True
    assert sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in rebuilt.modules()) == len(left)
    report = verify(model, rebuilt, args, kwargs, atol=1e-5, rtol=0, rewritten=new_ir)
    assert report.ok and report.max_abs_diff < 1e-5, report
    # JSON round trip: the file (with its provenance) loads to an equal IR that rebuilds the same model
    new_ir.save(tmp_path / "folded.ir.json")
    save_safetensors(new_state, tmp_path / "folded.safetensors")
    loaded = IR.load(tmp_path / "folded.ir.json")
    assert loaded == new_ir
    again = ir2torch.convert(loaded, tmp_path / "folded.safetensors")
    with torch.no_grad():
        assert torch.equal(again(*args, **kwargs)[0], rebuilt(*args, **kwargs)[0])


def test_the_original_state_is_refused_for_the_folded_ir():
    model, _, _, ir = corpus_model("resnet")
    new_ir, _ = fold_batchnorm(ir, model.state_dict())
    with pytest.raises(StateDictError, match="modules a rewrite replaced"):
        ir2torch.convert(new_ir, model.state_dict())


def test_provenance_names_the_conv_and_the_batch_norm():
    model, _args, _kwargs, ir = corpus_model("resnet")
    new_ir, _ = fold_batchnorm(ir, model.state_dict())
    conv = new_ir["embedder.embedder.convolution"]
    assert conv.meta["provenance"] == [{"pass": "fold_batchnorm", "from": [
        {"key": "embedder.embedder.convolution", "type": "conv2d", "source": "embedder.embedder.convolution"},
        {"key": "embedder.embedder.normalization", "type": "batchnorm2d",
         "source": "embedder.embedder.normalization"}]}]
    assert conv.data["bias"] is True and "embedder.embedder.normalization" not in new_ir


def test_verify_without_provenance_reports_the_conv_as_diverging():
    """The folded conv computes conv + BN: only ``rewritten=`` tells verify what to compare it with."""
    model, args, kwargs, ir = corpus_model("resnet")
    new_ir, new_state = fold_batchnorm(ir, model.state_dict())
    rebuilt = ir2torch.convert(new_ir, new_state)
    plain = verify(model, rebuilt, args, kwargs)
    assert plain.ok and plain.first_divergence is not None
    assert plain.first_divergence.path == "embedder.embedder.convolution"
    assert verify(model, rebuilt, args, kwargs, rewritten=new_ir).first_divergence is None


def test_fold_needs_the_state():
    _, _, _, ir = corpus_model("resnet")
    with pytest.raises(RewriteError, match="no state was given"):
        fold_batchnorm(ir, None)


def test_a_shared_conv_is_not_folded():
    class Twice(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            return self.bn(self.conv(x)) + self.conv(x).mean()

    import torch2ir

    model = Twice().eval()
    x = torch.randn(1, 3, 8, 8)
    result = fold_batchnorm(torch2ir.convert(model, (x,)), model.state_dict())
    assert result.count == 0 and "called more than once" in result.skipped[0]


class _BatchNormAct(nn.BatchNorm2d):
    """A BatchNorm2d subclass with a forward of its own (batch norm, then its activation), as timm's
    ``BatchNormAct2d``: rebuilt from its graph, not as a BatchNorm2d."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.1, self.eps)
        return F.relu(x)


def _conv_bn_act() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), _BatchNormAct(4), nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4)).eval()
    randomize_batchnorms(model)
    return model, torch.randn(1, 3, 8, 8)


class _Concat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x, x * 2], 1)


def _cat_bn_act() -> tuple[nn.Module, torch.Tensor]:
    """A ``_BatchNormAct`` after a concatenation (DenseNet's norm1): no layer to fold it into."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), _Concat(), _BatchNormAct(8), nn.Conv2d(8, 4, 1),
                          nn.BatchNorm2d(4)).eval()
    randomize_batchnorms(model)
    return model, torch.randn(1, 3, 8, 8)


def test_a_batch_norm_subclass_folds_into_the_conv_and_keeps_its_activation():
    model, x = _conv_bn_act()
    ir = torch2ir.convert(model, (x,))
    result = fold_batchnorm(ir, model.state_dict())
    assert result.count == 2 and result.skipped == []
    assert "0: conv2d + the batch norm of 1 (aten.batch_norm.default; keeps aten.relu.default) -> conv2d" \
        in result.changes
    norm = result.ir["1"]
    assert norm.state == {}  # its statistics went into the conv
    assert [norm.node(n).get("implementation") for n in norm.nodes if norm.node(n)["type"] == "function"] == \
        ["aten.relu.default"]
    rebuilt = ir2torch.convert(*result)
    torch.testing.assert_close(rebuilt(x), model(x), atol=1e-5, rtol=0)
    assert equal(torch2ir.convert(rebuilt, (x,)), result.ir, ignore=("provenance",))


class _BatchNormOnly(nn.BatchNorm2d):
    """A subclass computing nothing after its batch norm: once folded, nothing of it is left."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.1, self.eps)


def test_a_batch_norm_subclass_with_nothing_after_it_goes_like_a_batch_norm():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), _BatchNormOnly(4)).eval()
    randomize_batchnorms(model)
    x = torch.randn(2, 3, 8, 8)
    result = fold_batchnorm(torch2ir.convert(model, (x,)), model.state_dict())
    assert result.count == 1 and "1" not in result.ir and "0.bias" in result.state
    rebuilt = ir2torch.convert(*result)
    torch.testing.assert_close(rebuilt(x), model(x), atol=1e-5, rtol=0)
    assert equal(torch2ir.convert(rebuilt, (x,)), result.ir, ignore=("provenance",))


class _BatchStatsAct(nn.BatchNorm2d):
    """Normalizes with the batch's own statistics even in eval mode: nothing to fold."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.batch_norm(x, None, None, self.weight, self.bias, True, 0.1, self.eps))


def test_a_module_computing_its_own_batch_norm_is_listed_not_silently_skipped():
    model, x = _cat_bn_act()
    result = fold_batchnorm(torch2ir.convert(model, (x,)), model.state_dict())
    assert result.count == 1  # the plain BatchNorm2d after the 1x1 conv
    assert len(result.skipped) == 1, result.skipped
    assert result.skipped[0].startswith("2 (") and "_BatchNormAct" in result.skipped[0]
    assert "computes aten.batch_norm.default in its own graph; not folded: it does not follow" in result.skipped[0]
    stats = nn.Sequential(nn.Conv2d(3, 4, 3), _BatchStatsAct(4)).eval()
    result = fold_batchnorm(torch2ir.convert(stats, (x,)), stats.state_dict())
    assert result.count == 0 and len(result.skipped) == 1
    assert "not first on its input in eval form" in result.skipped[0]


def test_the_cli_lists_what_it_left_alone_and_strict_refuses_to_write(tmp_path, capsys):
    from ir2torch.cli import main

    model, x = _cat_bn_act()
    torch2ir.convert(model, (x,)).save(tmp_path / "in.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "in.safetensors")
    common = ["rewrite", str(tmp_path / "in.ir.json"), "--pass", "fold-batchnorm", "--state",
              str(tmp_path / "in.safetensors"), "--state-out", str(tmp_path / "out.safetensors")]
    assert main([*common, "-o", str(tmp_path / "out.ir.json")]) == 0
    out = capsys.readouterr().out
    assert "fold-batchnorm: 1 change, 1 left alone" in out and "  left alone: 2 (" in out
    assert main([*common, "-o", str(tmp_path / "strict.ir.json"), "--strict"]) == 1
    assert "nothing written: --strict and 1 left alone" in capsys.readouterr().out
    assert not (tmp_path / "strict.ir.json").exists()
