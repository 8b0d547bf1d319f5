"""PT2E at every stage on a small BERT (random weights): PTQ-prepared while it calibrates, PTQ-converted,
QAT-prepared while it trains, QAT-converted, with torchao's X86 and XNNPACK quantizers: exact outputs, and the
observers' and fake quantizers' statistics equal after each call (tests/quant/pt2e_stages.py)."""

from __future__ import annotations

import pytest
import torch

from tests.quant.pt2e_stages import assert_stage_round_trips, staged

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")


def _bert() -> tuple[torch.nn.Module, tuple]:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=37, attn_implementation="eager")
    return BertModel(config), (torch.randint(0, 100, (2, 8), generator=torch.Generator().manual_seed(0)),)


@pytest.mark.parametrize("stage", ["ptq_prepared", "ptq_converted", "qat_prepared", "qat_converted"])
@pytest.mark.parametrize("quantizer", ["x86", "xnnpack"])
def test_bert_round_trips_at_every_pt2e_stage(quantizer: str, stage: str) -> None:
    model, args = _bert()
    quantized = staged(model, args, quantizer, qat=stage.startswith("qat"), convert=stage.endswith("converted"))
    ir = assert_stage_round_trips(quantized, args)
    types = {impl.type for impl in ir.values()}
    if stage == "ptq_prepared":  # the observers are the real torchao classes, not their traces
        assert types & {"pt2e_histogramobserver", "pt2e_minmaxobserver"}
