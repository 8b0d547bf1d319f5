"""``assert_roundtrip``: the whole promise of the library as one assertion for users' tests."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from common.ir import IR
from common.serialize import load_ir
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
    seed: int = 0,
    same_classes: bool = True,
) -> tuple[IR, nn.Module, VerifyReport]:
    """Convert -> JSON save/load -> rebuild -> load state -> verify, and check paths, keys and classes.

    The model is run as it is. In train mode both forward passes start from ``seed`` (dropout draws the same
    numbers), and afterwards the state of both models must still be equal (batch-norm running statistics
    updated alike); the original's buffers are updated by that step, as any forward pass would. Outputs may be
    any pytree :func:`common.verify.verify` compares (types registered without ``flatten_with_keys_fn`` too);
    converting a model whose output is a custom type needs that type registered with a ``serialized_type_name``.

    Args:
        model: the original model (its parameters are left untouched).
        args, kwargs: example inputs.
        converter: a ``torch2ir`` converter (default: ``torch2ir.get_default_converter()``).
        rebuilder: an ``ir2torch`` converter (default: ``ir2torch.get_default_converter()``).
        atol, rtol: tolerances of the output comparison (see :func:`common.verify.verify`).
        seed: random seed of both forward passes.
        same_classes: require every module whose class has a ``converter`` handler to be rebuilt as that
            very class (pass ``False`` when ``rebuilder`` overrides builders with your own layers).

    Returns:
        ``(ir, rebuilt, report)`` for further checks.

    Raises:
        AssertionError: outputs differ beyond tolerance (the message is the verify table), or module paths,
            state-dict keys, train-mode state or classes differ.
    """
    if converter is None:
        import torch2ir

        converter = torch2ir.get_default_converter()
    if rebuilder is None:
        import ir2torch

        rebuilder = ir2torch.get_default_converter()
    kwargs = dict(kwargs or {})
    ir = converter.convert(model, args, kwargs)
    with tempfile.TemporaryDirectory() as tmp:  # loaded with the rebuilder's allow-list (its opted-in operators)
        loaded = load_ir(ir.save(Path(tmp) / "model.ir.json"), allowlist=rebuilder.allowlist)
    assert loaded == ir, "the IR changed through JSON save/load"
    rebuilt = rebuilder.convert(loaded, model.state_dict())
    report = verify(model, rebuilt, args, kwargs, atol=atol, rtol=rtol, seed=seed)
    assert report.ok, f"rebuilt outputs differ from the original's:\n{report}"
    paths = [p for p, _ in model.named_modules(remove_duplicate=False)]
    new_paths = [p for p, _ in rebuilt.named_modules(remove_duplicate=False)]
    assert new_paths == paths, f"module paths differ: {sorted(set(paths) ^ set(new_paths))}"
    state, new_state = model.state_dict(), rebuilt.state_dict()
    assert list(new_state) == list(state), f"state-dict keys differ: {sorted(set(state) ^ set(new_state))}"
    if model.training:
        changed = [k for k, v in state.items() if not torch.equal(v, new_state[k])]
        assert not changed, f"after one train-mode step the state differs at {changed}"
    if same_classes:
        new_modules = dict(rebuilt.named_modules(remove_duplicate=False))
        wrong = [f"{p}: {type(m).__name__} -> {type(new_modules[p]).__name__}"
                 for p, m in model.named_modules(remove_duplicate=False)
                 if converter.has_handler(m) and type(new_modules[p]) is not type(m)]
        assert not wrong, f"handled modules not rebuilt as their own class: {wrong}"
    return ir, rebuilt, report
