"""Saved torchvision, timm and diffusers models rebuild their alike blocks from one template each
(``ir2torch.rebuild.instances``), exactly as each block built on its own and as the eager model.

Each model is converted, saved (alike blocks stored once, as shared bodies) and loaded; the rebuild of the loaded
IR is compared with the eager model (outputs equal, ``atol=0``) and with the rebuild of the same IR expanded
(every implementation its own graph): the same generated code and graph in every module.
"""

from __future__ import annotations

import pytest
import torch
from torch import fx

import ir2torch
import torch2ir
from common import IR
from tests.helpers import same_outputs


def _from_template(module: torch.nn.Module) -> bool:
    """Whether ``module`` was rebuilt from a template: its class makes its graph copy when first read."""
    return isinstance(type(module).__dict__.get("_graph"), property)


def _check(model: torch.nn.Module, args: tuple, kwargs: dict, tmp_path, minimum: int) -> None:
    ir = torch2ir.convert(model, args, kwargs)
    path = ir.save(tmp_path / "model.ir.json")
    loaded, expanded = IR.load(path), IR.load(path)
    for key in expanded:  # reading a graph expands an instance of a shared body
        assert expanded[key].graph is not None
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    alone = ir2torch.convert(expanded, model.state_dict())
    templated = [k for k, m in rebuilt.named_modules() if _from_template(m)]
    assert len(templated) >= minimum, templated
    assert not any(_from_template(m) for m in alone.modules())
    with torch.no_grad():
        expected = model(*args, **kwargs)
        assert same_outputs(rebuilt(*args, **kwargs), expected)
        assert same_outputs(alone(*args, **kwargs), expected)
    for key in templated:
        mine, theirs = rebuilt.get_submodule(key), alone.get_submodule(key)
        assert isinstance(theirs, fx.GraphModule)
        assert mine.code == theirs.code
        assert str(mine.graph) == str(theirs.graph)
    assert torch2ir.convert(rebuilt, args, kwargs) == ir


def test_torchvision_resnet50_bottlenecks(tv, tmp_path) -> None:
    torch.manual_seed(0)
    model = tv.models.resnet50(num_classes=10).eval()
    # layer3 has six bottlenecks, five alike (the first downsamples); layer2 and layer4 have 3 and 2 alike
    _check(model, (torch.randn(1, 3, 64, 64),), {}, tmp_path, minimum=6)


def test_timm_vit_blocks(timm, tmp_path) -> None:
    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=64).eval()
    _check(model, (torch.randn(2, 3, 64, 64),), {}, tmp_path, minimum=11)


def test_diffusers_unet_resnet_blocks(diffusers, tmp_path) -> None:
    torch.manual_seed(0)
    model = diffusers.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=2,
                                  block_out_channels=(16, 32), norm_num_groups=8,
                                  down_block_types=("DownBlock2D", "DownBlock2D"),
                                  up_block_types=("UpBlock2D", "UpBlock2D")).eval()
    args = (torch.randn(1, 3, 16, 16), torch.tensor([10]))
    _check(model, args, {}, tmp_path, minimum=1)


@pytest.mark.parametrize("name", ["resnet18"])
def test_an_instance_that_is_never_read_costs_no_graph(tv, tmp_path, name) -> None:
    torch.manual_seed(0)
    model = getattr(tv.models, name)(num_classes=10).eval()
    x = torch.randn(1, 3, 32, 32)
    loaded = IR.load(torch2ir.convert(model, (x,)).save(tmp_path / "m.ir.json"))
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    templated = [m for m in rebuilt.modules() if _from_template(m)]
    assert templated and all("_graph" not in m.__dict__ for m in templated)
    with torch.no_grad():
        assert torch.equal(rebuilt(x), model(x))
    assert all("_graph" not in m.__dict__ for m in templated)  # running needs the code, not the graph
