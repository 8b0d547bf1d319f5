"""The arguments an operator writes (:func:`ir2torch.run_safety.writes.written`), read from its schema once per
overload: the same ``(name, tensor)`` pairs as reading the schema at each call, for in-place, ``out=`` and list
arguments, given by position or by keyword; anything that is not an overload is read at each call."""

from __future__ import annotations

from typing import Any

import torch

from ir2torch.codegen.direct_op import direct_op
from ir2torch.run_safety.writes import written

aten = torch.ops.aten
a, b, c = torch.zeros(3), torch.ones(3), torch.arange(3.0)


def _from_schema(func: Any, args: tuple, kwargs: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    out = []
    for index, argument in enumerate(func._schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = kwargs.get(argument.name) if argument.kwarg_only or index >= len(args) else args[index]
        out.extend((argument.name, t) for t in (value if isinstance(value, (list, tuple)) else (value,))
                   if isinstance(t, torch.Tensor))
    return out


def test_written_arguments_as_the_schema_gives_them() -> None:
    cases = [(aten.add_.Tensor, (a, b), {}), (aten.add.out, (a, b), {"out": c}), (aten.div_.Tensor, (a,), {"other": b}),
             (aten.index_put_.default, (a, [torch.tensor([1])], b[:1]), {}), (aten.add.Tensor, (a, b), {}),
             (aten._foreach_add_.Scalar, ([a, b], 1.0), {}), (aten.sort.values, (a,), {"values": b, "indices": c})]
    for _ in range(2):  # read, then remembered
        for func, args, kwargs in cases:
            got = list(written(func, args, kwargs))
            expected = _from_schema(func, args, kwargs)
            assert [(n, id(t)) for n, t in got] == [(n, id(t)) for n, t in expected], func
    assert [n for n, _ in written(aten._foreach_add_.Scalar, ([a, b], 1.0), {})] == ["self", "self"]
    op = direct_op(aten.add_.Tensor)  # compares equal to the overload, has no schema of its own
    list(written(aten.add_.Tensor, (a, b), {}))
    assert op == aten.add_.Tensor and list(written(op, (a, b), {})) == []
