"""The view's layout on torchvision's ResNet-50 (its residual edges are the case the first layout drew behind the
batch norms): every graph checked in a real browser has no edge through a node that is not its end, no label over
another label or a node, nothing outside the canvas (tests/view/geometry.py)."""

from __future__ import annotations

import functools

import pytest
import torch

import torch2ir
from tests.ecosystems import load
from tests.view.browser import dump_dom
from tests.view.geometry import drawing, problems, shown_count


@functools.cache
def _resnet50():
    torchvision = load.torchvision()
    torch.manual_seed(0)
    model = torchvision.models.resnet50().eval()
    return torch2ir.convert(model, (torch.randn(1, 3, 64, 64),))


@pytest.mark.parametrize("key", ["root", "layer1", "layer1.0", "layer4.2"])
def test_resnet50_graphs_are_drawn_without_crossings_or_overlaps(key, tmp_path):
    ir = _resnet50()
    page = ir.view(tmp_path / "resnet50.html")
    d = drawing(dump_dom(f"{page.as_uri()}#graph={key}&stack=0", tmp_path))  # each block's call on its own
    assert d.count == shown_count(ir, key) and d.edges and d.labels
    assert problems(d) == [], key
