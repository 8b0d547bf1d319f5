"""The memory budget holds for a whole call (issue 50, point 3): each hostile file below plants a value that used to
get past ``max_bytes`` and checks that an ``IRError`` naming the node comes out before the memory is taken.

- the live total of a call run **checked** (a data-dependent op puts it there), not only each op's own output;
- ``nonzero`` of a high-rank tensor (``ndim`` int64 per element, not 8 bytes);
- **quantized** tensors (fake tensors cannot stand for them): measured on stand-ins, or refused;
- **external storage**: a parameter or buffer grown by ``resize_`` counts (an observer's empty buffer grows at its
  first call); an input is never written at all (``tests/security/test_caller_writes.py``);
- **workspace** of kernels allocating beyond their outputs (a float64 convolution's im2col buffer, a sort's copy;
  attention's math path is plain ops whose outputs count): :mod:`ir2torch.run_safety.workspace`;
- **int8 constructor arguments**: an ``int8_linear`` whose ``in_features`` / ``out_features`` ask for terabytes
  is refused before anything is built.

Where the test checks that nothing grew past the budget, it runs in a child process and reads its peak RSS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import ResourceBudgetError
from ir2torch.run_safety.forward_budget import ForwardBudget
from tests.helpers import PEAK_KIB_SOURCE

SIZE = 7919  # a literal the file holds once: the size the attacker edits
REPO = Path(__file__).resolve().parents[2]


def _hostile(tmp_path: Path, model: nn.Module, args: tuple, size: int, **convert: object) -> Path:
    path = tmp_path / "m.ir.json"
    torch2ir.convert(model, args, **convert).save(path)
    text = path.read_text()
    assert text.count(str(SIZE)) >= 1
    path.write_text(text.replace(str(SIZE), str(size)))
    return path


def _child(script: str) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", PEAK_KIB_SOURCE + textwrap.dedent(script)], capture_output=True,
                         text=True, timeout=300, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())


class _ManyAllocations(nn.Module):
    """A data-dependent size (the call runs checked), then eight tensors each far below the budget, alive at once."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.nonzero().shape[0]
        zs = [torch.zeros(n * SIZE) for _ in range(8)]
        return sum(z.sum() for z in zs)


def test_a_checked_call_bounds_its_live_total_not_each_op(tmp_path: Path) -> None:
    model, x = _ManyAllocations(), torch.tensor([1.0, 2.0, 3.0])
    honest = ir2torch.convert(torch2ir.convert(model, (x,)))
    assert torch.equal(honest(x), model(x))
    path = _hostile(tmp_path, model, (x,), size=3 * 10**6)  # 8 x 36 MB alive under a 100 MB budget
    with pytest.raises(ResourceBudgetError, match=r"would bring the live tensors of the call to") as info:
        ir2torch.convert(IR.load(path), max_bytes=10**8)(x)
    assert info.value.node is not None and info.value.node.startswith("zeros")
    lines = _child(f"""
        import torch, ir2torch
        from common import IR
        from common.errors import ResourceBudgetError
        model = ir2torch.convert(IR.load({str(path)!r}), max_bytes=10**8)
        x = torch.tensor([1.0, 2.0, 3.0])
        model(torch.zeros(3))  # no nonzero element: sizes 0; the checked run's own imports are done
        before = peak_kib()
        try:
            model(x)
            print("refused False")
        except ResourceBudgetError:
            print("refused True")
        print("grown_kb", peak_kib() - before)
    """)
    assert lines["refused"] == "True"
    assert int(lines["grown_kb"]) < 100 * 1024  # within the budget (two of the tensors); the eight are 288 MB


class _NonZero(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.nonzero().sum()


def test_nonzero_of_a_high_rank_tensor_is_bounded_by_its_rank() -> None:
    """1 MB of bool in 20 dims: ``nonzero`` writes 20 int64 per element, 160 MB (the old bound said 8 MB)."""
    x = torch.ones([2] * 20, dtype=torch.bool)
    model = ir2torch.convert(torch2ir.convert(_NonZero(), (x,)), max_bytes=5 * 10**7)
    with pytest.raises(ResourceBudgetError, match=r"aten.nonzero.default .*its output size depends on data") as info:
        model(x)
    assert info.value.node == "nonzero"
    small = torch.ones([2] * 6, dtype=torch.bool)
    assert ir2torch.convert(torch2ir.convert(_NonZero(), (small,)), max_bytes=5 * 10**7)(small) == _NonZero()(small)


class _QuantizedRepeat(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = torch.quantize_per_tensor(x, 0.1, 0, torch.quint8)
        return q.repeat(SIZE, 1).dequantize().sum()


def test_an_op_on_a_quantized_tensor_is_measured_on_a_stand_in(tmp_path: Path) -> None:
    """Fake tensors cannot stand for a quantized tensor: its ops used to run unmeasured."""
    warnings.filterwarnings("ignore", category=UserWarning)
    model, x = _QuantizedRepeat(), torch.rand(2, 4)
    allow = ["aten::quantize_per_tensor.default"]  # outside the default surface
    honest = ir2torch.convert(torch2ir.convert(model, (x,), allow=allow), max_bytes=10**8, allow=allow)
    assert torch.equal(honest(x), model(x))
    path = _hostile(tmp_path, model, (x,), size=10**8, allow=allow)  # 800 MB of quint8
    with pytest.raises(ResourceBudgetError, match=r"aten.repeat.default would allocate") as info:
        ir2torch.convert(path, max_bytes=10**8, allow=allow)(x)
    assert info.value.node is not None and info.value.node.startswith("repeat")


class _Buffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.b.add_(1)
        return x + self.b


def _checked_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call runs checked, as when a size depends on data: each op measured on fakes right before it runs."""
    monkeypatch.setattr(ForwardBudget, "_probe", lambda *args, **kwargs: False)


@pytest.mark.parametrize("checked", [False, True], ids=["probed", "checked"])
def test_a_buffer_is_never_grown(tmp_path: Path, checked: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "m.ir.json"
    torch2ir.convert(_Buffer(), (torch.randn(3),)).save(path)
    doc = json.loads(path.read_text())
    node = doc["implementations"]["root"]["nodes"]["add_"]
    node["implementation"], node["args"] = "aten.resize_.default", [node["args"][0], [10**9]]  # 4 GB
    path.write_text(json.dumps(doc))
    model = ir2torch.convert(path, max_bytes=10**8, allow=["aten::resize_"])
    if checked:
        _checked_only(monkeypatch)
    with pytest.raises(ResourceBudgetError, match=r"would grow the storage of a tensor the call did not") as info:
        model(torch.randn(3))
    assert info.value.node == "add_"
    assert model.b.untyped_storage().nbytes() == 12  # not grown


class _Conv(nn.Module):
    """A float64 convolution whose kernel the graph makes: output and kernel stay small, its im2col buffer is not."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = torch.ones(1, 1, 3, 3, dtype=torch.float64)
        return torch.nn.functional.conv2d(x, weight, padding="same")


@pytest.mark.parametrize("checked", [False, True], ids=["probed", "checked"])
def test_a_convolutions_workspace_counts(tmp_path: Path, checked: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(1, 1, 256, 256, dtype=torch.float64)
    path = tmp_path / "m.ir.json"
    torch2ir.convert(_Conv(), (x,)).save(path)
    torch.testing.assert_close(ir2torch.convert(path, max_bytes=10**8)(x), _Conv()(x))
    doc = json.loads(path.read_text())
    (node,) = [n for n in doc["implementations"]["root"]["nodes"].values()
               if n.get("implementation") == "aten.ones.default"]
    node["args"][0] = [1, 1, 63, 63]  # im2col: 63*63 * 256*256 * 8 B = 2.1 GB; kernel 32 KB, output 0.5 MB
    path.write_text(json.dumps(doc))
    model = ir2torch.convert(path, max_bytes=5 * 10**8, max_flops=None)
    if checked:
        _checked_only(monkeypatch)
    with pytest.raises(ResourceBudgetError, match=r"aten.convolution.default .*workspace") as info:
        model(x)
    assert info.value.node is not None and info.value.node.startswith("conv")


def test_a_sorts_copy_counts() -> None:
    class Sort(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sort(x.repeat(SIZE)).values.sum()

    x = torch.randn(1000)
    rebuilt = ir2torch.convert(torch2ir.convert(Sort(), (x,)), max_bytes=3 * 10**8)
    torch.testing.assert_close(rebuilt(x), Sort()(x))
    # 7.9 M elements: input copy 32 MB, values + indices 95 MB: fits 200 MB; with the sort's copy (95 MB) it does not
    with pytest.raises(ResourceBudgetError, match=r"aten.sort.\w+ \(its workspace\)"):
        ir2torch.convert(torch2ir.convert(Sort(), (x,)), max_bytes=2 * 10**8)(x)


class _Attention(nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, q, q, dropout_p=0.0)


def test_attentions_math_path_counts_its_scores(tmp_path: Path) -> None:
    """A dropout probability planted in the file sends attention to its math path: ``batch x heads x queries x
    keys`` scores, 64 MB each here, counted as the outputs of the ops it decomposes into."""
    q = torch.randn(1, 1, 4096, 8)
    path = tmp_path / "m.ir.json"
    torch2ir.convert(_Attention(), (q,)).save(path)
    assert torch.equal(ir2torch.convert(path, max_bytes=10**8)(q), _Attention()(q))  # the flash kernel: blocks
    doc = json.loads(path.read_text())
    (node,) = [n for n in doc["implementations"]["root"]["nodes"].values()
               if n.get("implementation") == "aten.scaled_dot_product_attention.default"]
    if len(node["args"]) > 4:
        node["args"][4] = 0.5
    else:
        node["kwargs"] = {**node.get("kwargs", {}), "dropout_p": 0.5}
    path.write_text(json.dumps(doc))
    with pytest.raises(ResourceBudgetError, match=r"live tensors of the call|would allocate") as info:
        ir2torch.convert(path, max_bytes=10**8)(q)
    assert info.value.node == node["name"]


def test_int8_constructor_arguments_are_checked_before_building() -> None:
    """int8 constructors pack their weights with kernels that do not run on meta: their arguments are counted."""
    from tests.quant.test_int8 import CASES

    warnings.filterwarnings("ignore", category=UserWarning)
    torch.manual_seed(0)
    model, x = CASES["linear"][0](), CASES["linear"][1]
    ir = torch2ir.convert(model, (x,))
    assert torch.equal(ir2torch.convert(ir, model.state_dict())(x), model(x))
    assert ir["inner"].type == "int8_linear"
    ir["inner"].data = {**ir["inner"].data, "in_features": 10**6, "out_features": 10**6}  # 1 TB of int8 weights
    with pytest.raises(ResourceBudgetError, match=r"would allocate .* of parameters and buffers") as info:
        ir2torch.convert(ir, model.state_dict(), max_bytes=10**9)
    assert info.value.implementation == "inner"


@pytest.mark.parametrize("padding", [1, 10**4])
def test_an_int8_convolution_is_measured_by_its_packed_weight(padding: int) -> None:
    """``quantized::conv2d`` takes a packed weight no fake tensor stands for: its output is measured from the unpacked
    weight and parameters (:mod:`ir2torch.run_safety.unmeasured`). A planted padding of 10**4 asks for 1.6 GB."""
    from tests.quant.test_int8 import CASES

    warnings.filterwarnings("ignore", category=UserWarning)
    torch.manual_seed(0)
    model, x = CASES["conv2d"][0](), CASES["conv2d"][1]
    ir = torch2ir.convert(model, (x,))
    assert ir["inner"].type == "int8_conv2d"
    ir["inner"].data = {**ir["inner"].data, "padding": padding}
    rebuilt = ir2torch.convert(ir, model.state_dict(), max_bytes=10**8)
    if padding == 1:
        assert rebuilt(x).shape == nn.functional.conv2d(x, torch.zeros(4, 3, 3, 3), padding=1, dilation=2).shape
        return
    with pytest.raises(ResourceBudgetError, match=r"quantized.conv2d.* stand-in") as info:
        rebuilt(x)
    assert info.value.implementation == "root"  # the rebuilt module calling the int8 layer (its own code)


class _Mkldnn(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.repeat(SIZE, 1).clone().sum()  # clone and sum become to_mkldnn and to_dense in the file


@pytest.mark.parametrize("checked", [False, True], ids=["probed", "checked"])
def test_mkldnn_tensors_are_measured_by_their_model(tmp_path: Path, checked: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``to_mkldnn`` and ``to_dense`` have no fake kernel, and an mkldnn tensor no fake: measured as copies of their
    input (:mod:`ir2torch.run_safety.unmeasured`), against the live tensors of the call."""
    x = torch.randn(2, 4)
    path = tmp_path / "m.ir.json"
    torch2ir.convert(_Mkldnn(), (x,)).save(path)
    doc = json.loads(path.read_text())
    for node in doc["implementations"]["root"]["nodes"].values():
        op = {"aten.clone.default": "aten.to_mkldnn.default", "aten.sum.default": "aten.to_dense.default"}.get(
            node.get("implementation"))
        if op is not None:
            node["implementation"], node["args"], node["kwargs"] = op, node["args"][:1], {}
    allow = ["aten::to_mkldnn", "aten::to_dense"]  # outside the default surface
    if checked:
        _checked_only(monkeypatch)
    path.write_text(json.dumps(doc))
    assert torch.equal(ir2torch.convert(path, max_bytes=25 * 10**6, allow=allow)(x), x.repeat(SIZE, 1))
    path.write_text(json.dumps(doc).replace(str(SIZE), str(5 * 10**5)))  # 16 MB, and 16 MB more as mkldnn
    with pytest.raises(ResourceBudgetError, match=r"aten.to_mkldnn.default .*live tensors of the call") as info:
        ir2torch.convert(path, max_bytes=25 * 10**6, allow=allow)(x)
    assert info.value.node == "clone"


def test_a_quantized_max_pool_is_measured_as_its_float_pool() -> None:
    """int8 torchvision models pool quantized tensors: measured by the float kernel on a meta stand-in."""
    from ir2torch.run_safety.unmeasured import unmeasured_bytes

    x = torch.quantize_per_tensor(torch.rand(1, 3, 8, 8), 0.1, 0, torch.quint8)
    op = torch.ops.aten.quantized_max_pool2d.default
    assert unmeasured_bytes(op, (x, [2, 2], [2, 2], [0, 0], [1, 1], False), {}) == 1 * 3 * 4 * 4 * 4
    assert unmeasured_bytes(op, (x, [20, 20], [1, 1], [0, 0], [1, 1], False), {}) is None  # refused as eager is
    assert op(x, [2, 2], [2, 2], [0, 0], [1, 1], False).shape == (1, 3, 4, 4)
