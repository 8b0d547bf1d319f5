"""``ir.lower()`` of a conversion that traced alike blocks once: each stand-in is replaced by a copy of its traced
call reading the stood-in member's own inputs and weights, so the FlatIR is the full trace's (same ops in each
module, same weights and meta, outputs bit-equal), every op linked to a node of the IR."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from common.errors import ConversionError
from common.flat import FlatIR
from torch2ir.hierarchy import build

pytest.importorskip("transformers")

from tests.real.corpus import CORPUS

ARCHES = {a.name: a for a in CORPUS}


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.norm(torch.relu(self.lin(x)) * scale + x)


class _Stack(nn.Module):
    """Four alike blocks, the last one's output returned as is (its stand-in is a graph output), and a second
    output reading a stood-in block's result."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(4))
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for block in self.blocks:
            x = block(x, 2.0)
        return x, self.head(x)


class _Norm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x))


class _UnlikeBlock(nn.Module):
    """Blocks that are not alike (``tag``), with alike norms and MLPs inside: the first block's ``norm2`` is stood
    in for by its ``norm1``, and its MLP, traced, reads that stand-in's output."""

    def __init__(self, tag: float) -> None:
        super().__init__()
        self.tag = tag
        self.norm1, self.norm2, self.mlp = _Norm(), _Norm(), _Mlp()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.norm1(x)
        return x + self.mlp(self.norm2(x))


class _UnlikeStack(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)  # the blocks' input then requires grad like every later one
        self.blocks = nn.ModuleList(_UnlikeBlock(float(i)) for i in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return x


class _Rotary(nn.Module):
    """transformers 5.24's rotary embedding: returns ``cos.to(dtype=x.dtype)``, a no-op ``.to()`` outside the
    decoder layers (5.23 computed it under ``torch.no_grad()``, which export turns into a higher-order op)."""

    def __init__(self) -> None:
        super().__init__()
        self.inv_freq = nn.Buffer(torch.arange(1.0, 5.0), persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = x[..., :4] * self.inv_freq
        return freqs.cos().to(dtype=x.dtype), freqs.sin().to(dtype=x.dtype)


class _RotaryBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, position: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        cos, sin = position
        return x + self.lin(x) * cos.repeat(1, 2) + sin.sum(-1, keepdim=True)


class _RotaryStack(nn.Module):
    """Alike blocks passed the no-op ``.to()`` results of a module called outside them: once for all (``shared``,
    as Llama, Qwen2, Mistral and Phi-3 do) or once per block (each stood-in block then reads its own)."""

    def __init__(self, shared: bool) -> None:
        super().__init__()
        self.shared = shared
        self.rotary = _Rotary()
        self.blocks = nn.ModuleList(_RotaryBlock() for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        position = self.rotary(x) if self.shared else None
        for block in self.blocks:
            x = block(x, position or self.rotary(x))
        return x


def _ops(flat: FlatIR) -> Counter:
    return Counter((n.op_type, n.module_path) for n in flat.nodes)


def _leaves(module: nn.Module, args: tuple, kwargs: dict | None) -> list:
    with torch.no_grad():
        return pytree.tree_leaves(module(*args, **(kwargs or {})))


def _equal(a: list, b: list) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y
                                    for x, y in zip(a, b, strict=True))


def _check_lowered(model: nn.Module, args: tuple, kwargs: dict | None = None, allow: tuple = (),
                   decompose: bool = False) -> FlatIR:
    """``model`` converted with ``trace_once=True`` and lowered: the full trace's FlatIR, linked, bit-equal."""
    full = torch2ir.convert(model, args, kwargs, allow=allow, trace_once=False).lower(decompose=decompose)
    once_ir = torch2ir.convert(model, args, kwargs, allow=allow, trace_once=True)
    assert once_ir.capture.copies, "no block was stood in for"
    once = once_ir.lower(decompose=decompose)
    assert _ops(once) == _ops(full)
    assert once.weight_name_mapping == full.weight_name_mapping
    assert once.meta == full.meta
    unlinked = [n.name for n in once.nodes if n.source is None]
    assert not unlinked, unlinked[:5]
    for (key, node, variant), _ in once.lowered_from().items():
        assert node in once_ir[key].graphs()[variant].graph, (key, node)
    rebuilder = ir2torch.Ir2Torch()
    expected = _leaves(model, args, kwargs)
    got = _leaves(rebuilder.convert(once, model, allow=allow), args, kwargs)
    assert _equal(got, _leaves(rebuilder.convert(full, model, allow=allow), args, kwargs))
    assert _equal(got, expected)
    return once


def test_a_small_stack_lowers_to_the_full_trace() -> None:
    torch.manual_seed(0)
    flat = _check_lowered(_Stack().eval(), (torch.randn(2, 8),))
    # each stood-in block's own weights are read by its copy of the traced call
    read = set(flat.weight_name_mapping.values())
    assert {f"blocks.{i}.lin.weight" for i in range(4)} <= read


def test_the_decomposed_lowering_is_the_full_traces() -> None:
    torch.manual_seed(0)
    _check_lowered(_Stack().eval(), (torch.randn(2, 8),), decompose=True)


def test_a_traced_call_reading_a_stand_ins_output_is_copied_reading_its_own_input() -> None:
    """Found on timm's GCViT: the copy of a traced MLP whose input was a stand-in (replaced by then) read the
    traced block's value instead of the stood-in block's."""
    torch.manual_seed(0)
    _check_lowered(_UnlikeStack().eval(), (torch.randn(2, 8),))


@pytest.mark.parametrize("shared", [True, False], ids=["shared", "per_block"])
def test_blocks_passed_a_no_op_to_computed_outside_them_lower_to_the_full_trace(shared: bool) -> None:
    """transformers 5.24 (issue 52): the traced layer reads the rotary embedding's ``.to()``, which the tracer
    names the tensor after, while the layer's signature names the tensor itself; the plan of copies refused the
    capture ("reads 'to_4', which it is not passed")."""
    torch.manual_seed(0)
    model = _RotaryStack(shared).eval()
    ir = torch2ir.convert(model, (torch.randn(2, 8),), trace_once=True)
    assert ir.capture.refused is None, ir.capture.refused
    _check_lowered(model, (torch.randn(2, 8),))


@pytest.mark.parametrize("name", ["llama", "bert", "vit", "t5_encoder", "mobilenet_v2"])
def test_corpus_models_lower_to_the_full_trace(name: str) -> None:
    arch = ARCHES[name]
    args, kwargs = arch.inputs()
    _check_lowered(arch.build().eval(), args, kwargs, arch.allow)


def test_a_stand_in_that_cannot_be_copied_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the plan of copies fails, ``ir.lower()`` refuses the capture naming why (never a partial FlatIR)."""
    monkeypatch.setattr(build, "plan", lambda *a: ([], "'blocks.2' has 2 traced calls"))
    ir = torch2ir.convert(_Stack().eval(), (torch.randn(2, 8),), trace_once=True)
    with pytest.raises(ConversionError, match=r"traced once .* 'blocks.2' has 2 traced calls"):
        ir.lower()


def test_the_conversions_program_is_left_as_exported() -> None:
    """Lowering copies the graph: the capture's export still holds its stand-ins, and lowers again alike."""
    ir = torch2ir.convert(_Stack().eval(), (torch.randn(2, 8),), trace_once=True)
    before = [n.name for n in ir.capture.ep.graph.nodes]
    first, second = ir.lower(), ir.lower()
    assert [n.name for n in ir.capture.ep.graph.nodes] == before
    assert "aten.empty_strided.default" not in {n.op_type for n in first.nodes}
    assert _ops(first) == _ops(second)


def test_a_sequential_root_lowers_to_the_full_trace() -> None:
    """export names an ``nn.Sequential``'s input ``input`` (a builtin's name, which a fresh graph would rename):
    the expanded program keeps export's names."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), *[nn.Sequential(nn.Linear(8, 8), nn.Tanh()) for _ in range(3)]).eval()
    _check_lowered(model, (torch.randn(2, 8),))
