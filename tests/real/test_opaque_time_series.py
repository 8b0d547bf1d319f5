"""transformers' Autoformer and Informer with ``opaque="auto"`` (issue 49): export fails because transformers builds
the encoder's attention mask only when exporting and their attention does not take it. The opaque attention's traced
call differs from its eager call (``attention_mask`` a tensor against ``None``), so ``"auto"`` goes up to the
encoder (torch2ir.opaque.same_call); Informer's encoder also zips its layers with ``conv_layers = [conv, None]``,
whose ``None`` slot a rebuild must keep (common.none_slots). Exact against eager, and the loop closes.

``aten.squeeze.default``, which they call, is in the default operator surface: nothing is allowed here.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from benchmarks.sweep_registries import build
from common.opaque import named_classes

ALLOW: list[str] = []  # every operator these models call is in the default surface


@pytest.mark.parametrize("name", ["autoformer", "informer"])
def test_time_series_transformers_are_exact_with_their_encoder_opaque(name: str) -> None:
    torch.manual_seed(0)
    model, args, kwargs = build("transformers", name, 64)
    model.eval()
    ir = torch2ir.convert(model, args, kwargs, opaque="auto", allow=ALLOW)
    kept = {path: why for path, _, why in ir.capture.opaque}
    assert "encoder" in kept and "otherwise while traced" in kept["encoder"] and "None in eager mode" in kept["encoder"]
    assert ir["decoder"].type == "module"  # traced around its opaque attentions
    if name == "informer":
        assert ir["encoder.conv_layers"].meta["none_children"] == ["1"]
    allow = sorted({c for _, c, _ in ir.capture.opaque} | set(named_classes(ir.values()))) + ALLOW
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=allow)
    torch.manual_seed(0)  # Informer's ProbSparse attention samples keys in eval mode too
    with torch.no_grad():
        expected = pytree.tree_leaves(model(*args, **kwargs))
    torch.manual_seed(0)
    with torch.no_grad():
        got = pytree.tree_leaves(rebuilt(*args, **kwargs))
    assert len(expected) == len(got)
    assert all(torch.equal(a, b) for a, b in zip(expected, got, strict=True) if isinstance(a, torch.Tensor))
    assert torch2ir.convert(rebuilt, args, kwargs, opaque="auto", allow=ALLOW) == ir
