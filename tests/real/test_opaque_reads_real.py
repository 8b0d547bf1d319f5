"""Cosmos3-Edge (transformers, the sweep's shrunk configuration): its model's own forward does not trace, so it is
an opaque root; its code embeds the token ids with ``self.get_input_embeddings()`` (the language model's
``embed_tokens``) and reads ``self.projector.spatial_merge_size``. Both children were kept opaque for it (16.0 % of
the parameters at the default dimensions); the reads are carried now (``common.opaque_reads``), so the language
model and the projector are graphs, the rebuild is exact and converting it gives the same IR."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from common.opaque import named_classes, traced_alone
from common.opaque_reads import READS_KEY

pytest.importorskip("transformers.models.cosmos3_edge")


def test_cosmos3_edges_language_model_and_projector_are_graphs() -> None:
    from benchmarks.sweep_transformers import transformers_model

    model, args, kwargs = transformers_model("cosmos3_edge")
    model.eval()
    ir = torch2ir.convert(model, args, kwargs, opaque="auto")
    assert [p for p, _, _ in ir.capture.opaque] == ["", "visual", "visual.embeddings", "visual.encoder.layers.0",
                                                    "visual.encoder.layers.1"]
    assert {"language_model", "projector"} <= set(traced_alone(ir))
    assert ir["language_model"].meta[READS_KEY] == {"modules": {"get_input_embeddings": "embed_tokens"}}
    assert ir["projector"].meta[READS_KEY] == {"attributes": {"spatial_merge_size": 2}}
    allow = sorted({c for _, c, _ in ir.capture.opaque} | set(named_classes(ir.values())))
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=allow)
    with torch.no_grad():
        expected = pytree.tree_leaves(model(*args, **kwargs))
        got = pytree.tree_leaves(rebuilt(*args, **kwargs))
    assert len(expected) == len(got) and all(torch.equal(a, b) for a, b in zip(expected, got, strict=True)
                                             if isinstance(a, torch.Tensor))
    assert torch2ir.convert(rebuilt, args, kwargs, opaque="auto") == ir
