"""timm models converted with a dynamic batch keep every module's call signature.

Export computes the batch size once and reads it wherever a block reshapes by it (attention heads, Swin's
windows, LeViT's stages); each module now computes the sizes it reads from its own arguments
(:mod:`torch2ir.hierarchy.local_sizes`). Before, 15 to 36 modules of each of these models fell back to data-flow
arguments under ``dynamic_shapes`` and could not be swapped. Outputs stay exact at other batch sizes and the loop
is a fixpoint.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import ir2torch
import torch2ir

CASES = {  # name -> constructor arguments (small images where the architecture allows them)
    "deit_tiny_patch16_224": {"img_size": 64},
    "swin_tiny_patch4_window7_224": {"img_size": 64, "window_size": 4},
    "levit_128s": {"img_size": 64},
    "coat_lite_tiny": {"img_size": 64},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_dynamic_batch_keeps_every_signature(timm, name):
    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **CASES[name]).eval()
    x = torch.randn(2, 3, 64, 64)
    dims = {"x": {0: Dim("batch", min=2, max=16)}}
    ir = torch2ir.convert(model, (x,), dynamic_shapes=dims)
    unsigned = [k for k, impl in ir.items() if k != "root" and impl.type == "module" and impl.node_count
                and "forward_arg_names" not in impl.meta]
    assert unsigned == []
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for batch in (3, 16):
        y = torch.randn(batch, 3, 64, 64)
        with torch.no_grad():
            torch.testing.assert_close(rebuilt(y), model(y), rtol=0, atol=0)
    assert torch2ir.convert(rebuilt, (x,), dynamic_shapes=dims) == ir
