"""Smoke tests for the model zoo: every case builds deterministically, runs, exports, and its tags are honest."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._pytree import tree_leaves

from tests.models.real import REAL
from tests.models.zoo import ZOO, Case, by_name

ALL: list[Case] = [*ZOO, *REAL]
IDS = [case.name for case in ALL]

# Tags that are checked against the model itself rather than taken on trust.
MODULE_TAGS = ("dropout", "batchnorm", "tied", "alias")
EXPORT_TAGS = ("no_grad", "non_persistent", "constant")


def _leaves(out: Any) -> list[torch.Tensor]:
    """The tensor leaves of a (possibly nested / ModelOutput) output."""
    return [leaf for leaf in tree_leaves(out) if isinstance(leaf, torch.Tensor)]


def _module_tags(model: nn.Module) -> set[str]:
    """The subset of MODULE_TAGS that the module structure of ``model`` actually has."""
    tags: set[str] = set()
    modules = list(model.named_modules(remove_duplicate=False))
    if any(isinstance(m, nn.modules.dropout._DropoutNd) for _, m in modules):
        tags.add("dropout")
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for _, m in modules):
        tags.add("batchnorm")
    if len({id(m) for _, m in modules}) < len(modules):
        tags.add("alias")
    owners: dict[int, set[int]] = {}
    for _, m in modules:
        for p in m.parameters(recurse=False):
            owners.setdefault(id(p), set()).add(id(m))
    if any(len(o) > 1 for o in owners.values()):
        tags.add("tied")
    return tags


def _export_tags(ep: torch.export.ExportedProgram) -> set[str]:
    """The subset of EXPORT_TAGS visible in the exported program."""
    tags: set[str] = set()
    hop = torch.ops.higher_order.wrap_with_set_grad_enabled
    if any(node.op == "call_function" and node.target is hop for node in ep.graph.nodes):
        tags.add("no_grad")
    if ep.graph_signature.non_persistent_buffers:
        tags.add("non_persistent")
    if ep.graph_signature.lifted_tensor_constants:
        tags.add("constant")
    return tags


def test_names_unique_and_lookup() -> None:
    """Case names are unique and ``by_name`` finds every case."""
    assert len(set(IDS)) == len(IDS)
    for case in ALL:
        assert by_name(case.name) is case
        assert isinstance(case.tags, frozenset)
    with pytest.raises(KeyError):
        by_name("no-such-model")


@pytest.mark.parametrize("case", ALL, ids=IDS)
def test_build_is_deterministic_and_tagged(case: Case) -> None:
    """Two builds give identical eval-mode models whose structure matches the structural tags."""
    a, b = case.build(), case.build()
    assert not any(m.training for m in a.modules()), "build() must return an eval-mode model"
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        torch.testing.assert_close(sa[key], sb[key], rtol=0, atol=0, msg=key)
    assert _module_tags(a) == case.tags & set(MODULE_TAGS)


@pytest.mark.parametrize("case", ALL, ids=IDS)
def test_run_and_export(case: Case) -> None:
    """Eager runs are reproducible; ``torch.export`` (non-strict) succeeds and its module matches eager."""
    model = case.build()
    args, kwargs = case.inputs()
    first = model(*args, **kwargs)
    args2, kwargs2 = case.inputs()  # fresh inputs: checks inputs() is deterministic too
    second = model(*args2, **kwargs2)
    expected = _leaves(first)
    assert expected, "the model returned no tensors"
    torch.testing.assert_close(_leaves(second), expected, rtol=0, atol=0)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # e.g. nn.LSTM's "_flat_weights were assigned during export"
        ep = torch.export.export(model, args, kwargs, strict=False)
    got = ep.module()(*args, **kwargs)
    torch.testing.assert_close(_leaves(got), expected)
    assert _export_tags(ep) == case.tags & set(EXPORT_TAGS)
