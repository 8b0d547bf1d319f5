"""The checks every ecosystem model of this folder goes through."""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch import nn

import ir2torch
import torch2ir
from common.errors import InputMismatchError
from common.ir import IR
from tests.helpers import assert_same_gradients
from torch2ir.train.dropout import TrainModeWarning


def random_running_stats(model: nn.Module) -> None:
    """Give every batch norm of ``model`` running statistics other than its initial ones (mean in [-1, 1], variance
    in [0.5, 2]), so that eval mode does not normalize by the identity."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)


def assert_exact(got: Any, expected: Any) -> None:
    """Same pytree structure, and every tensor leaf bit-for-bit equal to eager's (shape and dtype included)."""
    got_leaves, got_spec = pytree.tree_flatten(got)
    leaves, spec = pytree.tree_flatten(expected)
    assert got_spec == spec, (got_spec, spec)
    for a, b in zip(got_leaves, leaves, strict=True):
        if isinstance(b, torch.Tensor):
            assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
            assert torch.equal(a, b), f"max abs diff {(a.double() - b.double()).abs().max().item()}"
        else:
            assert a == b


def round_trip(model: nn.Module, args: tuple, kwargs: dict | None = None, *,
               gradients: bool = True) -> tuple[IR, nn.Module]:
    """Convert the eval-mode ``model``, rebuild it from its own state dict, and check: outputs exact, also after a
    JSON save and load of the IR; and (``gradients``) after one backward pass, every parameter's gradient exact."""
    kwargs = kwargs or {}
    model.eval()
    with torch.no_grad():
        expected = model(*args, **kwargs)
    ir = torch2ir.convert(model, args, kwargs)
    rebuilt = ir2torch.convert(ir, model.state_dict())
    with torch.no_grad():
        got = rebuilt(*args, **kwargs)
    assert_exact(got, expected)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.ir.json")
        ir.save(path)
        loaded = IR.load(path)
    assert loaded == ir
    with torch.no_grad():
        assert_exact(ir2torch.convert(loaded, model.state_dict())(*args, **kwargs), expected)
    if gradients:
        assert_same_gradients(model, rebuilt, args, kwargs)
    return ir, rebuilt


def assert_fixpoint(ir: IR, rebuilt: nn.Module, args: tuple, kwargs: dict | None = None) -> None:
    """Converting the rebuilt model gives back the IR it was rebuilt from (see tests/loop/test_fixpoint.py)."""
    again = torch2ir.convert(rebuilt, args, kwargs or {})
    assert again == ir, sorted(k for k in set(ir) | set(again) if k not in ir or k not in again or ir[k] != again[k])


def assert_guarded(rebuilt: nn.Module, args: tuple, kwargs: dict | None = None) -> None:
    """A first argument of twice the converted batch is refused by the root's input guard, not run."""
    x, *rest = args
    try:
        rebuilt(torch.cat([x, x]), *rest, **(kwargs or {}))
    except InputMismatchError as error:
        assert "shape" in str(error), error
    else:
        raise AssertionError("a batch of 2 was run by a model converted at batch 1")


def train_round_trip(model: nn.Module, args: tuple, kwargs: dict | None = None) -> list[str]:
    """Convert ``model`` in train mode; unless the conversion warns (``TrainModeWarning``: the rebuild's train mode
    is said to differ), check one seeded train-mode forward pass of the rebuild against the original's: outputs
    exact, and every buffer updated alike (batch-norm running statistics, counters). Returns the warnings'
    messages (empty: checked exact), so that a test can say which models warn and why."""
    kwargs = kwargs or {}
    model.train()
    original, state = copy.deepcopy(model), copy.deepcopy(model.state_dict())  # before anything runs it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ir = torch2ir.convert(model, args, kwargs)
    messages = [str(w.message) for w in caught if issubclass(w.category, TrainModeWarning)]
    if messages:
        return messages
    rebuilt = ir2torch.convert(ir, state).train()
    outputs = []
    for module in (original, rebuilt):
        torch.manual_seed(0)
        with torch.no_grad():
            outputs.append(module(*args, **kwargs))
    assert_exact(outputs[1], outputs[0])
    expected, got = original.state_dict(), rebuilt.state_dict()
    assert sorted(got) == sorted(expected)
    changed = [k for k, v in expected.items() if not torch.equal(v, got[k])]
    assert not changed, f"after one train-mode step the state differs at {changed}"
    return []


def assert_lowered(ir: IR, model: nn.Module, args: tuple, kwargs: dict | None = None) -> None:
    """The flat ATen IR lowered from the conversion's capture (``ir.lower()``, see tests/real/test_lower_corpus.py)
    runs exactly like the model (eval mode), and every op links to the module-level node it came from."""
    kwargs = kwargs or {}
    flat = ir.lower()
    with torch.no_grad():
        assert_exact(ir2torch.convert(flat, model)(*args, **kwargs), model(*args, **kwargs))
    assert not [n.name for n in flat.nodes if n.source is None]


def assert_swappable(ir: IR, model: nn.Module, rebuilt: nn.Module, args: tuple, kwargs: dict | None = None) -> int:
    """Every module rebuilt from a graph can be swapped for (a copy of) the original one, outputs staying exact
    (see tests/real/test_swaps.py); returns how many were swapped. ``model`` is the eval-mode original as built,
    not run yet (a forward pass can leave tensors on it that cannot be copied: EfficientFormer's attention-bias
    cache, made while gradients were recorded)."""
    kwargs = kwargs or {}
    with torch.no_grad():
        expected = model(*args, **kwargs)
    paths = [k for k, impl in ir.items() if k != "root" and impl.type == "module" and impl.graph.number_of_nodes()]
    for path in paths:
        assert "in_spec" in ir[path].meta, f"{path} keeps data-flow arguments: it cannot be swapped"
        parent, _, name = path.rpartition(".")
        holder = rebuilt.get_submodule(parent)
        old = holder._modules[name]
        holder._modules[name] = copy.deepcopy(model.get_submodule(path))
        try:
            with torch.no_grad():
                assert_exact(rebuilt(*args, **kwargs), expected)
        finally:
            holder._modules[name] = old
    return len(paths)


def assert_train_exact(model: nn.Module, args: tuple, kwargs: dict | None = None) -> None:
    """In train mode, seeded, the rebuild's outputs and updated buffers equal eager's (batch-norm running
    statistics), through a JSON round trip, and the conversion raises no TrainModeWarning (as
    tests/real/test_corpus.py's train-mode test)."""
    import warnings

    from common.testing.roundtrip import assert_roundtrip
    from torch2ir.train.dropout import TrainModeWarning

    with warnings.catch_warnings():
        warnings.simplefilter("error", TrainModeWarning)
        _, rebuilt, report = assert_roundtrip(model.train(), args, kwargs or {}, atol=0, rtol=0)
    assert report.max_abs_diff == 0, report
    assert rebuilt.training
    model.eval()


def assert_lowered_exact(model: nn.Module, ir: IR, args: tuple, kwargs: dict | None = None) -> None:
    """The FlatIR lowered from the conversion's capture (``ir.lower()``) runs exactly like the eval-mode model
    (as tests/real/test_lower_corpus.py); a capture that ran no export (quantization stubs traced as stand-ins)
    refuses by name, and the model lowered directly (``torch2ir.lower``) runs exactly instead."""
    from common.errors import ConversionError

    kwargs = kwargs or {}
    if ir.capture.refused is not None:
        try:
            ir.lower()
        except ConversionError as error:
            assert "cannot be lowered" in str(error), error
        else:
            raise AssertionError("a capture without an export was lowered")
        flat = torch2ir.lower(model.eval(), args, kwargs)
    else:
        flat = ir.lower()
    module = ir2torch.get_default_converter().convert(flat, model)
    with torch.no_grad():
        assert_exact(module(*args, **kwargs), model.eval()(*args, **kwargs))


def assert_every_module_swaps(model: nn.Module, ir: IR, rebuilt: nn.Module, args: tuple,
                              kwargs: dict | None = None) -> int:
    """Every module of ``rebuilt`` built from a graph can be replaced by a deep copy of the original's module of
    the same path and the outputs stay exact (as tests/real/test_swaps.py); returns how many were swapped."""
    return assert_swappable(ir, model.eval(), rebuilt, args, kwargs)


def randomize_batch_norm(model: nn.Module) -> None:
    """Running statistics other than 0 and 1, so that a batch norm read from the wrong input shows."""
    for module in model.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.running_mean.uniform_(-1, 1)
            module.running_var.uniform_(0.5, 2)


def assert_every_check(model: nn.Module, ir: IR, rebuilt: nn.Module, args: tuple, *,
                       train_args: tuple | None = None) -> None:
    """Beyond :func:`round_trip`: the input guard, every graph module swapped for the original's, the lowered FlatIR
    exact and train mode exact (on ``train_args``, default ``args``)."""
    assert_guarded(rebuilt, args)
    assert assert_every_module_swaps(model, ir, rebuilt, args) > 0
    assert_lowered_exact(model, ir, args)
    assert_train_exact(model, train_args or args)
