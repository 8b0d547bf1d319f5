"""Kernels that trust their arguments, refused what they would read or run unchecked before they run: batch-norm
statistics missing or mis-sized, absurd rounding decimals, special polynomials of huge degrees, splits into more
sections than a file should ask for; honest arguments run as in eager."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import FlatIR


def _one_op_document(op: str, args: dict, inputs: dict[str, tuple[list[int], str]]) -> dict:
    """A FlatIR calling ``op`` once with ``args`` (``{"$ref": name}`` for the graph inputs ``inputs``)."""
    leaf = {"type": None, "context": None, "children_spec": []}
    spec = [1, {"type": "builtins.tuple", "context": "null", "children_spec": [
        {"type": "builtins.tuple", "context": "null", "children_spec": [leaf] * len(inputs)},
        {"type": "builtins.dict", "context": "[]", "children_spec": []}]}]
    records = [{"name": k, "shape": shape, "dtype": dtype} for k, (shape, dtype) in inputs.items()]
    refs = [a["$ref"] for a in args.values() if isinstance(a, dict) and "$ref" in a]
    out = {"name": "n0", "shape": [], "dtype": "float32"}
    return {"format": "torch2ir.flat", "format_version": 1,
            "meta": {"model": "One", "torch_version": torch.__version__, "decomposition": "none", "device": "cpu",
                     "unread_state": []},
            "graph_inputs": records, "graph_outputs": [out], "in_spec": json.dumps(spec),
            "out_spec": json.dumps([1, leaf]), "forward_arg_names": list(inputs), "range_constraints": {},
            "weights": [], "weight_name_mapping": {},
            "nodes": [{"name": "n0", "op_type": op, "module_path": "root", "args": args, "kwargs": {},
                       "inputs": [next(r for r in records if r["name"] == n) for n in refs], "outputs": [out],
                       "source": ["root", "n0"]}]}


_X, _C, _TWO = {"$ref": "x"}, {"$ref": "c"}, {"$ref": "two"}
#: Batch-norm kernels given what they read or write unchecked (each segfaulted when run directly).
_BATCH_NORMS = {
    "weight_of_the_wrong_size": ("aten._native_batch_norm_legit.no_stats",
                                 {"input": _X, "weight": _TWO, "bias": _C, "training": True, "momentum": 0.1,
                                  "eps": 1e-5}, "weight has 2 elements for 3 channels"),
    "eval_without_running_stats": ("aten._native_batch_norm_legit.no_stats",
                                   {"input": _X, "weight": _C, "bias": _C, "training": False, "momentum": 0.1,
                                    "eps": 1e-5}, "eval mode without running statistics"),
    "public_eval_without_running_stats": ("aten.native_batch_norm.default",
                                          {"input": _X, "weight": _C, "bias": _C, "running_mean": None,
                                           "running_var": None, "training": False, "momentum": 0.1, "eps": 1e-5},
                                          "eval mode without running statistics"),
    "running_stats_too_small": ("aten.batch_norm_update_stats.default",
                                {"input": _X, "running_mean": _TWO, "running_var": _TWO, "momentum": 0.1},
                                "running_mean has 2 elements for 3 channels"),
}


@pytest.mark.parametrize("case", sorted(_BATCH_NORMS))
def test_batch_norm_kernels_are_refused_what_they_would_read_unchecked(case: str, tmp_path: Path) -> None:
    """The batch-norm kernels trust the sizes ``aten.batch_norm`` checks before calling them (the long op-level fuzz
    segfaulted ``_native_batch_norm_legit.no_stats`` on an empty weight): the forward's precondition refuses such
    arguments before the kernel runs. Run in a child process, so a regression is a failure, not a lost worker."""
    op, args, message = _BATCH_NORMS[case]
    path = tmp_path / "bn.flat.json"
    inputs = {"x": ([2, 3], "float32"), "c": ([3], "float32"), "two": ([2], "float32")}
    path.write_text(json.dumps(_one_op_document(op, args, inputs)))
    allow = [f"aten::{op.split('.')[1]}"]  # the public kernels are outside the default surface
    script = textwrap.dedent(f"""
        import torch, ir2torch
        from common import FlatIR
        from common.errors import ExecutionError

        rebuilt = ir2torch.convert(FlatIR.load({str(path)!r}, allow={allow!r}), allow={allow!r})
        try:
            rebuilt(torch.randn(2, 3), torch.randn(3), torch.randn(2))
        except ExecutionError as exc:
            print("refused", {message!r} in str(exc), "refused before it runs" in str(exc))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["refused", "True", "True"], out.stdout


def test_batch_norm_kernels_still_run_what_exports_write() -> None:
    """Honest batch norms (eval with running statistics, instance norm's training without) are unchanged."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.InstanceNorm2d(4, affine=True)).eval()
    x = torch.randn(2, 3, 8, 8)
    flat = torch2ir.lower(model, (x,), decompose=True)
    assert {"aten._native_batch_norm_legit_no_training.default", "aten._native_batch_norm_legit.no_stats"} <= {
        node.op_type for node in flat.nodes}
    assert torch.allclose(ir2torch.convert(flat, model)(x), model(x), atol=1e-5)


def test_round_with_an_absurd_decimals_count_is_refused_before_the_probe_runs(tmp_path: Path) -> None:
    """``aten.round.decimals`` with ``decimals=10**9`` (NaN in eager from 309 on): the op's reference, which the shape
    probe runs, computes ``10**decimals`` as a Python integer and ran for minutes in the long op-level fuzz. It is
    refused before anything runs; in a child with a timeout, so a regression fails instead of hanging the suite."""
    path = tmp_path / "round.flat.json"
    path.write_text(json.dumps(_one_op_document("aten.round.decimals", {"self": _X, "decimals": 10**9},
                                                {"x": ([2, 3], "float32")})))
    script = textwrap.dedent(f"""
        import torch, ir2torch
        from common import FlatIR
        from common.errors import ExecutionError

        allow = ["aten::round"]  # outside the default surface
        rebuilt = ir2torch.convert(FlatIR.load({str(path)!r}, allow=allow), allow=allow)
        try:
            rebuilt(torch.randn(2, 3))
        except ExecutionError as exc:
            print("refused", "decimals=1000000000 is beyond" in str(exc))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["refused", "True"], out.stdout


def test_round_with_decimals_runs_as_in_eager() -> None:
    class Round(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.round(x, decimals=3) + torch.round(x, decimals=-1)

    x = torch.randn(4, 5) * 100
    model = Round()
    allow = ["aten::round"]  # outside the default surface
    assert torch.equal(ir2torch.convert(torch2ir.convert(model, (x,), allow=allow), allow=allow)(x), model(x))


@pytest.mark.parametrize("budget", [None, 10**8])
@pytest.mark.parametrize("overload", ["n_scalar", "default"])
def test_a_special_polynomial_of_a_huge_degree_is_refused_before_it_runs(overload: str, budget: int | None,
                                                                         tmp_path: Path) -> None:
    """The special polynomials run an ``n``-step recurrence per element (``n = 2**62`` ran for minutes in the long
    op-level fuzz). A number ``n`` is checked before anything runs; a tensor ``n`` on its values, in a checked run
    (the shape probe has none). In a child with a timeout, so a regression fails instead of hanging the suite."""
    n = 2**62 if overload == "n_scalar" else {"$ref": "n"}
    inputs = {"x": ([2, 3], "float32")} | ({} if overload == "n_scalar" else {"n": ([3], "float32")})
    path = tmp_path / "poly.flat.json"
    path.write_text(json.dumps(_one_op_document(f"aten.special_legendre_polynomial_p.{overload}",
                                                {"x": _X, "n": n}, inputs)))
    script = textwrap.dedent(f"""
        import torch, ir2torch
        from common import FlatIR
        from common.errors import ExecutionError

        allow = ["aten::special_legendre_polynomial_p"]  # outside the default surface
        rebuilt = ir2torch.convert(FlatIR.load({str(path)!r}, allow=allow), max_bytes={budget!r}, allow=allow)
        x = torch.rand(2, 3)
        if {overload!r} == "default":
            small = torch.tensor([3.0, 5.0, 7.0])
            print("exact", torch.equal(rebuilt(x, small), torch.special.legendre_polynomial_p(x, small)))
            args = (x, torch.tensor([3.0, 5.0, 2.0**62]))
        else:
            args = (x,)
        try:
            rebuilt(*args)
        except ExecutionError as exc:
            print("refused", "steps of the recurrence" in str(exc))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    expected = ([] if overload == "n_scalar" else ["exact", "True"]) + ["refused", "True"]
    assert out.stdout.split() == expected, out.stdout


def test_special_polynomials_of_honest_degrees_run_as_in_eager() -> None:
    class Poly(nn.Module):
        def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
            return torch.special.legendre_polynomial_p(x, n) + torch.special.hermite_polynomial_h(x, 4)

    x, n = torch.rand(3, 4), torch.tensor([1.0, 2.0, 3.0, 9.0])
    model = Poly()
    allow = ["aten::special_legendre_polynomial_p", "aten::special_hermite_polynomial_h"]  # outside the surface
    rebuilt = ir2torch.convert(torch2ir.convert(model, (x, n), allow=allow), max_bytes=10**8, allow=allow)
    assert torch.equal(rebuilt(x, n), model(x, n))


def test_a_split_into_a_billion_sections_is_refused_at_load(tmp_path: Path) -> None:
    """``tensor_split(x, 10**9)`` returns a billion empty views (built for minutes in the long op-level fuzz, unseen
    by the byte budget; the op is CompositeImplicit, so the forward's dispatch-level checks only see its slices):
    a literal count above the limit is refused at load, naming the node; the count read from a 0-d tensor is a
    refused overload."""
    from common.errors import ArgumentMismatchError, UnsafeTargetError

    path = tmp_path / "split.flat.json"
    path.write_text(json.dumps(_one_op_document("aten.tensor_split.sections", {"self": _X, "sections": 10**9},
                                                {"x": ([2, 3], "float32")})))
    allow = ["aten::tensor_split"]  # outside the default surface; the opt-in leaves the load checks in place
    with pytest.raises(ArgumentMismatchError, match=r"'sections' is 1000000000, more than 100000") as info:
        FlatIR.load(path, allow=allow)
    assert info.value.node == "n0"
    path.write_text(json.dumps(_one_op_document("aten.tensor_split.tensor_indices_or_sections",
                                                {"self": _X, "tensor_indices_or_sections": {"$ref": "n"}},
                                                {"x": ([2, 3], "float32"), "n": ([], "int64")})))
    with pytest.raises(UnsafeTargetError, match="section count read from tensor data"):
        FlatIR.load(path, allow=allow)


def test_tensor_split_with_more_sections_than_elements_runs_as_in_eager() -> None:
    class Split(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.stack([part.sum() for part in torch.tensor_split(x, 7)])

    x = torch.randn(3, 2)
    model = Split()
    allow = ["aten::tensor_split"]  # outside the default surface
    assert torch.equal(ir2torch.convert(torch2ir.convert(model, (x,), allow=allow), max_bytes=10**8, allow=allow)(x),
                       model(x))
