"""Leaves rebuilt on ``meta`` as copies of the first one built for the same ``torch.nn`` class and arguments
(``ir2torch.rebuild.leaf_copies``): each copy is the module the constructor makes under ``torch.device("meta")``, shares
nothing, and only default builders of torch's own classes with plain arguments are copied."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common.ir import IR, Implementation
from ir2torch.handlers._base import constructor
from ir2torch.rebuild.leaf_copies import LeafCopies, copy_module, copyable

_CASES = {
    "linear": (nn.Linear, {"in_features": 5, "out_features": 3}),
    "linear_no_bias": (nn.Linear, {"in_features": 5, "out_features": 3, "bias": False}),
    "conv": (nn.Conv2d, {"in_channels": 3, "out_channels": 4, "kernel_size": (3, 1), "padding": "same"}),
    "batch_norm": (nn.BatchNorm2d, {"num_features": 6}),
    "layer_norm": (nn.LayerNorm, {"normalized_shape": (6,)}),
    "embedding": (nn.Embedding, {"num_embeddings": 11, "embedding_dim": 4, "padding_idx": 2}),
    "attention": (nn.MultiheadAttention, {"embed_dim": 8, "num_heads": 2, "kdim": 4, "vdim": 4}),  # None parameters
    "sequential_of_norms": (nn.Transformer, {"d_model": 8, "nhead": 2, "num_encoder_layers": 0,
                                             "num_decoder_layers": 0, "dim_feedforward": 16}),  # children only
    "prelu": (nn.PReLU, {"num_parameters": 3}),
    "relu": (nn.ReLU, {}),
}


def _describe(module: nn.Module) -> list:
    """Everything of ``module``'s structure a copy must reproduce, recursively (not identities)."""
    out = [type(module)]
    for name, value in module.__dict__.items():
        if name in ("_parameters", "_buffers"):
            out.append((name, type(value), [(k, None if t is None else (
                type(t), t.shape, t.stride(), t.dtype, t.device, t.requires_grad, t._version, t.storage_offset()))
                for k, t in value.items()]))
        elif name == "_modules":
            out.append((name, type(value), [(k, _describe(m)) for k, m in value.items()]))
        else:
            out.append((name, type(value), _value(value)))
    return out


def _value(value):
    if isinstance(value, torch.Tensor):
        return type(value), value.shape, value.dtype, value.device
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    return value


def _objects(module: nn.Module) -> set[int]:
    """Ids of the tensors and mutable containers ``module`` holds, its children's included."""
    ids = set()
    for m in module.modules():
        ids.update(id(v) for v in m.__dict__.values() if isinstance(v, (dict, list, set)))
        ids.update(id(t) for t in [*m._parameters.values(), *m._buffers.values()] if t is not None)
    return ids


def _ir(cls: type, args: dict, count: int) -> IR:
    ir = IR()
    ir.add(Implementation("root", "module", {}))
    with torch.device("meta"):
        state = {name: {"kind": "parameter", "shape": list(t.shape), "dtype": t.dtype}
                 for name, t in cls(**args).named_parameters(recurse=False)}
    for i in range(count):
        ir.add(Implementation(f"m{i}", "test_leaf", dict(args), state=dict(state)))
    return ir


@pytest.mark.parametrize("case", sorted(_CASES))
def test_a_copy_is_what_the_constructor_makes_on_meta(case):
    cls, args = _CASES[case]
    with torch.device("meta"):
        expected = cls(**args)
        first = cls(**args)
    assert copyable(first)
    copied = copy_module(first)
    assert _describe(copied) == _describe(expected)
    assert repr(copied) == repr(expected)
    assert _objects(copied).isdisjoint(_objects(first))


#: torch classes whose modules hold more than plain values and tables: built by their constructor every time.
_NOT_COPIED = {
    "encoder_layer": (nn.TransformerEncoderLayer, {"d_model": 8, "nhead": 2, "dim_feedforward": 16}),  # a function
    "lstm": (nn.LSTM, {"input_size": 4, "hidden_size": 3}),  # its parameters in a list too
}


@pytest.mark.parametrize("case", sorted(_NOT_COPIED))
def test_modules_holding_more_are_not_copyable(case):
    cls, args = _NOT_COPIED[case]
    with torch.device("meta"):
        assert not copyable(cls(**args))


def _converter(builder) -> ir2torch.converter.Ir2Torch:
    converter = ir2torch.converter.get_default_converter()
    converter.register("test_leaf", builder)
    return converter


def _copied(converter, ir: IR, device: str = "meta") -> tuple[nn.Module, list[bool]]:
    """The rebuild of ``ir`` and, for each leaf built, whether it was a copy."""
    real, made = LeafCopies.copy, []

    def spy(self, builder, impl):
        out = real(self, builder, impl)
        made.append(out is not None)
        return out

    with mock.patch.object(LeafCopies, "copy", spy):
        return converter.convert(ir, device=device), made


@pytest.mark.parametrize("case", ["linear", "attention", "batch_norm", "sequential_of_norms", "lstm"])
def test_a_meta_rebuild_copies_alike_leaves_and_each_is_the_constructors(case):
    cls, args = {**_CASES, **_NOT_COPIED}[case]
    model, made = _copied(_converter(constructor(cls)), _ir(cls, args, 4))
    assert made == ([False] * 4 if case in _NOT_COPIED else [False, True, True, True])
    if case in _NOT_COPIED:
        return  # built by the constructor each time, as without copies
    with torch.device("meta"):
        expected = _describe(cls(**args).eval())
    children = [model.get_submodule(f"m{i}") for i in range(4)]
    assert all(_describe(child) == expected for child in children)
    for a in range(4):
        for b in range(a + 1, 4):
            assert _objects(children[a]).isdisjoint(_objects(children[b]))


def test_changing_the_first_module_changes_no_copy():
    ir = _ir(nn.Linear, {"in_features": 4, "out_features": 2}, 3)
    ir["m0"].state["weight"]["requires_grad"] = False  # the rebuild freezes the first one after building it
    model = _converter(constructor(nn.Linear)).convert(ir, device="meta")
    assert [model.get_submodule(f"m{i}").weight.requires_grad for i in range(3)] == [False, True, True]


class _Mine(nn.Linear):
    pass


@pytest.mark.parametrize("kind", ["override", "class_outside_torch", "argument_not_an_atom", "not_on_meta"])
def test_what_is_built_by_its_builder_every_time(kind):
    cls, args, device = nn.Linear, {"in_features": 4, "out_features": 2}, "meta"
    calls = []

    def counting(impl):
        calls.append(impl.name)
        return builder(impl)

    builder = constructor(cls)
    if kind == "override":
        counting.module_class = nn.Linear  # a user's builder is never copied, whatever it says it builds
    elif kind == "class_outside_torch":
        builder = constructor(_Mine)
        counting.module_class = _Mine
    elif kind == "argument_not_an_atom":
        cls, args = nn.LayerNorm, {"normalized_shape": [6]}
        builder = constructor(cls)
        counting.module_class = cls
    else:
        device = "cpu"
        counting.module_class = nn.Linear
    converter = _converter(counting)
    if kind == "override":
        converter.register_override("test_leaf", lambda impl: counting(impl))
    converter.convert(_ir(cls, args, 3), device=device, max_bytes=None)  # no budget: it measures on meta
    assert calls == ["m0", "m1", "m2"]


def test_a_rebuilt_model_of_alike_leaves_is_exact_once_its_weights_are_loaded():
    torch.manual_seed(0)
    model = nn.Sequential(*[nn.Sequential(nn.Linear(6, 6), nn.LayerNorm(6), nn.GELU()) for _ in range(5)]).eval()
    x = torch.randn(3, 6)
    ir = torch2ir.convert(model, (x,))
    rebuilt, made = _copied(ir2torch.converter.get_default_converter(), ir)
    # the root Sequential, then the five inner ones, Linear, LayerNorm and GELU: each class built once, then copied
    assert made == [False, True, False, False, False] + [True] * 16
    rebuilt.load_state_dict(model.state_dict(), assign=True)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)
