"""``assert_roundtrip``: the whole promise of the library as one assertion for users' tests."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

from common.ir import IR
from common.verify import VerifyReport, verify


def assert_roundtrip(
    model: nn.Module,
    args: tuple,
    kwargs: Mapping[str, Any] | None = None,
    *,
    converter: Any = None,
    rebuilder: Any = None,
    atol: float = 1e-5,
    rtol: float = 1e-5,
) -> tuple[IR, nn.Module, VerifyReport]:
    """Convert -> JSON save/load -> rebuild -> load state -> verify, and check paths and keys.

    Args:
        model: the original model (left untouched).
        args, kwargs: example inputs.
        converter: a ``torch2ir`` converter (default: ``torch2ir.get_default_converter()``).
        rebuilder: an ``ir2torch`` converter (default: ``ir2torch.get_default_converter()``).

    Returns:
        ``(ir, rebuilt, report)`` for further checks.

    Raises:
        AssertionError: outputs differ beyond tolerance (the message is the verify table),
            or module paths / state-dict keys differ.
    """
    if converter is None:
        import torch2ir

        converter = torch2ir.get_default_converter()
    if rebuilder is None:
        import ir2torch

        rebuilder = ir2torch.get_default_converter()
    kwargs = dict(kwargs or {})
    ir = converter.convert(model, args, kwargs)
    with tempfile.TemporaryDirectory() as tmp:
        loaded = IR.load(ir.save(Path(tmp) / "model.ir.json"))
    assert loaded == ir, "the IR changed through JSON save/load"
    rebuilt = rebuilder.convert(loaded, model.state_dict())
    report = verify(model, rebuilt, args, kwargs, atol=atol, rtol=rtol)
    assert report.ok, f"rebuilt outputs differ from the original's:\n{report}"
    paths = [p for p, _ in model.named_modules(remove_duplicate=False)]
    new_paths = [p for p, _ in rebuilt.named_modules(remove_duplicate=False)]
    assert new_paths == paths, f"module paths differ: {sorted(set(paths) ^ set(new_paths))}"
    keys, new_keys = list(model.state_dict()), list(rebuilt.state_dict())
    assert new_keys == keys, f"state-dict keys differ: {sorted(set(keys) ^ set(new_keys))}"
    return ir, rebuilt, report
