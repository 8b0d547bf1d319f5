"""Children of opaque leaves traced on their own (``torch2ir.opaque.children``): a model whose *own* code does not
trace is kept as an opaque root, and every child it calls is converted alone on the inputs of its eager call,
typed and traced as usual; the rebuild guards those inputs."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import ConversionError, InputMismatchError
from common.opaque import traced_alone
from torch2ir.frontend.export import ExportFailedError


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("shift", torch.linspace(0, 1, 4), persistent=False)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return torch.relu(self.lin(x)) * scale + self.shift

    def width(self) -> int:
        return self.lin.in_features


class Root(nn.Module):
    """Its own forward branches on data (export fails in the root's code); its children trace."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = self.blocks[0](x)
        return self.head(self.blocks[1](x, scale=2.0))


ROOT = f"{__name__}.Root"
X = torch.randn(3, 4).abs()


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def _root() -> Root:
    torch.manual_seed(0)
    return Root().eval()


def test_a_failing_root_is_opaque_and_its_children_are_traced() -> None:
    model = _root()
    with pytest.raises(ExportFailedError, match="in its own forward"):
        torch2ir.convert(model, (X,))
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert [(p, c) for p, c, _ in ir.capture.opaque] == [("", ROOT)]
    assert ir.root.type == "opaque" and ir["head"].type == "linear"
    assert [ir["blocks.0"].type, ir["blocks.1"].type] == ["module", "module"]
    assert ir["blocks.0"].nodes == ["x", "lin", "relu", "mul", "shift", "add", "output"]
    mul = ir["blocks.1"].node("mul")  # the constant the root passed (scale=2.0) is in the child's graph
    assert mul["args"][1] == 2.0 and ir["blocks.0"].node("mul")["args"][1] == 1.0
    assert traced_alone(ir) == ["blocks.0", "blocks.1"]
    with pytest.raises(ConversionError, match="own forward is an opaque leaf"):
        ir.lower()
    assert torch.equal(ir.tensors["blocks.1.shift"], model.blocks[1].shift)


def test_the_rebuild_is_exact_on_both_branches_trains_alike_and_closes_the_loop(tmp_path) -> None:
    model = _root()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[ROOT])
    assert type(rebuilt) is Root and type(rebuilt.blocks[0]) is not Block
    for x in (X, -X):
        assert _max_diff(rebuilt(x), model(x)) == 0
    model.train(), rebuilt.train()
    model(X).sum().backward()
    rebuilt(X).sum().backward()
    grads = dict(rebuilt.named_parameters())
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, grads[name].grad), name
    assert torch2ir.convert(rebuilt.eval(), (X,), opaque="auto") == ir
    loaded = IR.load(ir.save(tmp_path / "m.ir.json"))
    assert loaded == ir
    again = ir2torch.convert(loaded, model.state_dict(), allow=[ROOT])
    assert _max_diff(again(-X), model.eval()(-X)) == 0


def test_a_child_traced_alone_guards_its_inputs() -> None:
    model = _root()
    rebuilt = ir2torch.convert(torch2ir.convert(model, (X,), opaque="auto"), model.state_dict(), allow=[ROOT])
    with pytest.raises(InputMismatchError, match=r"shape \(5, 4\)"):
        rebuilt(torch.randn(5, 4).abs())  # the root passes its children other sizes than they were traced for
    with pytest.raises(InputMismatchError, match="scale"):
        rebuilt.blocks[1](X, scale=3.0)  # a constant the trace specialised on
    assert _max_diff(rebuilt.blocks[1](X, scale=2.0), model.blocks[1](X, scale=2.0)) == 0
    unguarded = ir2torch.convert(torch2ir.convert(model, (X,), opaque="auto"), model.state_dict(), allow=[ROOT],
                                 guard_inputs=False)
    assert unguarded(torch.randn(5, 4).abs()).shape == (5, 2)


class Reuse(nn.Module):
    """Calls one child with two input sizes: one graph cannot stand for both."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x) if x.sum() > 0 else x
        return self.block(torch.cat([y, y])).sum(0)


def test_a_child_called_with_different_inputs_stays_opaque() -> None:
    torch.manual_seed(0)
    model = Reuse().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert ir["block"].type == "opaque"
    reason = dict((p, r) for p, _, r in ir.capture.opaque)["block"]
    assert "called 2 times with inputs of different sizes" in reason
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Reuse", f"{__name__}.Block"])
    for x in (X, -X):
        assert _max_diff(rebuilt(x), model(x)) == 0


class Reads(nn.Module):
    """Its code uses a child besides calling it: a method of its class and a module inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.left = nn.Sequential(Block())
        self.mid = Wrapper()
        self.right = Wrapper()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            x = x[:, : self.mid.block.width()]  # a method of a module inside `mid`
        return self.right.block(self.mid(x)) + self.left(x)  # a module inside `right` called directly


class Wrapper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.post = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.post(self.block(x))


def test_a_child_used_besides_being_called_stays_opaque_and_its_children_are_traced() -> None:
    torch.manual_seed(0)
    model = Reads().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    reasons = {p: r for p, _, r in ir.capture.opaque}
    assert set(reasons) == {"", "mid", "mid.block", "right", "right.post"}
    assert "calls right.block inside it" in reasons["right"]
    assert "reads mid.block.width" in reasons["mid"] and "reads mid.block.width" in reasons["mid.block"]
    assert "never called" in reasons["right.post"]  # right's own forward never runs
    assert ir["mid"].type == ir["right"].type == "opaque"
    assert {k: ir[k].type for k in ("mid.block", "mid.post", "right.block", "right.post", "left")} == {
        "mid.block": "opaque", "mid.post": "module", "right.block": "module", "right.post": "opaque",
        "left": "sequential"}
    allow = [f"{__name__}.Reads", f"{__name__}.Wrapper", f"{__name__}.Block"]
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=allow)
    for x in (X, -X):
        assert _max_diff(rebuilt(x), model(x)) == 0


class Stateful(nn.Module):
    """Keeps a tensor between calls as a plain attribute (as Qwen2-VL's rope_deltas)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.last = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.last is None or x.sum() > 0:
            self.last = x.mean(0)
        return self.block(x) + self.last


def test_a_tensor_attribute_of_an_opaque_leaf_is_kept_as_a_constant() -> None:
    torch.manual_seed(0)
    model = Stateful().eval()
    model(X)  # the attribute now holds a tensor
    ir = torch2ir.convert(model, (-X,), opaque="auto")
    assert ir.root.state["last"]["kind"] == "constant" and torch.equal(ir.tensors["last"], model.last)
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Stateful"])
    assert torch.equal(rebuilt.last, model.last)
    assert _max_diff(rebuilt(-X), model(-X)) == 0


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) if x.mean() > 0 else -x


class Stack(nn.Module):
    """Traced blocks around an opaque one in a ModuleList run in turn by the root's own (failing) code."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Branchy(), Block()])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x) if x.sum() != 0 else x
        return x


def test_children_traced_alone_keep_their_place_among_their_siblings() -> None:
    torch.manual_seed(0)
    model = Stack().eval()
    ir = torch2ir.convert(model, (X,), opaque=[Stack, Branchy])  # blocks.1 opaque from the start, not grafted
    assert [ir[f"blocks.{i}"].type for i in range(3)] == ["module", "opaque", "module"]
    assert [k for k in ir if k.startswith("blocks.") and k.count(".") == 1] == ["blocks.0", "blocks.1", "blocks.2"]
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Stack", f"{__name__}.Branchy"])
    assert [name for name, _ in rebuilt.blocks.named_children()] == ["0", "1", "2"]
    for x in (X, -X):
        assert _max_diff(rebuilt(x), model(x)) == 0


class Codebook(nn.Module):
    """Its data-dependent code runs through a method other than forward (as Mimi's codebook.encode)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Parameter(torch.randn(8, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode(x)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        index = torch.cdist(x, self.embed).argmin(-1)
        return self.embed[index] if index.max() > 2 else x


class Quantizer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.codebook = Codebook()
        self.proj = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.codebook.encode(self.proj(x))


class Codec(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quantizer = Quantizer()
        self.head = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.quantizer(x))


def test_a_failing_method_other_than_forward_makes_its_caller_opaque() -> None:
    torch.manual_seed(0)
    model = Codec().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    reasons = {p: r for p, _, r in ir.capture.opaque}
    assert "calls a method of the opaque leaf quantizer.codebook" in reasons["quantizer"]
    assert reasons["quantizer.codebook"].startswith("GuardOnDataDependentSymNode")  # its own export failure
    assert [ir["quantizer.proj"].type, ir["head"].type] == ["module", "module"]  # traced alone / in the trace
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.Quantizer", f"{__name__}.Codebook"])
    for x in (X, -X, X * 5):
        assert _max_diff(rebuilt(x), model(x)) == 0


class Images:
    """A plain container of tensors (as torchvision's ImageList): neither a tensor nor a constant."""

    def __init__(self, tensors: torch.Tensor) -> None:
        self.tensors = tensors


class Proposer(nn.Module):
    def forward(self, images: Images) -> torch.Tensor:
        x = images.tensors
        return x[x > 0].sum() * torch.ones_like(x) if (x > 0).any() else x


class TwoStage(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rpn = Proposer()
        self.head = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rpn(Images(x)))


def test_an_opaque_leaf_the_root_passes_an_object_makes_the_root_opaque() -> None:
    torch.manual_seed(0)
    model = TwoStage().eval()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert [p for p, _, _ in ir.capture.opaque] == ["", "rpn"]  # each once
    assert "passes an opaque leaf a value computed from tensor data" in ir.capture.opaque[0][2]
    assert ir["head"].type == "module" and traced_alone(ir) == ["head"]
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.TwoStage", f"{__name__}.Proposer"])
    for x in (X, -X):
        assert _max_diff(rebuilt(x), model(x)) == 0


class _Offsets(nn.Module):
    """A lifted constant its rebuild's call reads before its forward hooks run (the fold compares its values)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offsets = torch.tensor([0.5, -1.0, 2.0, 0.25])
        return self.lin(x) + (offsets * 2 + 1).exp()


class _BranchingRoot(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.offsets = _Offsets()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.offsets(x)
        return y * 2 if y.sum() > 0 else y - 1  # a branch on data: the root is opaque


def test_a_rebuilt_child_is_traced_on_its_own_again_when_its_rebuild_is_converted() -> None:
    """Converting the rebuild: the opaque root calls the rebuilt child, whose call reads its own attributes before
    its forward hooks run; those reads are the child's, not the opaque code's, so the child is traced on its own
    again (it was kept opaque, a rebuilt class that cannot be named) and the IR is the same."""
    torch.manual_seed(0)
    model, x = _BranchingRoot().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,), opaque="auto")
    assert traced_alone(ir) == ["offsets"]
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}._BranchingRoot"])
    assert torch.equal(rebuilt(x), model(x))
    assert torch2ir.convert(rebuilt, (x,), opaque="auto") == ir
