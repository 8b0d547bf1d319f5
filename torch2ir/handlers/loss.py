"""Handlers of loss modules (their plain constructor arguments; weight tensors are state).

``size_average`` and ``reduce`` are deprecated and folded into ``reduction`` by torch at
construction, so ``reduction`` alone says how a loss reduces. The class-weight tensors
(``weight``, ``pos_weight``) are buffers: they are recorded as state, never as data, and
the builder recreates them from the state records (see ``ir2torch.handlers.loss``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

from torch2ir.handlers._base import register_table

if TYPE_CHECKING:
    from torch2ir.converter import Torch2Ir

_R = ("reduction",)
_MARGIN = ("margin", "reduction")
_NLL = ("ignore_index", "reduction")

TABLE: dict[type[nn.Module], tuple[str, ...]] = {
    nn.L1Loss: _R,
    nn.MSELoss: _R,
    nn.SoftMarginLoss: _R,
    nn.MultiLabelMarginLoss: _R,
    nn.MultiLabelSoftMarginLoss: _R,
    nn.BCELoss: _R,
    nn.BCEWithLogitsLoss: _R,
    nn.HuberLoss: ("reduction", "delta"),
    nn.SmoothL1Loss: ("reduction", "beta"),
    nn.KLDivLoss: ("reduction", "log_target"),
    nn.CosineEmbeddingLoss: _MARGIN,
    nn.HingeEmbeddingLoss: _MARGIN,
    nn.MarginRankingLoss: _MARGIN,
    nn.MultiMarginLoss: ("p", "margin", "reduction"),
    nn.NLLLoss: _NLL,
    nn.NLLLoss2d: _NLL,
    nn.CrossEntropyLoss: ("ignore_index", "reduction", "label_smoothing"),
    nn.CTCLoss: ("blank", "reduction", "zero_infinity"),
    nn.GaussianNLLLoss: ("full", "eps", "reduction"),
    nn.PoissonNLLLoss: ("log_input", "full", "eps", "reduction"),
    nn.TripletMarginLoss: ("margin", "p", "eps", "swap", "reduction"),
}


def register(converter: Torch2Ir) -> None:
    """Register the loss handlers on ``converter``."""
    register_table(converter, TABLE)
