"""One PT2E stage of a model, through the IR: exported, prepared by a torchao quantizer (PTQ or QAT), calibrated,
maybe converted; converted to the IR with ``quantized_decomposed::*`` allowed and rebuilt from a copy of its
state taken before; then the two run alike (seeded, so dropout draws the same), and their states stay equal."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

import ir2torch
import torch2ir

ALLOW = ["quantized_decomposed::*"]


def quantizer(name: str, qat: bool) -> Any:
    """torchao's X86 quantizer or XNNPACK's (from torchao's testing package) with its default configuration."""
    if name == "x86":
        from torchao.quantization.pt2e.quantizer.x86_inductor_quantizer import (
            X86InductorQuantizer,
            get_default_x86_inductor_quantization_config,
        )

        return X86InductorQuantizer().set_global(get_default_x86_inductor_quantization_config(is_qat=qat))
    from torchao.testing.pt2e._xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config

    return XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_qat=qat))


def staged(model: nn.Module, args: tuple, name: str, qat: bool, convert: bool) -> nn.Module:
    """``model`` exported, prepared with quantizer ``name``, calibrated twice on ``args``, maybe converted."""
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e, prepare_qat_pt2e

    graph = torch.export.export(model.train(qat), args).module()
    prepared = (prepare_qat_pt2e if qat else prepare_pt2e)(graph, quantizer(name, qat))
    for _ in range(2):
        prepared(*args)
    return convert_pt2e(prepared) if convert else prepared


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN where the other is NaN (a fake quantizer calibrated on a zero range gives NaN statistics)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    return a.is_floating_point() and torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())


def assert_stage_round_trips(model: nn.Module, args: tuple) -> torch2ir.IR:
    """Convert ``model`` (a :func:`staged` one) and rebuild it: outputs equal over two calls, states equal after."""
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ir = torch2ir.convert(model, args, allow=ALLOW)
    after = model.state_dict()
    assert [k for k, v in state.items() if not _same(after[k], v)] == []  # converting changed nothing
    rebuilt = ir2torch.convert(ir, state, allow=ALLOW)
    for step in range(2):
        torch.manual_seed(step)
        want = model(*args)
        torch.manual_seed(step)
        got = rebuilt(*args)
        want = want if isinstance(want, torch.Tensor) else want[0]
        got = got if isinstance(got, torch.Tensor) else got[0]
        assert want.abs().nan_to_num().sum() > 0 and _same(got, want), f"call {step}: {(got - want).abs().max()}"
    want_state, got_state = model.state_dict(), rebuilt.state_dict()
    assert want_state.keys() == got_state.keys()
    assert [k for k, v in want_state.items() if not _same(got_state[k], v)] == []
    return ir
