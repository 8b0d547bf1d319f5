"""diffusers' Lumina2 with ``opaque="auto"`` (issue 49): its root's own forward does not trace (``unhashable type:
non-nested SymInt``), so it is an opaque root, constructed again from the arguments ``register_to_config`` kept, its
children traced on their own. Its ``rope_embedder`` reads lengths from the mask (``tolist()``): export's runtime
assertions on them came back in another order when the rebuild was converted again, until the IR wrote such runs in
one order (torch2ir.hierarchy.symbolic_order). Exact against eager, and converting the rebuild gives the same IR.

Its blocks call ``aten.view_as_complex``, in the default operator surface: no operator is allowed here.
"""

from __future__ import annotations

import torch

import ir2torch
import torch2ir
from common.opaque import named_classes

ALLOW: list[str] = []  # every operator these models call is in the default surface


def test_lumina2_is_exact_and_a_fixpoint_as_an_opaque_root(diffusers) -> None:
    from benchmarks.sweep_diffusers import more_diffusers

    torch.manual_seed(0)
    model, args, kwargs = more_diffusers()["lumina2"]()
    model.eval()
    ir = torch2ir.convert(model, args, kwargs, opaque="auto", allow=ALLOW)
    assert [p for p, _, _ in ir.capture.opaque] == [""]
    assert ir["rope_embedder"].type == "module"
    allow = sorted({c for _, c, _ in ir.capture.opaque} | set(named_classes(ir.values()))) + ALLOW
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=allow)
    with torch.no_grad():
        assert torch.equal(rebuilt(*args, **kwargs)[0], model(*args, **kwargs)[0])
    again = torch2ir.convert(rebuilt, args, kwargs, opaque="auto", allow=ALLOW)
    assert again["rope_embedder"] == ir["rope_embedder"]
    assert again == ir
