"""The forward's memory budget: a file whose graph would allocate more than ``max_bytes`` is refused at the call,
before anything is allocated, naming the implementation, the node and the operator.

Each hostile document is a real saved IR or FlatIR of a small model whose size literal (``SIZE``, an odd number
nothing else in the file contains) is replaced by a huge one, the way an attacker would edit a file. The sizes
are far beyond the machine's memory (10**12 elements) or, where the test checks that nothing was allocated, a
few hundred MB beyond a small budget, measured in a child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.export import Dim

import ir2torch
import torch2ir
from common import IR, FlatIR
from common.errors import ResourceBudgetError
from tests.helpers import PEAK_KIB_SOURCE

SIZE = 7919  # a literal the file holds once: the size the attacker edits
HUGE = 10**12


class _Factory(nn.Module):
    """One size-from-argument operator per kind, each fed by the literal ``SIZE``."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x).sum()
        if self.kind == "full":
            z = torch.full([SIZE], 2.0)
        elif self.kind == "zeros":
            z = torch.zeros(SIZE)
        elif self.kind == "empty":
            z = torch.empty(SIZE).fill_(1.0)
        elif self.kind == "arange":
            z = torch.arange(SIZE, dtype=torch.float32)
        elif self.kind == "expand":
            z = x[:1, :1].expand(SIZE, 4).contiguous()
        elif self.kind == "repeat":
            z = x.repeat(SIZE, 1)
        elif self.kind == "outer":  # a pure op whose output is the product of its inputs' sizes
            v = torch.ones(SIZE)
            z = v[:, None] * v[None, :]
        else:
            raise AssertionError(self.kind)
        return y + z.sum()


KINDS = ("full", "zeros", "empty", "arange", "expand", "repeat", "outer")


def _hostile(tmp_path: Path, model: nn.Module, args: tuple, *, flat: bool = False, size: int = HUGE,
             **convert: object) -> Path:
    """``model``'s saved IR (or FlatIR) with every ``SIZE`` literal replaced by ``size``."""
    path = tmp_path / ("m.flat.json" if flat else "m.ir.json")
    (torch2ir.lower(model, args) if flat else torch2ir.convert(model, args, **convert)).save(path)
    text = path.read_text()
    assert str(SIZE) in text
    path.write_text(text.replace(str(SIZE), str(size)))
    return path


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("flat", [False, True], ids=["ir", "flat"])
def test_a_size_beyond_the_budget_is_refused_at_the_call_naming_the_node(tmp_path: Path, kind: str,
                                                                         flat: bool) -> None:
    torch.manual_seed(0)
    model, x = _Factory(kind).eval(), torch.randn(2, 4)
    honest = ir2torch.convert(torch2ir.lower(model, (x,)) if flat else torch2ir.convert(model, (x,)),
                              model.state_dict())
    torch.testing.assert_close(honest(x), model(x), rtol=0, atol=0)  # the budget refuses nothing it should run
    path = _hostile(tmp_path, model, (x,), flat=flat)
    loaded = FlatIR.load(path) if flat else IR.load(path)
    rebuilt = ir2torch.convert(loaded, model.state_dict(), max_bytes=10**9)  # building is fine: no forward yet
    with pytest.raises(ResourceBudgetError) as info:
        rebuilt(x)
    error = info.value
    assert "forward budget of 953.7 MB (max_bytes)" in str(error) and "nothing was allocated" in str(error)
    assert error.implementation == "root"
    assert error.node is not None and error.node in str(error)
    with pytest.raises(ResourceBudgetError):  # refused again: the refusal is not remembered as a pass
        rebuilt(x)


def test_the_default_budget_is_the_memory_available(tmp_path: Path) -> None:
    model, x = _Factory("full").eval(), torch.randn(2, 4)
    rebuilt = ir2torch.convert(IR.load(_hostile(tmp_path, model, (x,))), model.state_dict())
    with pytest.raises(ResourceBudgetError, match=r"the memory available on cpu"):
        rebuilt(x)


def test_none_disables_the_forward_check_and_meta_never_allocates(tmp_path: Path) -> None:
    model, x = _Factory("full").eval(), torch.randn(2, 4)
    path = _hostile(tmp_path, model, (x,), size=3 * 10**6)
    assert ir2torch.convert(IR.load(path), model.state_dict(), max_bytes=10**6) is not None
    with pytest.raises(ResourceBudgetError):
        ir2torch.convert(IR.load(path), model.state_dict(), max_bytes=10**6)(x)
    out = ir2torch.convert(IR.load(path), model.state_dict(), max_bytes=None)(x)  # 12 MB: runs unchecked
    assert out.item() == pytest.approx(model(x).item() + 2.0 * (3 * 10**6 - SIZE), rel=1e-5)
    meta = ir2torch.convert(IR.load(_hostile(tmp_path, model, (x,), size=10**5)), device="meta")
    assert meta(x.to("meta")).device.type == "meta"
    meta = ir2torch.convert(IR.load(_hostile(tmp_path, model, (x,))), device="meta")
    with pytest.raises(ResourceBudgetError, match="the memory available on cpu"):  # full() runs on the CPU
        meta(x.to("meta"))


def test_the_probe_allocates_nothing_real(tmp_path: Path) -> None:
    """In a child process: a 1.2 GB node under a 100 MB budget is refused and the process never grew by it."""
    model, x = _Factory("full").eval(), torch.randn(2, 4)
    path = _hostile(tmp_path, model, (x,), size=3 * 10**8)
    torch.save(model.state_dict(), tmp_path / "state.pt")
    script = textwrap.dedent(f"""
        import torch, ir2torch
        from common import IR
        from common.errors import ResourceBudgetError
        state = torch.load({str(tmp_path / "state.pt")!r}, weights_only=True)
        model = ir2torch.convert(IR.load({str(path)!r}), state, max_bytes=10**8)
        before = peak_kib()
        try:
            model(torch.randn(2, 4))
        except ResourceBudgetError as exc:
            print("refused", "node" in str(exc))
        grown = peak_kib() - before
        print("grown_kb", grown)
    """)
    out = subprocess.run([sys.executable, "-c", PEAK_KIB_SOURCE + script], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.strip().splitlines())
    assert lines["refused"] == "True"
    assert int(lines["grown_kb"]) < 200 * 1024  # the node alone is 1.2 GB


def test_constant_folding_computes_only_what_passed_the_budget(tmp_path: Path) -> None:
    class Square(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            table = torch.ones(SIZE, SIZE).tril()  # folded: literals only
            return x + table[:2, :4]

    model, x = Square(), torch.randn(2, 4)
    honest = ir2torch.convert(torch2ir.convert(model, (x,)))
    assert torch.equal(honest(x), model(x))
    rebuilt = ir2torch.convert(IR.load(_hostile(tmp_path, model, (x,), size=10**6)), max_bytes=10**9)
    with pytest.raises(ResourceBudgetError, match=r"implementation 'root', node '\w+'"):
        rebuilt(x)
    assert "_ir_folded" not in rebuilt.__dict__  # no folded value was computed


class _Dynamic(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum() + x.new_zeros(x.shape[0] * SIZE).sum()


def test_dynamic_sizes_are_probed_again_for_each_new_signature(tmp_path: Path) -> None:
    model, x = _Dynamic(), torch.randn(4, 2)
    path = _hostile(tmp_path, model, (x,), size=10**5, dynamic_shapes=({0: Dim("batch", max=10**6)},))
    rebuilt = ir2torch.convert(IR.load(path), max_bytes=10**8)
    assert rebuilt(x).item() == pytest.approx(x.sum().item(), rel=1e-6)  # 1.6 MB: within the budget
    assert rebuilt(torch.ones(200, 2)).item() == 400.0  # 80 MB: within the budget
    with pytest.raises(ResourceBudgetError, match="3.7 GB"):
        rebuilt(torch.ones(10**4, 2))  # 10**9 elements: refused, with this batch only
    assert rebuilt(torch.ones(3, 2)).item() == 6.0


class _DataDependent(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.nonzero().shape[0]
        return x.sum() + torch.zeros(n * SIZE).sum()


def test_a_size_that_depends_on_data_is_checked_before_each_operator_runs(tmp_path: Path) -> None:
    model, x = _DataDependent(), torch.tensor([1.0, 0.0, 2.0])
    honest = ir2torch.convert(torch2ir.convert(model, (x,)))
    assert torch.equal(honest(x), model(x))
    rebuilt = ir2torch.convert(IR.load(_hostile(tmp_path, model, (x,))), max_bytes=10**9)
    with pytest.raises(ResourceBudgetError, match=r"aten.zeros.default would allocate"):
        rebuilt(x)
    assert rebuilt(torch.zeros(3)).item() == 0.0  # no nonzero element: a size of 0 runs


def test_hooks_and_state_see_only_real_calls() -> None:
    """The probe runs on fake tensors: no hook fires, no buffer is written, the result is the real one."""

    class Counter(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls.add_(1)
            return self.lin(x)

    torch.manual_seed(0)
    model, x = Counter(), torch.randn(2, 4)
    for build in (_module_level, _flat):
        rebuilt = build(model, x)
        seen: list[torch.Tensor] = []
        rebuilt.register_forward_hook(lambda m, a, out, seen=seen: seen.append(out))
        before = rebuilt.calls.item()
        out = rebuilt(x)
        assert rebuilt.calls.item() == before + 1
        assert len(seen) == 1 and type(seen[0]) is torch.Tensor and torch.equal(seen[0], out)
        torch.testing.assert_close(out, model.lin(x), rtol=0, atol=0)


def _module_level(model: nn.Module, x: torch.Tensor) -> nn.Module:
    return ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict())


def _flat(model: nn.Module, x: torch.Tensor) -> nn.Module:
    return ir2torch.convert(torch2ir.lower(model, (x,)), model.state_dict())


def test_a_submodule_called_on_its_own_is_probed_too(tmp_path: Path) -> None:
    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = _Factory("zeros")

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x) * 2

    model, x = Outer().eval(), torch.randn(2, 4)
    rebuilt = ir2torch.convert(IR.load(_hostile(tmp_path, model, (x,))), model.state_dict(), max_bytes=10**9)
    with pytest.raises(ResourceBudgetError, match="implementation 'inner'"):
        rebuilt.inner(x)
    with pytest.raises(ResourceBudgetError, match="implementation 'inner'"):
        rebuilt(x)


def test_the_probe_leaves_the_random_generator_alone() -> None:
    """A train-mode dropout draws the same mask in the first (probed) call as eager does."""
    torch.manual_seed(0)
    model, x = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5), nn.Linear(8, 2)).train(), torch.randn(4, 8)
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x,)), model.state_dict()).train()
    torch.manual_seed(3)
    expected, state = model(x), torch.get_rng_state()
    torch.manual_seed(3)
    assert torch.equal(rebuilt(x), expected)
    assert torch.equal(torch.get_rng_state(), state)


def test_an_observer_with_huge_bins_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    """A histogram observer's ``bins`` (a constructor attribute) sizes its histogram: the rebuild's budget."""
    import torch.ao.quantization as tq

    model = nn.Sequential(tq.QuantStub(), nn.Linear(4, 4), tq.DeQuantStub())
    model.qconfig = tq.QConfig(activation=tq.HistogramObserver.with_args(bins=SIZE),
                               weight=tq.default_weight_observer)
    with pytest.warns(Warning):
        tq.prepare(model, inplace=True)
    x = torch.randn(2, 4)
    model(x)
    path = _hostile(tmp_path, model, (x,), size=10**11)
    with pytest.raises(ResourceBudgetError, match=r"activation_post_process' \(372.5 GB\)"):
        ir2torch.convert(IR.load(path), model.state_dict(), max_bytes=10**9)


class _Branches(nn.Module):
    """A data-dependent ``torch.cond``: the probe cannot pick a branch, so it measures both."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda v: v + torch.full([SIZE], 1.0).sum(), lambda v: v - 1.0, (x,))


def test_a_branch_of_a_data_dependent_cond_is_measured_before_it_runs(tmp_path: Path) -> None:
    model, x = _Branches(), torch.ones(2, 3)
    honest = ir2torch.convert(torch2ir.convert(model, (x,)))
    assert torch.equal(honest(x), model(x)) and torch.equal(honest(-x), model(-x))
    rebuilt = ir2torch.convert(IR.load(_hostile(tmp_path, model, (x,))), max_bytes=10**9)
    with pytest.raises(ResourceBudgetError, match=r"aten.full.default would allocate 3.6 TB"):
        rebuilt(-x)  # the hostile branch is not even the one taken: measured all the same


def test_an_empty_weight_norm_is_refused_before_its_kernel_runs(tmp_path: Path) -> None:
    """``aten._weight_norm`` (in wav2vec2's exports) divides by zero on an empty input and kills the process: the
    probe's precondition refuses it, and the node calling it tests it at every call, budget or not. Run in a
    child process, so a regression is a failure, not a lost worker."""
    script = textwrap.dedent("""
        import torch, ir2torch, torch2ir
        from torch import nn
        from common.errors import ExecutionError

        class Norm(nn.Module):
            def forward(self, v, g):
                return torch._weight_norm(v, g, 0)

        v, g = torch.randn(3, 4), torch.randn(3, 1)
        for ir in (torch2ir.lower(Norm(), (v, g)), torch2ir.convert(Norm(), (v, g))):
            for max_bytes in ("available", None):  # no memory limit: the precondition still holds
                rebuilt = ir2torch.convert(ir, guard_inputs=False, max_bytes=max_bytes)
                assert torch.equal(rebuilt(v, g), Norm()(v, g))
                try:
                    rebuilt(torch.empty(0, 4), torch.empty(0, 1))
                except ExecutionError as exc:
                    print("refused", "empty tensor" in str(exc))
    """)
    out = subprocess.run([sys.executable, "-c", PEAK_KIB_SOURCE + script], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["refused", "True"] * 4


def _bincount_document() -> dict:
    """A FlatIR of ``aten.bincount(x)`` for an int64 ``x`` of 4 elements (export cannot trace bincount: its size is
    unbacked)."""
    leaf = {"type": None, "context": None, "children_spec": []}
    spec = [1, {"type": "builtins.tuple", "context": "null", "children_spec": [
        {"type": "builtins.tuple", "context": "null", "children_spec": [leaf]},
        {"type": "builtins.dict", "context": "[]", "children_spec": []}]}]
    x = {"name": "x", "shape": [4], "dtype": "int64"}
    out = {"name": "n0", "shape": [], "dtype": "int64"}
    return {"format": "torch2ir.flat", "format_version": 1,
            "meta": {"model": "Counts", "torch_version": torch.__version__, "decomposition": "none", "device": "cpu",
                     "unread_state": []},
            "graph_inputs": [x], "graph_outputs": [out], "in_spec": json.dumps(spec),
            "out_spec": json.dumps([1, leaf]), "forward_arg_names": ["x"], "range_constraints": {}, "weights": [],
            "weight_name_mapping": {},
            "nodes": [{"name": "n0", "op_type": "aten.bincount.default", "module_path": "root",
                       "args": {"self": {"$ref": "x"}}, "kwargs": {}, "inputs": [x], "outputs": [out],
                       "source": ["root", "n0"]}]}


def test_a_data_dependent_size_is_computed_from_the_real_arguments(tmp_path: Path) -> None:
    """``bincount``'s output has ``max(x) + 1`` elements: a checked call reads that from the real input first."""
    path = tmp_path / "counts.flat.json"
    path.write_text(json.dumps(_bincount_document()))
    allow = ["aten::bincount"]  # outside the default surface (no corpus model calls it)
    rebuilt = ir2torch.convert(FlatIR.load(path, allow=allow), max_bytes=10**6, allow=allow)
    assert torch.equal(rebuilt(torch.tensor([0, 1, 1, 3])), torch.tensor([1, 2, 0, 1]))
    with pytest.raises(ResourceBudgetError, match=r"aten.bincount.default would allocate 7.5 GB"):
        rebuilt(torch.tensor([0, 1, 2, 10**9]))

