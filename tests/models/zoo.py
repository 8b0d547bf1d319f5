"""Small hand-written models, each exercising one structural feature a converter has to handle.

Every entry of :data:`ZOO` is a :class:`Case`: a deterministic builder (seeded, eval mode), deterministic
example inputs ``(args, kwargs)`` and a set of tags naming what it exercises. All of them can be traced by
``torch.export.export(model, args, kwargs, strict=False)``.

Tags used here and in :mod:`tests.models.real`:

* ``dropout`` / ``batchnorm``: contains ``nn.Dropout*`` / ``nn.BatchNorm*`` modules (eval mode matters);
* ``tied``: one parameter owned by two different modules;
* ``alias``: one module object registered under several names;
* ``called_twice``: one module called more than once in a forward;
* ``kwargs``: inputs passed as keyword arguments;
* ``multi_input`` / ``multi_output`` / ``dict_output``: input and output shapes of the signature;
* ``buffers`` / ``non_persistent`` / ``constant`` / ``parameter``: non-module state read in forward;
* ``unused`` / ``identity`` / ``param_access`` / ``containers`` / ``residual``: module-structure oddities;
* ``rnn`` / ``attention`` / ``conv``: kinds of leaf layers; ``nn_root``: the root itself is a stock torch.nn module;
* ``no_grad``: a ``torch.no_grad()`` region (``wrap_with_set_grad_enabled`` in export);
* ``int_input``: integer (token id) inputs; ``non_tensor_input``: a Python scalar among the inputs;
* ``model_output``: returns a transformers ``ModelOutput``;
* ``transformers``: built from a transformers config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tests.models.case import Case, D, Inputs, gen, randn, seeded

__all__ = ["ZOO", "Case", "Inputs", "by_name", "gen", "randn", "seeded"]


# --------------------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------------------


class SkipConnection(nn.Module):
    """Residual add around Linear+ReLU: the input feeds both the block and the add."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.lin(x))


class ScaledLinear(nn.Module):
    """A custom (non-leaf) block: Linear followed by a learned elementwise scale used directly in forward."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.scale = nn.Parameter(torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.scale


class CalledTwice(nn.Module):
    """The same custom submodule called twice in a row: two call sites, one set of weights."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.block = ScaledLinear(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(self.block(x))


class SharedSequential(nn.Module):
    """One Linear object registered three times: as ``self.lin`` and twice inside ``nn.Sequential(lin, lin)``."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        lin = nn.Linear(dim, dim)
        self.lin = lin
        self.seq = nn.Sequential(lin, lin)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.seq(x) + self.lin(x)


class MultiInOut(nn.Module):
    """Two tensor inputs mixed together, two tensor outputs returned as a tuple."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.fx = nn.Linear(dim, dim)
        self.fy = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.fx(x) + self.fy(y)
        return torch.relu(h), h.sum(-1)


class KeywordOnly(nn.Module):
    """Keyword-only tensor arguments, one of them optional (``bias=None`` takes a different branch)."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, *, scale: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        h = self.lin(x) * scale
        if bias is not None:
            h = h + bias
        return h


class DictOutput(nn.Module):
    """Nested output structure: a dict holding a tensor and a tuple of tensors."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        h = self.lin(x)
        return {"a": h, "pair": (torch.tanh(h), h.mean(-1))}


class Buffers(nn.Module):
    """A persistent and a non-persistent buffer, both read in forward."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.register_buffer("offset", torch.randn(dim))
        self.register_buffer("mask", (torch.arange(dim) % 2 == 0).float(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.lin(x) + self.offset) * self.mask


class ParamAndConstant(nn.Module):
    """A parameter used directly in forward and a plain tensor attribute (a lifted constant in export)."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.gain = nn.Parameter(torch.randn(dim))
        self.scale = torch.tensor(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gain * self.scale


class NestedContainers(nn.Module):
    """A ModuleList iterated in forward, a ModuleDict indexed by key and an nn.Sequential called as a whole."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([SkipConnection(dim) for _ in range(2)])
        self.heads = nn.ModuleDict({"proj": nn.Linear(dim, dim), "act": nn.Tanh()})
        self.tail = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        x = self.heads["act"](self.heads["proj"](x))
        return self.tail(x)


class ConvNet(nn.Module):
    """Conv2d/BatchNorm2d/ReLU/MaxPool2d/AdaptiveAvgPool2d/Flatten/Dropout/Linear; BN stats are non-trivial."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
        )
        self.drop = nn.Dropout(0.5)
        self.fc = nn.Linear(16, classes)
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.running_mean.normal_(0.0, 0.1)
                    m.running_var.uniform_(0.5, 1.5)
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.normal_(0.0, 0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(self.features(x)))


class MultiIOLeaves(nn.Module):
    """Leaves with several inputs/outputs: MultiheadAttention, LSTM with ``(h0, c0)``, GRU and Bilinear."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, 2, batch_first=True)
        self.lstm = nn.LSTM(dim, dim, batch_first=True)
        self.gru = nn.GRU(dim, dim, batch_first=True)
        self.bilinear = nn.Bilinear(dim, dim, dim)

    def forward(
        self, x: torch.Tensor, h0: torch.Tensor, c0: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        a, _ = self.attn(x, x, x, need_weights=False)
        out, (h, c) = self.lstm(a, (h0, c0))
        g, hg = self.gru(out)
        return self.bilinear(g, x), h, c, hg


class TiedEmbedding(nn.Module):
    """An Embedding and an output Linear (two different modules) sharing one ``weight`` parameter."""

    def __init__(self, vocab: int = 20, dim: int = D) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.body = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.body(self.embed(ids))))


class UnusedAndIdentity(nn.Module):
    """A registered submodule with parameters that forward never calls, and an nn.Identity that it does call."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.unused = nn.Linear(dim, dim)
        self.ident = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ident(self.lin(x))


class ChildParamAccess(nn.Module):
    """Reads a child's parameters directly (``F.linear(x, self.proj.weight, ...)``) without calling the child."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(F.linear(x, self.proj.weight, self.proj.bias))


class FrozenFeature(nn.Module):
    """Computes a feature under ``torch.no_grad()`` and adds it to its input."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            f = torch.relu(self.lin(x))
        return x + f


class NoGradInside(nn.Module):
    """A submodule with a ``torch.no_grad()`` region: export emits a ``wrap_with_set_grad_enabled`` op."""

    def __init__(self, dim: int = D) -> None:
        super().__init__()
        self.frozen = FrozenFeature(dim)
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.frozen(x))


# --------------------------------------------------------------------------------------------------------------
# Inputs
# --------------------------------------------------------------------------------------------------------------


def _x() -> Inputs:
    return (randn(gen(), 2, D),), {}


def _xy() -> Inputs:
    g = gen()
    return (randn(g, 2, D), randn(g, 2, D)), {}


def _kwargs() -> Inputs:
    g = gen()
    return (randn(g, 2, D),), {"scale": randn(g, D), "bias": randn(g, 2, D)}


def _kwargs_default() -> Inputs:
    g = gen()
    return (randn(g, 2, D),), {"scale": randn(g, D)}


def _image() -> Inputs:
    return (randn(gen(), 2, 3, 16, 16),), {}


def _seq_state() -> Inputs:
    g = gen()
    return (randn(g, 2, 5, D), randn(g, 1, 2, D), randn(g, 1, 2, D)), {}


def _ids() -> Inputs:
    return (torch.randint(0, 20, (2, 5), generator=gen()),), {}


def _lstm_inputs() -> Inputs:
    return (randn(gen(), 2, 5, 8),), {}


def _mha_inputs() -> Inputs:
    g = gen()
    return (randn(g, 2, 5, 16), randn(g, 2, 6, 16), randn(g, 2, 6, 16)), {}


def _transformer_inputs() -> Inputs:
    g = gen()
    return (randn(g, 2, 5, 16), randn(g, 2, 4, 16)), {
        "tgt_mask": nn.Transformer.generate_square_subsequent_mask(4),
        "tgt_is_causal": True,  # a Python bool kwarg; without it the causal check is data-dependent
    }


def _case(name: str, factory: Callable[[], nn.Module], inputs: Callable[[], Inputs], *tags: str) -> Case:
    return Case(name, seeded(factory), inputs, frozenset(tags))


ZOO: list[Case] = [
    _case("skip_connection", SkipConnection, _x, "residual"),
    _case("called_twice", CalledTwice, _x, "called_twice", "parameter"),
    _case("shared_sequential", SharedSequential, _x, "alias", "called_twice"),
    _case("multi_in_out", MultiInOut, _xy, "multi_input", "multi_output"),
    _case("kwargs", KeywordOnly, _kwargs, "kwargs", "multi_input"),
    _case("kwargs_default", KeywordOnly, _kwargs_default, "kwargs", "multi_input"),
    _case("dict_output", DictOutput, _x, "dict_output", "multi_output"),
    _case("buffers", Buffers, _x, "buffers", "non_persistent"),
    _case("param_and_constant", ParamAndConstant, _x, "parameter", "constant"),
    _case("nested_containers", NestedContainers, _x, "containers", "residual"),
    _case("conv_net", ConvNet, _image, "conv", "batchnorm", "buffers", "dropout"),
    _case("multi_io_leaves", MultiIOLeaves, _seq_state, "rnn", "attention", "multi_input", "multi_output"),
    _case("tied_embedding", TiedEmbedding, _ids, "tied", "int_input"),
    _case("unused_and_identity", UnusedAndIdentity, _x, "unused", "identity"),
    _case("child_param_access", ChildParamAccess, _x, "param_access"),
    _case("no_grad_inside", NoGradInside, _x, "no_grad"),
    _case(
        "lstm", lambda: nn.LSTM(8, 16, num_layers=2, batch_first=True), _lstm_inputs, "nn_root", "rnn", "multi_output"
    ),
    _case(
        "multihead_attention",
        lambda: nn.MultiheadAttention(16, 2, batch_first=True),
        _mha_inputs,
        "nn_root",
        "attention",
        "multi_input",
        "multi_output",
    ),
    _case(
        "transformer",
        lambda: nn.Transformer(
            d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=32, batch_first=True
        ),
        _transformer_inputs,
        "nn_root",
        "attention",
        "dropout",
        "multi_input",
        "kwargs",
        "non_tensor_input",
    ),
]


def by_name(name: str) -> Case:
    """The case called ``name`` in :data:`ZOO` or :data:`tests.models.real.REAL`."""
    from tests.models.real import REAL

    for case in (*ZOO, *REAL):
        if case.name == name:
            return case
    raise KeyError(f"no zoo case named {name!r}")
