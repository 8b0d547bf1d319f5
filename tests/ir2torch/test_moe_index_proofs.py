"""Mixture-of-experts decoding with the experts' index bounds proven from the graph
(:mod:`ir2torch.run_safety.index_provenance`, issue 52): Mixtral's and Qwen2-MoE's experts index with a sort's
indices, their floor quotients and the sort's inverse permutation; a decoding step of the rebuild reads none of
those values (the embedding's token ids and, where the mask is built, its indices still are), and its logits and
cache equal, bit for bit, those of the same rebuild built with no proof (every index read, as before)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

import ir2torch
from ir2torch.run_safety import index_checks, node_checks
from tests.ir2torch.test_decoding_fast_paths import _SIZES, _step

transformers = pytest.importorskip("transformers")

from torch2ir.generation import convert_for_generation  # noqa: E402

_MODELS: dict[str, Callable[[], nn.Module]] = {
    "mixtral": lambda: transformers.MixtralForCausalLM(transformers.MixtralConfig(
        **_SIZES, num_local_experts=4, num_experts_per_tok=2)),
    "qwen2_moe": lambda: transformers.Qwen2MoeForCausalLM(transformers.Qwen2MoeConfig(
        **_SIZES, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=32)),
}


def _is_proven(target: object) -> bool:
    """A node target that skips reading proven indices (an in-place one inside its write check)."""
    if not isinstance(target, node_checks.CheckedCall):
        return False
    if target.func is node_checks._run_write_checked:
        return _is_proven(target.args[1])
    return target.func is node_checks._run_index_proven


def _proven(model: nn.Module) -> int:
    """How many nodes of ``model``'s graphs skip reading proven indices."""
    return sum(1 for m in model.modules() if hasattr(m, "graph") for n in m.graph.nodes if _is_proven(n.target))


@pytest.mark.parametrize("name", sorted(_MODELS))
def test_moe_decoding_reads_no_proven_index_and_is_unchanged(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    original = _MODELS[name]().eval()
    ir = convert_for_generation(original)
    state = original.state_dict()
    proven = ir2torch.convert(ir, state)
    with monkeypatch.context() as patch:
        patch.setattr(node_checks, "proven_indices", lambda node: ())
        unproven = ir2torch.convert(ir, state)
    assert _proven(unproven) == 0
    assert _proven(proven) == 4 * 2  # index three times and index_put_ in each of the 2 layers' experts
    reads: list[tuple[int, ...]] = []
    bounds = index_checks._bounds

    def counted(t: torch.Tensor) -> tuple[int, int]:
        reads.append(tuple(t.shape))
        return bounds(t)

    monkeypatch.setattr(index_checks, "_bounds", counted)
    for batch, past, new in ((1, 9, 1), (3, 20, 1), (2, 5, 3)):
        args = (batch, past, new, False, 2)
        reads.clear()
        fast = _step(proven, *args, eager=False)
        fast_reads = list(reads)
        reads.clear()
        slow = _step(unproven, *args, eager=False)
        experts = (batch * new * 2,)  # the experts' indices: one per token and chosen expert
        assert experts not in fast_reads and (batch, new) in fast_reads, fast_reads  # the token ids are read
        assert sorted(reads) == sorted(fast_reads + [experts] * 4 * 2), (reads, fast_reads)
        assert all(torch.equal(a, b) for a, b in zip(fast, slow, strict=True))
