"""Names generated code uses come from one registry (``common.names``) the checks read (issue 28, point 6a).

A module's forward arguments (``meta.forward_arg_names``, ``meta.parameters``) go into the ``def`` line of the
code ir2torch generates. A name that generated code spells as it is (``torch``, ``inf``, ``self`` ...) is refused
on load; a name of one of ir2torch's own globals or checks (``_ir_call_module``, ``ir2torch_check_same_inputs``
...) is accepted, and the global takes another name: the rebuilt model computes what the original does and its
checks still run. Attributes ir2torch keeps on rebuilt modules cannot be state or module names.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.fx.graph import _custom_builtins

import ir2torch
import torch2ir
from common import IR
from common.errors import InputMismatchError, UnsafeNameError
from common.names import (
    ARGUMENT_RESERVED_NAMES,
    CODEGEN_NAMES,
    GENERATED_ATTRS,
    GENERATED_CALL_MODULE,
    GENERATED_CALLS,
    generated_names,
)

NAMES = generated_names(2)


class Inner(nn.Module):
    def forward(self, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14):
        return a0 * 2 + a1 + a2 * a3 + a4 - a5 + a6 + a7 + a8 + a9 + a10 + a11 - a12 * a13 + a14


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, same, y):
        h = self.lin(x)
        return self.inner(h, h, *[y + i for i in range(13)]) + same


@cache
def _saved(folder: str) -> tuple[dict[str, Any], Outer]:
    torch.manual_seed(0)
    model = Outer().eval()
    x = torch.randn(2, 4)
    path = torch2ir.convert(model, (x, x, torch.randn(2, 4))).save(Path(folder) / "m.json")
    assert not json.loads(path.read_text()).get("tensors")
    return json.loads(path.read_text()), model


@pytest.fixture
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Outer]:
    doc, model = _saved(str(tmp_path_factory.getbasetemp()))
    return json.loads(json.dumps(doc)), model


def _rename(meta: dict[str, Any], names: list[str]) -> None:
    meta["forward_arg_names"] = list(names)
    if "parameters" in meta:
        meta["parameters"] = [[n, *rest] for n, (_, *rest) in zip(names, meta["parameters"])]


def _load(doc: dict[str, Any], tmp_path: Path) -> IR:
    path = tmp_path / "crafted.json"
    path.write_text(json.dumps(doc))
    return IR.load(path)


def test_the_registry_covers_fx_builtins_and_ir2torch_checks() -> None:
    assert set(_custom_builtins) <= CODEGEN_NAMES and "self" in CODEGEN_NAMES
    assert {f"{GENERATED_CALL_MODULE}_{n}" for n in GENERATED_CALLS.values()} <= set(NAMES)
    assert not CODEGEN_NAMES & set(NAMES)
    from ir2torch.codegen.fold_cache import FOLD_ATTR, VALUES_ATTR
    from ir2torch.codegen.module_call import VARIANT_ATTR
    from ir2torch.run_safety.forward_budget import BUDGET_ATTR

    assert {FOLD_ATTR, VALUES_ATTR, VARIANT_ATTR, BUDGET_ATTR} == set(GENERATED_ATTRS.values())


def test_arguments_named_like_every_generated_global_rebuild_and_keep_their_checks(saved, tmp_path) -> None:
    """``ir2torch_check_same_inputs`` and every other name ir2torch's generated code takes for a global, as the
    forward arguments of a module that checks same inputs and of the guarded root: same results, checks run."""
    doc, model = saved
    inner = doc["implementations"]["inner"]["meta"]
    assert len(inner["forward_arg_names"]) == len(NAMES) == 15
    _rename(inner, NAMES)
    root_names = [f"{GENERATED_CALL_MODULE}_{GENERATED_CALLS['same_inputs']}",
                  f"{GENERATED_CALL_MODULE}_{GENERATED_CALLS['input_guard']}", NAMES[0]]
    _rename(doc["implementations"]["root"]["meta"], root_names)
    rebuilt = ir2torch.convert(_load(doc, tmp_path), model.state_dict())
    assert all(f"def forward(self, {', '.join(names)}" in code
               for names, code in ((NAMES, rebuilt.inner.code), (root_names, rebuilt.code)))
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    with torch.no_grad():
        assert torch.equal(rebuilt(x, x, y), model(x, x, y))
        with pytest.raises(InputMismatchError, match="different objects"):
            rebuilt(x, x.clone(), y)  # the root's same-inputs check ran, not the argument
        with pytest.raises(InputMismatchError, match="different objects"):
            rebuilt.inner(x, x.clone(), *[y] * 13)
        with pytest.raises(InputMismatchError):
            rebuilt(x, x, torch.randn(3, 5))  # the root's input guard ran


@pytest.mark.parametrize("name", sorted(ARGUMENT_RESERVED_NAMES))
@pytest.mark.parametrize("field", ["forward_arg_names", "parameters"])
def test_names_generated_code_spells_as_they_are_are_refused(saved, tmp_path, name, field) -> None:
    doc, _ = saved
    meta = doc["implementations"]["inner"]["meta"]
    if field == "parameters":
        meta["parameters"][1][0] = name
    else:
        _rename(meta, [name, *meta["forward_arg_names"][1:]])
    with pytest.raises(UnsafeNameError, match="not a plain Python identifier|shadow a name the generated code uses") \
            as info:
        _load(doc, tmp_path)
    assert info.value.implementation == "inner" and f"meta.{field}" in str(info.value.key)


@pytest.mark.parametrize("name", sorted(GENERATED_ATTRS.values()))
def test_state_named_like_an_attribute_ir2torch_keeps_is_refused(saved, tmp_path, name) -> None:
    doc, _ = saved
    state = doc["implementations"]["lin"]["state"]
    state[name] = state.pop("bias")
    with pytest.raises(UnsafeNameError, match="hidden by an attribute ir2torch keeps") as info:
        _load(doc, tmp_path)
    assert info.value.key == "state name" and info.value.implementation == "lin"
