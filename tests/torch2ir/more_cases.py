"""Handler cases of the classes added for issue #15 point 4 (cells, distances, fold, unpool, losses).

Each entry is ``(module, inputs, marks)`` like ``tests/torch2ir/test_handlers.py``'s ``CASES``, which
includes these. Losses here are unweighted (a weight is state, checked in ``test_more_handlers.py``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

Inputs = Callable[[], tuple[Any, ...]]

NLL2D_DEPRECATED = pytest.mark.filterwarnings("ignore:`NLLLoss2d` has been deprecated")


def _randn(*shapes: tuple[int, ...]) -> Inputs:
    return lambda: tuple(torch.randn(shape) for shape in shapes)


def _unpool(dims: int) -> Inputs:
    """Pooled values and their indices (from a real max pool) for a MaxUnpool of ``dims`` dimensions."""
    pool = (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d)[dims - 1](2, stride=2, return_indices=True)
    return lambda: pool(torch.randn((1, 2, *(4,) * dims)))


def _classes(n: int = 4, c: int = 3) -> Inputs:
    return lambda: (torch.randn(n, c), torch.randint(0, c, (n,)))


def _signs(*shapes: tuple[int, ...]) -> Inputs:
    """Standard-normal inputs and a target of +-1 of the last shape."""
    return lambda: (*(torch.randn(s) for s in shapes[:-1]), torch.randint(0, 2, shapes[-1]).float() * 2 - 1)


def _ctc() -> tuple[torch.Tensor, ...]:
    log_probs = torch.randn(6, 2, 5).log_softmax(2)
    return log_probs, torch.randint(1, 5, (2, 3)), torch.tensor([6, 5]), torch.tensor([3, 2])


def _multilabel() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(2, 4), torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1]])


def _gaussian() -> tuple[torch.Tensor, ...]:
    return torch.randn(2, 3), torch.randn(2, 3), torch.rand(2, 3)


def _nll2d() -> nn.Module:
    """An ``NLLLoss2d`` (deprecated: torch warns when one is made; the class still exists and is handled)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return nn.NLLLoss2d(ignore_index=2)


CASES: list[tuple[nn.Module, Inputs, tuple]] = [
    # shape
    (nn.Fold((4, 5), (2, 2), dilation=1, padding=1, stride=(1, 2)), _randn((1, 12, 15)), ()),
    (nn.Unfold((2, 3), dilation=2, padding=(1, 0), stride=2), _randn((1, 3, 6, 7)), ()),
    # distance
    (nn.CosineSimilarity(dim=2, eps=1e-4), _randn((2, 3, 4), (2, 3, 4)), ()),
    (nn.PairwiseDistance(p=1.5, eps=1e-3, keepdim=True), _randn((3, 4), (3, 4)), ()),
    # pooling
    (nn.MaxUnpool1d(2, stride=2), _unpool(1), ()),
    (nn.MaxUnpool2d((2, 2), stride=(2, 2), padding=0), _unpool(2), ()),
    (nn.MaxUnpool3d(2), _unpool(3), ()),
    # norm
    (nn.CrossMapLRN2d(3, alpha=1e-3, beta=0.5, k=2.0), _randn((2, 4, 5, 5)), ()),
    # recurrent cells
    (nn.RNNCell(4, 5, bias=False, nonlinearity="relu"), _randn((2, 4), (2, 5)), ()),
    (nn.LSTMCell(4, 5, bias=False), _randn((2, 4)), ()),  # (h, c) given: tests/torch2ir/test_more_handlers.py
    (nn.GRUCell(4, 5), _randn((2, 4), (2, 5)), ()),
    # loss
    (nn.L1Loss(reduction="sum"), _randn((2, 3), (2, 3)), ()),
    (nn.MSELoss(reduction="none"), _randn((2, 3), (2, 3)), ()),
    (nn.HuberLoss(reduction="sum", delta=0.5), _randn((2, 3), (2, 3)), ()),
    (nn.SmoothL1Loss(beta=0.3), _randn((2, 3), (2, 3)), ()),
    (nn.KLDivLoss(reduction="batchmean", log_target=True), _randn((2, 3), (2, 3)), ()),
    (nn.SoftMarginLoss(reduction="sum"), _signs((2, 3), (2, 3)), ()),
    (nn.BCELoss(reduction="sum"), lambda: (torch.rand(2, 3), torch.rand(2, 3)), ()),
    (nn.BCEWithLogitsLoss(reduction="none"), _randn((2, 3), (2, 3)), ()),
    (nn.MultiLabelSoftMarginLoss(reduction="sum"), lambda: (torch.randn(2, 3), torch.rand(2, 3).round()), ()),
    (nn.MultiLabelMarginLoss(reduction="none"), _multilabel, ()),
    (nn.CosineEmbeddingLoss(margin=0.2, reduction="sum"), _signs((3, 4), (3, 4), (3,)), ()),
    (nn.HingeEmbeddingLoss(margin=0.5), _signs((2, 3), (2, 3)), ()),
    (nn.MarginRankingLoss(margin=0.1, reduction="none"), _signs((4,), (4,), (4,)), ()),
    (nn.MultiMarginLoss(p=2, margin=0.5, reduction="sum"), _classes(), ()),
    (nn.NLLLoss(ignore_index=1, reduction="sum"), _classes(), ()),
    (_nll2d(), lambda: (torch.randn(2, 3, 4, 4), torch.randint(0, 3, (2, 4, 4))), (NLL2D_DEPRECATED,)),
    (nn.CrossEntropyLoss(ignore_index=0, reduction="sum", label_smoothing=0.2), _classes(), ()),
    (nn.CTCLoss(blank=0, reduction="sum", zero_infinity=True), _ctc, ()),
    (nn.GaussianNLLLoss(full=True, eps=1e-3, reduction="sum"), _gaussian, ()),
    (nn.PoissonNLLLoss(log_input=False, full=True, eps=1e-4), lambda: (torch.rand(2, 3), torch.rand(2, 3) * 3), ()),
    (nn.TripletMarginLoss(margin=0.5, p=1.0, eps=1e-5, swap=True), _randn((3, 4), (3, 4), (3, 4)), ()),
]
