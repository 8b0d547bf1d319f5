"""Modules called with symbolic numbers keep their call signature.

Under ``dynamic_shapes`` a size passed to a submodule (``self.inner(x, x.shape[0])``) is a ``SymInt``, and a
count computed from data (JetMoE's ``expert_size``, from ``.tolist()``) is one even with static shapes. Such a
module is rebuilt with its own parameter names (``forward(x, n)``), so it can be swapped for a module with the
same ``forward``; the rebuild stays exact at other sizes and the loop a fixpoint. A module that *returns* a number
computes it in its own graph (export may trace it where the caller reads it, or before the call) and the caller reads
the call's result, so it keeps its signature too.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn
from torch.export import Dim

import ir2torch
import torch2ir
from common.compare import equal


class _Rows(nn.Module):
    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        return x.reshape(n, -1) * 2


class _Scale(nn.Module):
    def forward(self, x: torch.Tensor, s: float) -> torch.Tensor:
        return x * s


class _Sized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rows = _Rows()
        self.scale = _Scale()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale(self.rows(x, x.shape[0]), x.shape[0] ** 0.5)


_DIMS = {"x": {0: Dim("b", min=2, max=64)}}


def _inputs(impl) -> list[str]:
    return [n for n in impl.nodes if impl.node(n)["type"] == "input"]


def test_a_symbolic_size_and_a_symbolic_float_argument_keep_their_parameter_names():
    model = _Sized()
    ir = torch2ir.convert(model, (torch.randn(6, 4),), dynamic_shapes=_DIMS)
    assert ir["rows"].meta["forward_arg_names"] == ["x", "n"] and _inputs(ir["rows"]) == ["x", "n"]
    assert ir["scale"].meta["forward_arg_names"] == ["x", "s"] and _inputs(ir["scale"]) == ["x", "s"]
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert list(inspect.signature(rebuilt.rows.forward).parameters) == ["x", "n"]
    for batch in (2, 3, 9, 64):  # exact at sizes other than the traced one
        x = torch.randn(batch, 4)
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)
    # the rebuilt child is called as the original is, with a plain int
    x = torch.randn(4, 3)
    torch.testing.assert_close(rebuilt.rows(x, 2), _Rows()(x, 2), rtol=0, atol=0)


def test_the_loop_is_a_fixpoint_with_symbolic_arguments():
    model = _Sized()
    x = torch.randn(6, 4)
    ir = torch2ir.convert(model, (x,), dynamic_shapes=_DIMS)
    again = torch2ir.convert(ir2torch.convert(ir, model.state_dict()), (x,), dynamic_shapes=_DIMS)
    assert again == ir


class _Flatten(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1)


class _ReadsTheBatchToo(nn.Module):
    """Export computes the batch size once, in the root, and the child reads that node."""

    def __init__(self) -> None:
        super().__init__()
        self.flatten = _Flatten()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = torch.arange(x.shape[0], dtype=x.dtype)
        return self.flatten(x) * scale[:, None]


def test_a_size_export_computes_outside_a_module_is_computed_in_it():
    model = _ReadsTheBatchToo()
    x = torch.randn(6, 2, 2)
    dims = {"x": {0: Dim("b", min=2, max=64)}}
    ir = torch2ir.convert(model, (x,), dynamic_shapes=dims)
    flatten = ir["flatten"]
    assert _inputs(flatten) == ["x"] and flatten.meta["forward_arg_names"] == ["x"]
    assert [flatten.node(n)["implementation"] for n in flatten.nodes
            if flatten.node(n)["type"] == "function"] == ["aten.sym_size.int", "aten.reshape.default"]
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for batch in (2, 7):
        x = torch.randn(batch, 2, 2)
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)
    assert torch2ir.convert(rebuilt, (x,), dynamic_shapes=dims) == ir
    # the copy exists only while the module-level IR is written: lowering from the same capture gives the ops of a
    # lowering of the model on its own
    flat = torch2ir.lower(ir)
    alone = torch2ir.lower(model, (x,), dynamic_shapes=dims)
    assert [(n.name, n.op_type) for n in flat] == [(n.name, n.op_type) for n in alone]


def test_a_module_with_a_symbolic_argument_can_be_swapped():
    class Halve(nn.Module):  # the team's own layer, with the same forward
        def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
            return x.reshape(n, -1) * 0.5

    model = _Sized()
    ir = torch2ir.convert(model, (torch.randn(6, 4),), dynamic_shapes=_DIMS)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    rebuilt.rows = Halve()  # the rebuilt parent calls its child as the original did: with (x, n)
    x = torch.randn(5, 4)
    torch.testing.assert_close(rebuilt(x), x * 0.5 * 5 ** 0.5, rtol=0, atol=0)


class _Doubled(nn.Module):  # the number is computed in its forward; export traces it where the caller reads it
    def forward(self, x: torch.Tensor):
        return x + 1, x.shape[0] * 2


class _Size(nn.Module):  # returns a size its caller already has (export computed it before the call)
    def forward(self, x: torch.Tensor):
        return x + 1, x.shape[0]


class _Passed(nn.Module):  # returns a number computed from one it was passed
    def forward(self, x: torch.Tensor, n: int):
        return x + 1, n * 2


class _Reader(nn.Module):
    def __init__(self, count: nn.Module) -> None:
        super().__init__()
        self.count = count

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, n = self.count(x, x.shape[0]) if isinstance(self.count, _Passed) else self.count(x)
        return y.reshape(n, -1) + n


@pytest.mark.parametrize("count", [_Doubled, _Size, _Passed])
def test_a_module_returning_a_number_keeps_its_signature_and_the_caller_reads_its_result(count):
    model = _Reader(count())
    ir = torch2ir.convert(model, (torch.randn(6, 4),), dynamic_shapes=_DIMS)
    names = ["x", "n"] if count is _Passed else ["x"]
    assert ir["count"].meta["forward_arg_names"] == names  # signed: it computes and returns the number itself
    root = ir["root"]
    assert not [n for n in root.nodes if root.node(n).get("implementation") == "operator.mul"]  # read, not redone
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for batch in (3, 8):
        x = torch.randn(batch, 4)
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)
    assert equal(torch2ir.convert(rebuilt, (torch.randn(6, 4),), dynamic_shapes=_DIMS), ir)  # the loop: a fixpoint


@pytest.mark.parametrize("dynamic", [False, True])
def test_jetmoe_experts_and_router_keep_their_signatures(dynamic):
    """JetMoE's experts take ``expert_size``, a list of data-dependent counts (unbacked symbols)."""
    transformers = pytest.importorskip("transformers")
    small = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=100, use_cache=False)
    torch.manual_seed(0)
    model = transformers.JetMoeModel(transformers.JetMoeConfig(**small, kv_channels=8, num_local_experts=4,
                                                               num_experts_per_tok=2)).eval()
    ids = torch.randint(0, 100, (2, 8))
    dims = {"input_ids": {0: Dim("batch", max=64), 1: Dim("seq", min=2, max=128)}} if dynamic else None
    ir = torch2ir.convert(model, (), {"input_ids": ids}, dynamic_shapes=dims)
    for layer in ("layers.0", "layers.1"):
        assert ir[f"{layer}.mlp.router"].meta["forward_arg_names"] == ["hidden_states"]
        assert ir[f"{layer}.mlp.input_linear"].meta["forward_arg_names"] == ["inputs", "expert_size"]
        assert ir[f"{layer}.self_attention.experts.output_linear"].meta["forward_arg_names"] == \
            ["inputs", "expert_size"]
    rebuilt = ir2torch.convert(ir, model.state_dict())
    other = torch.randint(0, 100, (3, 11)) if dynamic else torch.randint(0, 100, (2, 8))
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(input_ids=other).last_hidden_state,
                                   model(input_ids=other).last_hidden_state, rtol=0, atol=0)
    assert torch2ir.convert(rebuilt, (), {"input_ids": ids}, dynamic_shapes=dims) == ir


class _Positions(nn.Module):
    def forward(self, b: int, h: int, w: int) -> torch.Tensor:
        return torch.arange(h * w, dtype=torch.float32).reshape(1, 1, h, w).expand(b, 1, h, w)


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pos = _Positions()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        return x + self.pos(b, h, w)


class _PassesSizes(nn.Module):
    """The block passes its child the batch size, which export computed once in the root (EdgeNeXt's positional
    encoding is called this way)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = _Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scaled = x * torch.arange(x.shape[0], dtype=x.dtype).reshape(-1, 1, 1, 1)
        return self.block(scaled)


def test_a_size_a_module_passes_on_is_computed_in_it():
    model = _PassesSizes()
    x = torch.randn(4, 1, 3, 5)
    dims = {"x": {0: Dim("b", min=2, max=64)}}
    ir = torch2ir.convert(model, (x,), dynamic_shapes=dims)
    assert ir["block"].meta["forward_arg_names"] == ["x"] and _inputs(ir["block"]) == ["x"]
    assert ir["block.pos"].meta["forward_arg_names"] == ["b", "h", "w"]
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for batch in (2, 9):
        y = torch.randn(batch, 1, 3, 5)
        torch.testing.assert_close(rebuilt(y), model(y), rtol=0, atol=0)
    assert torch2ir.convert(rebuilt, (x,), dynamic_shapes=dims) == ir


def test_a_size_computed_inside_a_leaf_is_computed_again_where_another_leaf_reads_it():
    """``nn.Transformer`` under a dynamic batch: export computes ``batch * heads`` inside the encoder's first
    ``MultiheadAttention`` (a leaf) and reads that node in every other attention; each leaf now computes its own
    (conversion raised an internal exception before)."""
    torch.manual_seed(0)
    model = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=16,
                           dropout=0.0, batch_first=True).eval()
    src, tgt = torch.randn(2, 5, 8), torch.randn(2, 4, 8)
    batch = Dim("batch", min=2, max=8)
    dims = {"src": {0: batch}, "tgt": {0: batch}}
    ir = torch2ir.convert(model, (src, tgt), dynamic_shapes=dims)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        for b in (3, 8):
            src, tgt = torch.randn(b, 5, 8), torch.randn(b, 4, 8)
            torch.testing.assert_close(rebuilt(src, tgt), model(src, tgt), rtol=0, atol=0)
    assert torch2ir.convert(rebuilt, (torch.randn(2, 5, 8), torch.randn(2, 4, 8)), dynamic_shapes=dims) == ir


class _Recurrent(nn.Module):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(size, size // 2, batch_first=True, bidirectional=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lstm(x)[0]


class _TwoLSTMs(nn.Module):
    """Each LSTM sizes its zero state from the batch; export computes that size inside the first one only, and the
    second reads it there (timm's Sequencer): the first block's graph cannot return it."""

    def __init__(self) -> None:
        super().__init__()
        self.first = _Recurrent(4)
        self.second = _Recurrent(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x.reshape(-1, 5, 4)))


def test_a_leaf_reads_sizes_from_its_own_arguments():
    torch.manual_seed(0)
    model = _TwoLSTMs().eval()
    x = torch.randn(2, 3, 5, 4)
    dims = {"x": {0: Dim("b", min=2, max=16)}}
    ir = torch2ir.convert(model, (x,), dynamic_shapes=dims)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        for b in (3, 7):
            y = torch.randn(b, 3, 5, 4)
            torch.testing.assert_close(rebuilt(y), model(y), rtol=0, atol=0)
    assert torch2ir.convert(rebuilt, (x,), dynamic_shapes=dims) == ir


class _Windows(nn.Module):
    def forward(self, w: torch.Tensor) -> torch.Tensor:
        batch = w.shape[0] // 4  # export simplifies (4 * b) // 4 to b and reads the root's node for it
        return w.reshape(batch, 4, 3).sum(1)


class _Windowed(nn.Module):
    """Swin-style: the root cuts the batch into windows, the attention gets the batch back by a division."""

    def __init__(self) -> None:
        super().__init__()
        self.windows = _Windows()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.windows(x.reshape(x.shape[0] * 4, 3) * 2) + x.shape[0]


def test_a_size_that_divides_a_tensors_size_is_computed_by_the_division():
    model = _Windowed()
    x = torch.randn(2, 4, 3)
    dims = {"x": {0: Dim("b", min=2, max=16)}}
    ir = torch2ir.convert(model, (x,), dynamic_shapes=dims)
    assert ir["windows"].meta["forward_arg_names"] == ["w"] and _inputs(ir["windows"]) == ["w"]
    rebuilt = ir2torch.convert(ir, model.state_dict())
    for batch in (3, 16):
        y = torch.randn(batch, 4, 3)
        torch.testing.assert_close(rebuilt(y), model(y), rtol=0, atol=0)
    assert torch2ir.convert(rebuilt, (x,), dynamic_shapes=dims) == ir


class _SinusoidalPositions(nn.Module):
    """Marian's, Pegasus' and RoFormer's sinusoidal positions: called with ``input.shape[:-1]``, a ``torch.Size``,
    reading only its last item."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(64, 8)

    def forward(self, shape: torch.Size, offset: int = 0) -> torch.Tensor:
        length = shape[-1]
        return self.table(torch.arange(offset, offset + length))


class _WithPositions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.positions = _SinusoidalPositions()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + self.positions(x.shape[:-1], 2)).reshape(x.shape[0], -1)


def test_a_size_of_symbolic_items_is_passed_as_a_size_built_by_the_caller() -> None:
    model, x = _WithPositions().eval(), torch.randn(2, 5, 8)
    dims = ({0: Dim("batch", max=16), 1: Dim("seq", min=2, max=32)},)
    ir = torch2ir.convert(model, (x,), dynamic_shapes=dims)
    assert ir["positions"].meta["forward_arg_names"] == ["shape", "offset"]  # signed, not data-flow inputs
    (call,) = [a for _, a in ir.root.graph.nodes(data=True) if a.get("implementation") == "positions"]
    (size,) = [a for _, a in ir.root.graph.nodes(data=True) if a.get("implementation") == "torch.Size"]
    assert call["args"][0].node in ir.root.graph and size["type"] == "function"
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert list(inspect.signature(rebuilt.positions.forward).parameters) == ["shape", "offset"]
    for shape in [(2, 5, 8), (3, 11, 8), (1, 2, 8)]:  # exact at other sizes
        y = torch.randn(shape)
        assert torch.equal(rebuilt(y), model(y))
    assert torch2ir.convert(rebuilt, (x,), dynamic_shapes=dims) == ir  # the loop is a fixpoint
    # the rebuilt submodule is called like the original, with a torch.Size, and can be swapped for it
    assert torch.equal(rebuilt.positions(torch.Size([3, 7]), 2), model.positions(torch.Size([3, 7]), 2))


def test_a_size_of_static_items_stays_one_constant() -> None:
    model, x = _WithPositions().eval(), torch.randn(2, 5, 8)
    ir = torch2ir.convert(model, (x,))
    (call,) = [a for _, a in ir.root.graph.nodes(data=True) if a.get("implementation") == "positions"]
    assert call["args"][0] == torch.Size([2, 5])
    assert not [a for _, a in ir.root.graph.nodes(data=True) if a.get("implementation") == "torch.Size"]


@pytest.mark.parametrize("bad", [["abc"], [[-1, 10**30]], [[1.5, None]]], ids=["string", "huge", "mixed"])
def test_a_hostile_torch_size_node_gives_only_an_ir_error(tmp_path, bad) -> None:
    """``torch.Size`` is an allowed function (class ``pure``): a file may give it anything; what it builds or what
    the ops after it make of that fails as an ``IRError`` naming the node."""
    import json

    from common import IR
    from common.errors import IRError

    model, x = _WithPositions().eval(), torch.randn(2, 5, 8)
    dims = ({0: Dim("batch", max=16), 1: Dim("seq", min=2, max=32)},)
    path = tmp_path / "m.ir.json"
    torch2ir.convert(model, (x,), dynamic_shapes=dims).save(path)
    doc = json.loads(path.read_text())
    root = doc["implementations"]["root"]
    nodes = root["nodes"].values() if isinstance(root["nodes"], dict) else root["nodes"]
    next(n for n in nodes if n.get("implementation") == "torch.Size")["args"] = bad
    root["edges"] = [e for e in root["edges"] if e["dst"] != "size"]
    path.write_text(json.dumps(doc))
    with pytest.raises(IRError):
        ir2torch.convert(IR.load(path), model.state_dict())(x)
