"""common.verify: output comparison, first diverging module call, tolerances, errors and hook hygiene."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import VerifyReport, verify
from common.errors import IRError
from common.verify import VerificationError
from tests.models.zoo import by_name


def _case(name: str):
    case = by_name(name)
    model = case.build()
    args, kwargs = case.inputs()
    return model, args, kwargs


def _roundtrip(model: nn.Module, args, kwargs) -> nn.Module:
    return ir2torch.convert(torch2ir.convert(model, args, kwargs), model.state_dict())


def _no_hooks(*models: nn.Module) -> bool:
    return all(not m._forward_hooks for model in models for m in model.modules())


@pytest.fixture(scope="module")
def bert():
    return _case("bert")


# -- identical models ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["skip_connection", "called_twice", "dict_output", "multi_in_out", "kwargs"])
def test_roundtrip_of_zoo_model_matches(name):
    model, args, kwargs = _case(name)
    report = verify(model, _roundtrip(model, args, kwargs), args, kwargs)
    assert isinstance(report, VerifyReport)
    assert report.ok, str(report)
    assert report.max_abs_diff == 0.0
    assert report.first_divergence is None
    assert report.calls_compared >= 1
    assert all(rec.ok for rec in report.outputs)


def test_dict_output_paths_shapes_and_table():
    model, args, kwargs = _case("dict_output")
    report = verify(model, copy.deepcopy(model), args, kwargs)
    assert report.ok and report.max_abs_diff == 0.0 and report.first_divergence is None
    assert [rec.path for rec in report.outputs] == ["['a']", "['pair'][0]", "['pair'][1]"]
    assert report.outputs[0].shape == tuple(model(*args).get("a").shape)
    assert report.outputs[0].dtype == "torch.float32"
    text = str(report)
    assert text.splitlines()[0].startswith("verify: OK")
    assert "['pair'][1]" in text and "no divergence" in text and "DIFF" not in text


def test_bert_model_output_roundtrip(bert):
    model, args, kwargs = bert
    report = verify(model, _roundtrip(model, args, kwargs), args, kwargs)
    assert report.ok, str(report)
    assert report.max_abs_diff == 0.0
    assert report.first_divergence is None
    assert [rec.path for rec in report.outputs] == ["['last_hidden_state']", "['pooler_output']"]
    assert report.outputs[0].shape == (2, 8, 64)
    assert report.calls_compared > 20


# -- locating the first divergence --------------------------------------------------------------------------------
def test_broken_bert_module_is_the_first_divergence(bert):
    model, args, kwargs = bert
    broken = copy.deepcopy(model)
    with torch.no_grad():  # one entry only: a uniform shift of the bias would vanish in the next LayerNorm
        broken.encoder.layer[1].attention.output.dense.bias[0] += 0.5
    report = verify(model, broken, args, kwargs)
    assert not report.ok
    assert report.max_abs_diff > 1e-3
    div = report.first_divergence
    assert div is not None
    assert div.path == "encoder.layer.1.attention.output.dense"
    assert div.call == 0 and div.key == div.path
    assert div.max_abs_diff == pytest.approx(0.5, abs=1e-5)
    assert div.original_shapes == div.rebuilt_shapes == [(2, 8, 64)]
    text = str(report)
    assert text.splitlines()[0].startswith("verify: FAILED")
    assert "first divergence: encoder.layer.1.attention.output.dense (call 0): max abs diff 5.0e-01" in text
    assert "DIFF" in text


def test_modules_before_the_break_do_not_diverge(bert):
    model, args, kwargs = bert
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.encoder.layer[1].attention.output.dense.bias[0] += 0.5
    report = verify(model, broken, args, kwargs)
    assert report.diverged_keys[0] == "encoder.layer.1.attention.output.dense"
    assert not any(key.startswith(("embeddings", "encoder.layer.0")) for key in report.diverged_keys)
    assert "encoder.layer.1.output.dense" in report.diverged_keys  # everything downstream follows
    assert report.diverged_keys[-1] == ""  # the root call last


def test_divergence_hidden_from_the_outputs_is_still_located(bert):
    model, args, kwargs = bert
    shifted = copy.deepcopy(model)
    with torch.no_grad():  # a uniform bias shift is removed by the LayerNorm after it
        shifted.encoder.layer[1].attention.output.dense.bias += 0.5
    report = verify(model, shifted, args, kwargs)
    assert report.ok
    assert report.first_divergence is not None
    assert report.first_divergence.path == "encoder.layer.1.attention.output.dense"
    assert "no divergence" not in str(report)


def test_module_called_twice_diverges_at_its_first_call():
    model, args, kwargs = _case("called_twice")
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.block.scale[0] += 1.0
    report = verify(model, broken, args, kwargs)
    assert not report.ok
    # block.lin, block, block.lin@1, block@1 and the root call: all present in both models.
    assert report.calls_compared == 5
    assert report.unmatched_calls == 0
    div = report.first_divergence
    assert (div.path, div.call, div.key) == ("block", 0, "block")


class _SecondCallBump(nn.Module):
    """Adds ``bump`` on its second call only, so a copy with a bump differs from the second call on."""

    def __init__(self, bump: float = 0.0) -> None:
        super().__init__()
        self.bump = bump
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return x + self.bump if self.calls == 2 else x


class _TwiceWrapper(nn.Module):
    def __init__(self, bump: float = 0.0) -> None:
        super().__init__()
        self.inner = _SecondCallBump(bump)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.inner(x) * 2)


def test_second_call_is_keyed_with_at_one():
    report = verify(_TwiceWrapper(), _TwiceWrapper(bump=1.0), (torch.ones(3),))
    assert not report.ok
    div = report.first_divergence
    assert (div.path, div.call, div.key) == ("inner", 1, "inner@1")
    assert "first divergence: inner (call 1)" in str(report)


# -- tolerances -----------------------------------------------------------------------------------------------------
def test_tiny_perturbation_passes_default_tolerance_only():
    model, args, kwargs = _case("dict_output")
    nudged = copy.deepcopy(model)
    with torch.no_grad():
        nudged.lin.bias += 1e-7
    loose = verify(model, nudged, args, kwargs)
    assert loose.ok and loose.first_divergence is None
    assert 0.0 < loose.max_abs_diff < 1e-6
    strict = verify(model, nudged, args, kwargs, atol=0.0, rtol=0.0)
    assert not strict.ok
    assert strict.first_divergence is not None and strict.first_divergence.path == "lin"
    assert [rec.ok for rec in strict.outputs].count(False) >= 1


def test_equal_nans_match():
    class Nan(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x / 0.0 - x / 0.0  # nan (inf - inf) everywhere x != 0

    report = verify(Nan(), Nan(), (torch.ones(4),), atol=0.0, rtol=0.0)
    assert report.ok and report.max_abs_diff == 0.0


# -- structure --------------------------------------------------------------------------------------------------
class _Returns(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor):
        h = self.lin(x)
        return {"tuple": (h, x), "list": [h, x], "dict": {"h": h, "x": x}, "one": (h,), "scalar": (h, 3)}[self.kind]


@pytest.mark.parametrize("other", ["list", "dict", "one"])
def test_structure_mismatch_fails_with_message(other):
    original = _Returns("tuple")
    rebuilt = _Returns(other)
    rebuilt.load_state_dict(original.state_dict())
    report = verify(original, rebuilt, (torch.randn(2, 4),))
    assert not report.ok
    assert report.structure_mismatch is not None
    assert "tuple" in report.structure_mismatch and "[0]" in report.structure_mismatch
    assert "structure mismatch" in str(report)
    if other == "one":
        assert report.outputs == []  # leaves cannot be paired


def test_non_tensor_output_leaves_compare_with_eq():
    model = _Returns("scalar")
    report = verify(model, copy.deepcopy(model), (torch.randn(2, 4),))
    assert report.ok
    assert [(r.path, r.dtype, r.max_abs_diff) for r in report.outputs][1] == ("[1]", "int", None)


def test_submodule_with_differently_structured_output_is_skipped():
    class Pair(nn.Module):
        def __init__(self, pair: bool) -> None:
            super().__init__()
            self.pair = pair

        def forward(self, x: torch.Tensor):
            return (x * 2, x) if self.pair else x * 2

    class Outer(nn.Module):
        def __init__(self, pair: bool) -> None:
            super().__init__()
            self.sub = Pair(pair)
            self.pair = pair

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out = self.sub(x)
            return (out[0] if self.pair else out) + 1

    report = verify(Outer(True), Outer(False), (torch.randn(3),))
    assert report.ok and report.first_divergence is None
    assert report.skipped_keys == ["sub"]
    assert report.calls_compared == 1  # the root call only


def test_calls_in_one_model_only_are_counted_not_compared():
    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x)

    class Wrapped(Plain):
        def __init__(self) -> None:
            super().__init__()
            self.extra = nn.Identity()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.extra(self.lin(x))

    original = Plain()
    rebuilt = Wrapped()
    rebuilt.load_state_dict(original.state_dict())
    report = verify(original, rebuilt, (torch.randn(2, 4),))
    assert report.ok and report.first_divergence is None
    assert report.unmatched_calls == 1 and report.unmatched_keys == ["extra"]
    assert report.calls_compared == 2


def test_inputs_mutated_in_place_do_not_leak_into_the_other_run():
    class AddsInPlace(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.add_(1.0)

    x = torch.zeros(3)
    report = verify(AddsInPlace(), AddsInPlace(), (x,))
    assert report.ok and report.max_abs_diff == 0.0
    assert torch.equal(x, torch.zeros(3))


# -- errors and hooks --------------------------------------------------------------------------------------------
class _Raises(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("boom in forward")


@pytest.mark.parametrize("failing", ["original", "rebuilt"])
def test_failing_forward_raises_verification_error(failing):
    good, bad = _Returns("tuple"), _Raises()
    models = (bad, good) if failing == "original" else (good, bad)
    with pytest.raises(VerificationError, match=f"the {failing} model raised RuntimeError") as info:
        verify(*models, (torch.randn(2, 4),))
    assert isinstance(info.value, IRError)
    assert "boom in forward" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)
    assert _no_hooks(good, bad)


def test_hooks_are_removed_after_verify(bert):
    model, args, kwargs = bert
    other = copy.deepcopy(model)
    shared = _case("shared_sequential")[0]  # one Linear under three names: three hooks on one module
    verify(model, other, args, kwargs)
    verify(shared, copy.deepcopy(shared), *_case("shared_sequential")[1:])
    assert _no_hooks(model, other, shared)


def test_train_mode_dropout_is_compared_from_the_same_seed():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train()
    twin = nn.Sequential(nn.Linear(8, 8), nn.Dropout(0.5)).train()
    twin.load_state_dict(model.state_dict())
    x = torch.randn(4, 8)
    state = torch.random.get_rng_state()
    assert verify(model, twin, (x,)).ok
    assert torch.equal(torch.random.get_rng_state(), state), "verify must restore the global random state"
    assert verify(model, twin, (x,), seed=7).ok
    unseeded = verify(model, twin, (x,), seed=None)
    assert not unseeded.ok and unseeded.first_divergence.path == "1"


class _Huge(nn.Module):
    """Outputs of 1e7 next to values near zero (as random-weight networks give)."""

    def __init__(self, rounding: float = 0.0) -> None:
        super().__init__()
        self.rounding = rounding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.stack([x.sum() * 1e7, x.sum() * 1e-3])
        return out + torch.tensor([0.0, self.rounding])


def test_a_scaled_tolerance_compares_each_tensor_at_its_own_magnitude() -> None:
    x = torch.ones(4)
    original, rebuilt = _Huge(), _Huge(rounding=1e-3)  # 1e-3 off on the small element: a rounding of 4e7
    absolute = verify(original, rebuilt, (x,))
    assert not absolute.ok and absolute.tolerance == "atol 1e-05, rtol 1e-05"
    scaled = verify(original, rebuilt, (x,), scale=True)
    assert scaled.ok and "largest magnitude" in scaled.tolerance and "tolerance: atol 1e-05 scaled by" in str(scaled)
    far = verify(original, _Huge(rounding=1e3), (x,), scale=True)  # beyond 1e-5 x 4e7 = 400: still a failure
    assert not far.ok
