"""The storages of a call's tensors as the forward budget reads them for the write checks
(:func:`ir2torch.run_safety.signatures.call_storages`): against the structure of an earlier call in one walk, the same
set ``storages`` gives, and a call of another structure, or with a container where the earlier call had a leaf, is
flattened again (its tensors inside the container counted)."""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from ir2torch.run_safety import forward_budget
from ir2torch.run_safety.op_modes import storages
from ir2torch.run_safety.signatures import call_storages

a, b, c = torch.zeros(2), torch.ones(3), torch.arange(4)


def test_known_structure_read_in_one_walk_gives_storages() -> None:
    tree = ((a, [b, b[1:]]), {"k": c, "n": 3, "none": None})
    spec = pytree.tree_structure(tree)
    found, known = call_storages(tree, spec)
    assert known is spec and found == storages(tree) and len(found) == 3  # b[1:] shares b's storage


def test_a_container_at_a_leaf_or_another_structure_is_flattened_again() -> None:
    first = ((a, b), {})
    spec = pytree.tree_structure(first)
    hidden = ((a, [b, c]), {})  # a list where the first call had a tensor: exact_leaves would give the list
    found, known = call_storages(hidden, spec)
    assert found == storages(hidden) and len(found) == 3 and known == pytree.tree_structure(hidden)
    other = ((a,), {"x": c})
    found, known = call_storages(other, spec)
    assert found == storages(other) and known == pytree.tree_structure(other)
    assert call_storages(first, None) == (storages(first), spec)


def test_the_write_check_reads_the_caller_storages_of_each_call() -> None:
    """A budget's write check sets the caller's storages of each call, its structure remembered for the next."""
    seen: list[set] = []
    budget = forward_budget.ForwardBudget(None, torch.device("cpu"), writes=True)

    def call(obj: object, *args: object) -> None:
        seen.append(set(forward_budget.CALLER.inputs or ()))

    budget._run_writes_checked(None, call, (a, b), {})  # type: ignore[arg-type]
    assert seen[-1] == storages((a, b)) and budget.spec == pytree.tree_structure(((a, b), {}))
    budget._run_writes_checked(None, call, ([a, c], b), {})  # type: ignore[arg-type]
    assert seen[-1] == storages(([a, c], b)) and len(seen[-1]) == 3
    budget._run_writes_checked(None, call, (c, a), {})  # type: ignore[arg-type]
    assert seen[-1] == storages((c, a))
