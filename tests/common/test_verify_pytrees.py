"""common.verify and assert_roundtrip on any output pytree: types registered without ``flatten_with_keys_fn``
(diffusers' ``BaseOutput``), registered dataclasses, named tuples, transformers ``ModelOutput``, nested
containers, ``None`` and other non-tensor leaves; differing structures named by the path where they differ."""

from __future__ import annotations

import copy
import math
from collections import OrderedDict, namedtuple
from dataclasses import dataclass, fields
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree
from transformers.modeling_outputs import BaseModelOutput

import ir2torch
from common import verify
from common.testing import assert_roundtrip


@dataclass
class SampleOutput(OrderedDict):
    """Like diffusers' ``BaseOutput`` (e.g. ``UNet2DOutput``): a dataclass over an OrderedDict of its set fields."""

    sample: torch.Tensor
    extra: Any = None

    def __post_init__(self) -> None:
        for f in fields(self):
            if getattr(self, f.name) is not None:
                self[f.name] = getattr(self, f.name)


# Registered as diffusers does: flatten and unflatten only, no flatten_with_keys_fn.
pytree.register_pytree_node(
    SampleOutput,
    lambda out: (list(out.values()), list(out.keys())),
    lambda values, keys: SampleOutput(**dict(zip(keys, values))),
    serialized_type_name=f"{__name__}.SampleOutput",
)


@dataclass
class Stats:
    """A plain dataclass registered with pytree, without keys."""

    mean: torch.Tensor
    count: int


pytree.register_pytree_node(Stats, lambda s: ([s.mean, s.count], None), lambda values, _: Stats(*values))


class Pair:
    """Neither a mapping nor a dataclass: its children can only be named by index. ``mode`` is its context."""

    def __init__(self, first: Any, second: Any, mode: str = "plain") -> None:
        self.first, self.second, self.mode = first, second, mode


pytree.register_pytree_node(
    Pair, lambda p: ([p.first, p.second], p.mode), lambda values, mode: Pair(*values, mode=mode)
)

Point = namedtuple("Point", ["x", "label"])
OtherPoint = namedtuple("OtherPoint", ["x", "label"])


def test_the_registered_types_really_have_no_key_functions():
    for tree in (SampleOutput(sample=torch.ones(1)), Stats(torch.ones(1), 1), Pair(1, 2)):
        with pytest.raises(ValueError, match="flatten_with_keys_fn"):
            pytree.tree_flatten_with_path(tree)


class Net(nn.Module):
    """Returns one of several output pytrees around two linear layers; ``variant`` changes it."""

    def __init__(self, kind: str, variant: str = "") -> None:
        super().__init__()
        self.kind, self.variant = kind, variant
        self.lin = nn.Linear(4, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> Any:
        h = self.lin(x)
        y = self.head(h)
        v = self.variant
        if self.kind == "sample":
            return SampleOutput(sample=y, extra=h if v == "extra" else None)
        if self.kind == "pair":
            return Pair(y, (h, 3) if v == "three" else (h,), mode="odd" if v == "mode" else "plain")
        label = {"label": "tog", "int_float": 3.0}.get(v, "tag")
        count = 4 if v == "count" else 3
        return {
            "out": SampleOutput(sample=y + 1e-3 if v == "bump" else y),
            "stats": Stats(h.mean(-1), count),
            "points": [
                (OtherPoint if v == "namedtuple" else Point)(y, label),
                (None, math.nan, 2.5),
            ],
            "model_output": BaseModelOutput(last_hidden_state=h),
        }


MIXED_PATHS = [
    "['out']['sample']", "['stats'].mean", "['stats'].count", "['points'][0].x", "['points'][0].label",
    "['points'][1][0]", "['points'][1][1]", "['points'][1][2]", "['model_output']['last_hidden_state']",
]  # fmt: skip


def _pair(kind: str, variant: str = "") -> tuple[Net, Net]:
    torch.manual_seed(0)
    original = Net(kind)
    other = Net(kind, variant)
    other.load_state_dict(original.state_dict())
    return original, other


X = (torch.randn(3, 4),)


# -- identical outputs --------------------------------------------------------------------------------------------
def test_keyless_output_type_is_compared_and_named_by_its_items():
    original, twin = _pair("sample")
    report = verify(original, twin, X)
    assert report.ok, str(report)
    assert report.max_abs_diff == 0.0 and report.first_divergence is None and report.structure_mismatch is None
    assert [(r.path, r.shape, r.dtype) for r in report.outputs] == [("['sample']", (3, 2), "torch.float32")]
    assert report.calls_compared == 3


def test_index_keys_for_a_type_that_is_neither_mapping_nor_dataclass():
    original, twin = _pair("pair")
    report = verify(original, twin, X)
    assert report.ok and report.max_abs_diff == 0.0
    assert [r.path for r in report.outputs] == ["[0]", "[1][0]"]


def test_mixed_pytree_with_non_tensor_leaves():
    original, twin = _pair("mixed")
    report = verify(original, twin, X)
    assert report.ok, str(report)
    assert report.max_abs_diff == 0.0 and report.structure_mismatch is None
    assert [r.path for r in report.outputs] == MIXED_PATHS
    kinds = {r.path: (r.dtype, r.max_abs_diff) for r in report.outputs}
    assert kinds["['stats'].count"] == ("int", None)
    assert kinds["['points'][0].label"] == ("str", None)
    assert kinds["['points'][1][0]"] == ("NoneType", None)
    assert kinds["['points'][1][1]"] == ("float", None)  # NaN == NaN, as for tensors (equal_nan)
    assert kinds["['out']['sample']"] == ("torch.float32", 0.0)
    assert all(r.ok for r in report.outputs)
    assert "['model_output']['last_hidden_state']" in str(report)


# -- differing leaves ---------------------------------------------------------------------------------------------
def test_perturbed_tensor_leaf_is_named():
    original, bumped = _pair("mixed", "bump")
    report = verify(original, bumped, X)
    assert not report.ok
    assert report.max_abs_diff == pytest.approx(1e-3, rel=1e-3)
    assert [r.path for r in report.outputs if not r.ok] == ["['out']['sample']"]
    row = next(line for line in str(report).splitlines() if line.startswith("['out']['sample']"))
    assert row.endswith("DIFF")
    assert report.first_divergence is not None and report.first_divergence.path == ""  # the root adds the bump


@pytest.mark.parametrize(
    ("variant", "path", "dtype"),
    [("count", "['stats'].count", "int"), ("label", "['points'][0].label", "str"),
     ("int_float", "['points'][0].label", "str -> float")],
)  # fmt: skip
def test_differing_non_tensor_leaf_is_named(variant, path, dtype):
    original, other = _pair("mixed", variant)
    report = verify(original, other, X)
    assert not report.ok
    assert report.structure_mismatch is None
    assert [(r.path, r.dtype, r.ok) for r in report.outputs if not r.ok] == [(path, dtype, False)]
    assert report.max_abs_diff == 0.0  # over tensors only


def test_equal_int_and_float_leaves_still_differ_in_type():
    class Returns(nn.Module):
        def __init__(self, value: Any) -> None:
            super().__init__()
            self.value = value

        def forward(self, x: torch.Tensor) -> Any:
            return x, self.value

    assert verify(Returns(1), Returns(1), X).ok
    report = verify(Returns(1), Returns(1.0), X)  # 1 == 1.0, but a rebuild must not change the type
    assert not report.ok and report.outputs[1].dtype == "int -> float"
    tensor_vs_none = verify(Returns(torch.ones(2)), Returns(None), X)
    assert not tensor_vs_none.ok and tensor_vs_none.outputs[1].dtype == "torch.float32 -> NoneType"


def test_module_calls_returning_keyless_types_are_compared():
    class Inner(nn.Module):
        def __init__(self, shift: float) -> None:
            super().__init__()
            self.lin, self.shift = nn.Linear(4, 4), shift

        def forward(self, x: torch.Tensor) -> SampleOutput:
            return SampleOutput(sample=self.lin(x) + self.shift)

    class Outer(nn.Module):
        def __init__(self, shift: float = 0.0) -> None:
            super().__init__()
            self.inner = Inner(shift)

        def forward(self, x: torch.Tensor) -> Pair:
            return Pair(self.inner(x)["sample"], x)

    torch.manual_seed(0)
    original = Outer()
    assert verify(original, copy.deepcopy(original), X).calls_compared == 3
    shifted = Outer(0.5)
    shifted.load_state_dict(original.state_dict())
    report = verify(original, shifted, X)
    assert not report.ok and report.calls_compared == 3
    assert report.first_divergence.path == "inner"
    assert report.first_divergence.max_abs_diff == pytest.approx(0.5)
    assert [r.path for r in report.outputs if not r.ok] == ["[0]"]


# -- differing structures -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "variant", "expected"),
    [
        ("sample", "extra", "at output: the original has SampleOutput with 1 child (['sample']), the rebuilt model "
                            "SampleOutput with 2 children (['sample'], ['extra'])"),
        ("pair", "three", "at output[1]: the original has tuple with 1 child ([0]), the rebuilt model tuple with "
                          "2 children ([0], [1])"),
        ("pair", "mode", "at output: the original has Pair with 2 children ([0], [1]) (context 'plain'), the rebuilt "
                         "model Pair with 2 children ([0], [1]) (context 'odd')"),
        ("mixed", "namedtuple", "at output['points'][0]: the original has Point with 2 children (.x, .label), the "
                                "rebuilt model OtherPoint"),
    ],
)  # fmt: skip
def test_differing_structure_names_the_first_differing_path(kind, variant, expected):
    original, other = _pair(kind, variant)
    report = verify(original, other, X)
    assert not report.ok
    assert report.structure_mismatch is not None
    assert report.structure_mismatch.startswith(expected), report.structure_mismatch
    assert f"structure mismatch: {expected}" in str(report)


def test_leaf_against_container_is_a_structure_mismatch():
    class Returns(nn.Module):
        def __init__(self, nested: bool) -> None:
            super().__init__()
            self.nested = nested

        def forward(self, x: torch.Tensor) -> Any:
            return {"a": Stats(x, 1) if self.nested else x}

    report = verify(Returns(True), Returns(False), X)
    assert not report.ok
    assert report.structure_mismatch.startswith(
        "at output['a']: the original has Stats with 2 children (.mean, .count), the rebuilt model a torch.float32 leaf"
    )
    assert report.outputs == []  # 2 leaves against 1: nothing to pair


# -- assert_roundtrip ---------------------------------------------------------------------------------------------
class SampleNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> SampleOutput:
        return SampleOutput(sample=torch.relu(self.lin(x)))


def test_assert_roundtrip_on_a_keyless_output_type():
    torch.manual_seed(0)
    model = SampleNet().eval()
    _, rebuilt, report = assert_roundtrip(model, X)
    assert report.ok and report.max_abs_diff == 0.0
    assert [r.path for r in report.outputs] == ["['sample']"]
    out = rebuilt(*X)
    assert type(out) is SampleOutput and torch.equal(out["sample"], model(*X)["sample"])


class _Shifted(nn.Linear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 0.5


def test_assert_roundtrip_failure_names_the_keyless_output_path():
    torch.manual_seed(0)
    rebuilder = ir2torch.get_default_converter()
    rebuilder.register_override("linear", lambda impl: _Shifted(**impl.data))
    with pytest.raises(AssertionError, match=r"(?s)rebuilt outputs differ.*\['sample'\].*DIFF.*first divergence: lin"):
        assert_roundtrip(SampleNet().eval(), X, rebuilder=rebuilder)
