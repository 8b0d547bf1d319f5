"""transformers' bidirectional mask, skipped while a conversion exports exactly when eager mode skips it
(``torch2ir.frontend.transformers_masks``; issue 49: Autoformer and Informer).

The model below uses the mask's *values* (the count of attended positions), so a traced program that builds the
all-attending mask eager mode never builds computes something else: ``y * length`` where eager returns ``y``.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from tests.torch2ir.cases import all_graphs
from torch2ir.frontend import transformers_masks

masking_utils = pytest.importorskip("transformers.masking_utils")
transformers = pytest.importorskip("transformers")


class Encoder(nn.Module):
    """A linear layer scaled by the number of positions transformers' mask lets each query see (eager mode:
    ``None`` without padding, so unscaled)."""

    def __init__(self) -> None:
        super().__init__()
        self.config = transformers.BertConfig(hidden_size=8, num_attention_heads=2, num_hidden_layers=1)
        self.config._attn_implementation = "sdpa"
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        mask = masking_utils.create_bidirectional_mask(config=self.config, inputs_embeds=x,
                                                       attention_mask=attention_mask)
        y = self.lin(x)
        return y if mask is None else y * mask[:, 0].sum(-1, keepdim=True).to(y.dtype)


def _types(ir: IR) -> set[str]:
    """The node types of every graph of ``ir`` (ATen operators as ``aten.<op>.<overload>``)."""
    return {attrs["type"] for impl in all_graphs(ir) for _, attrs in impl.graph.nodes(data=True)}


def test_an_unpadded_call_is_traced_without_the_mask_as_in_eager_mode() -> None:
    torch.manual_seed(0)
    model, x = Encoder().eval(), torch.randn(2, 5, 8)
    with pytest.raises(AssertionError):  # plain export builds the mask eager mode does not: another result
        torch.testing.assert_close(torch.export.export(model, (x,), strict=False).module()(x), model(x))
    ir = torch2ir.convert(model, (x,))
    assert not any(op in name for name in _types(ir) for op in ("arange", "where", "expand"))  # no mask built
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(x), model(x))
    assert torch2ir.convert(rebuilt, (x,)) == ir
    assert masking_utils._ignore_bidirectional_mask_sdpa.__module__ == "transformers.masking_utils"  # put back


def test_a_padded_call_still_builds_the_mask_from_its_values() -> None:
    torch.manual_seed(0)
    model, x = Encoder().eval(), torch.randn(2, 5, 8)
    mask = torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    ir = torch2ir.convert(model, (x,), {"attention_mask": mask})
    rebuilt = ir2torch.convert(ir, model.state_dict())
    other = torch.ones(2, 5, dtype=torch.long)
    other[0, 1:] = 0  # other values, same shape: computed from them, not specialised on the first ones
    for m in (mask, other):
        assert torch.equal(rebuilt(x, attention_mask=m), model(x, attention_mask=m))


def test_nothing_is_decided_when_the_eager_branch_would_not_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(padding_mask: object, kv_length: int, local_attention_size: int | None = None) -> bool:
        return False

    monkeypatch.setattr(masking_utils, "_ignore_bidirectional_mask_sdpa", never)
    with transformers_masks.eager_skip():
        assert masking_utils._ignore_bidirectional_mask_sdpa is never  # not replaced: its eager answer is False
    torch.manual_seed(0)
    model, x = Encoder().eval(), torch.randn(2, 5, 8)
    ir = torch2ir.convert(model, (x,))
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert torch.equal(rebuilt(x), model(x))  # the mask is built, in eager mode too
    assert torch.equal(model(x), model.lin(x) * 5)


def test_another_thread_gets_the_original_answer() -> None:
    seen: list[object] = []
    with transformers_masks.eager_skip():
        assert masking_utils._ignore_bidirectional_mask_sdpa(None, 4, None) is True
        with _exporting():
            assert masking_utils._ignore_bidirectional_mask_sdpa(None, 4, None) is True  # this thread: decided
            thread = threading.Thread(target=lambda: seen.append(
                masking_utils._ignore_bidirectional_mask_sdpa(None, 4, None)))
            thread.start()
            thread.join()
    assert seen == [False]  # the other thread "exports" too: the original's export branch answers


class _exporting:
    """``torch.compiler.is_exporting()`` true in every thread for the block (what an export sets)."""

    def __enter__(self) -> None:
        self.old = torch.compiler._is_exporting_flag
        torch.compiler._is_exporting_flag = True

    def __exit__(self, *_: object) -> None:
        torch.compiler._is_exporting_flag = self.old
