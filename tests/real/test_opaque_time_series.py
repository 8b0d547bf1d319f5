"""transformers' Autoformer and Informer (issue 49): plain ``torch.export`` fails on them because transformers builds
the encoder's attention mask only when exporting, and their attention (FFT autocorrelation, ProbSparse) fails with
a mask. A conversion's export skips that mask exactly when eager mode does (no padding mask, no local window:
``torch2ir.frontend.transformers_masks``), so both are traced whole, with no opaque leaf: exact against eager, and
the loop closes.

``aten.squeeze.default`` and ``aten.randint.low`` (Informer samples keys in eval mode), which they call, are in
the default operator surface: nothing is allowed here.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from benchmarks.sweep_registries import build


def _outputs(module: torch.nn.Module, args: tuple, kwargs: dict) -> list:
    torch.manual_seed(0)  # Informer's ProbSparse attention samples keys in eval mode too
    with torch.no_grad():
        return pytree.tree_leaves(module(*args, **kwargs))


@pytest.mark.parametrize("name", ["autoformer", "informer"])
def test_time_series_transformers_are_traced_whole_and_exact(name: str) -> None:
    torch.manual_seed(0)
    model, args, kwargs = build("transformers", name, 64)
    model.eval()
    with pytest.raises(Exception, match="shape|size"):  # plain export builds the mask the attention fails on
        torch.export.export(model, args, kwargs, strict=False)
    ir = torch2ir.convert(model, args, kwargs, opaque="auto")
    assert ir.capture.opaque == []  # nothing is left opaque: the whole model is a graph
    assert ir["encoder.layers.0.self_attn"].type == "module"
    if name == "informer":
        assert ir["encoder.conv_layers"].meta["none_children"] == ["1"]
    rebuilt = ir2torch.convert(ir, model.state_dict())
    expected, got = _outputs(model, args, kwargs), _outputs(rebuilt, args, kwargs)
    assert len(expected) == len(got)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True) if isinstance(a, torch.Tensor))
    assert torch2ir.convert(rebuilt, args, kwargs) == ir
