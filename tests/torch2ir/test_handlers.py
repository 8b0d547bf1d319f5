"""Default leaf handlers (torch2ir) and their builders (ir2torch), checked per class.

Every registered class has a case below built with non-default arguments where it has
any; each case checks that the attributes rebuild the same module, survive the IR value
codec, and give a module with the same state-dict layout and the same eval outputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear

import ir2torch
import torch2ir
from common.ir import Implementation
from common.opaque import OPAQUE_TYPE, OWNED_TYPE
from common.values import decode, encode, values_equal
from tests.torch2ir.more_cases import CASES as MORE_CASES
from torch2ir.hierarchy.modules import CONTAINER_TYPES

Inputs = Callable[[], tuple[Any, ...]]


def randn(*shapes: tuple[int, ...]) -> Inputs:
    """Inputs: one standard-normal tensor per shape."""
    return lambda: tuple(torch.randn(shape) for shape in shapes)


def rand(*shapes: tuple[int, ...]) -> Inputs:
    """Inputs: one uniform [0, 1) tensor per shape (for ops undefined on negatives)."""
    return lambda: tuple(torch.rand(shape) for shape in shapes)


def bag_inputs() -> tuple[torch.Tensor, torch.Tensor]:
    """Indices and offsets (with the trailing offset) for an EmbeddingBag."""
    return torch.randint(0, 10, (8,)), torch.tensor([0, 3, 5, 8])


IMPLICIT_DIM = pytest.mark.filterwarnings("ignore:Implicit dimension choice")
NO_ONEDNN = pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
C1, C2, C3 = (2, 3, 7), (2, 3, 6, 6), (1, 2, 4, 4, 4)

# (module, inputs, marks): every registered class appears at least once.
CASES: list[tuple[nn.Module, Inputs, tuple]] = [
    # linear
    (nn.Linear(4, 3, bias=False), randn((2, 4)), ()),
    (NonDynamicallyQuantizableLinear(4, 3, bias=False), randn((2, 4)), ()),
    (nn.Bilinear(3, 4, 5, bias=False), randn((2, 3), (2, 4)), ()),
    (nn.Identity(), randn((2, 3)), ()),
    (nn.Flatten(2, 3), randn((2, 3, 4, 5)), ()),
    (nn.Unflatten(1, (2, 3)), randn((4, 6)), ()),
    # conv
    (nn.Conv1d(4, 6, 3, padding="same", dilation=2, groups=2, padding_mode="circular"), randn((2, 4, 10)), ()),
    (
        nn.Conv2d(3, 8, (3, 5), stride=2, padding=1, dilation=2, groups=1, bias=False, padding_mode="reflect"),
        randn((2, 3, 16, 16)),
        (),
    ),
    (nn.Conv3d(2, 4, 3, stride=(1, 2, 1), padding="valid", padding_mode="replicate"), randn((1, 2, 6, 6, 6)), ()),
    (nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False), randn((2, 4, 5)), ()),
    (
        nn.ConvTranspose2d(3, 4, (3, 2), stride=(2, 3), padding=(1, 0), output_padding=(1, 2), dilation=(1, 2)),
        randn((1, 3, 5, 5)),
        (),
    ),
    (nn.ConvTranspose3d(2, 2, 2, stride=2, bias=False), randn((1, 2, 3, 3, 3)), ()),
    # norm
    (nn.BatchNorm1d(3, eps=1e-3, momentum=None, affine=False), randn(C1), ()),
    (nn.BatchNorm2d(3, momentum=0.2, bias=False), randn(C2), ()),
    (nn.BatchNorm3d(2, track_running_stats=False), randn(C3), ()),
    (nn.InstanceNorm1d(3, affine=True, track_running_stats=True), randn(C1), ()),
    (nn.InstanceNorm2d(3, eps=1e-3, momentum=0.3, affine=True, bias=False), randn(C2), ()),
    (nn.InstanceNorm3d(2), randn(C3), ()),
    (nn.LayerNorm((3, 7), eps=1e-4, bias=False), randn(C1), ()),
    (nn.LayerNorm(7, elementwise_affine=False), randn(C1), ()),
    (nn.GroupNorm(2, 4, eps=1e-3, affine=False), randn((2, 4, 5)), ()),
    (nn.RMSNorm([3, 7], eps=1e-3), randn(C1), ()),
    (nn.RMSNorm(7, elementwise_affine=False), randn(C1), ()),
    (nn.LocalResponseNorm(3, alpha=1e-3, beta=0.5, k=2.0), randn(C2), ()),
    # embedding
    (
        nn.Embedding(10, 4, padding_idx=-1, max_norm=1.0, norm_type=1.5, scale_grad_by_freq=True, sparse=True),
        lambda: (torch.randint(0, 10, (2, 5)),),
        (),
    ),
    (
        nn.EmbeddingBag(10, 4, max_norm=2.0, norm_type=3.0, mode="max", include_last_offset=True, padding_idx=0),
        bag_inputs,
        (),
    ),
    (
        nn.EmbeddingBag(10, 4, scale_grad_by_freq=True, mode="mean", sparse=True),
        lambda: (torch.randint(0, 10, (2, 4)),),
        (),
    ),
    # activation
    (nn.ReLU(inplace=True), randn(C1), ()),
    (nn.ReLU6(inplace=True), randn(C1), ()),
    (nn.SiLU(inplace=True), randn(C1), ()),
    (nn.Mish(inplace=True), randn(C1), ()),
    (nn.SELU(inplace=True), randn(C1), ()),
    (nn.Hardswish(inplace=True), randn(C1), ()),
    (nn.Hardsigmoid(inplace=True), randn(C1), ()),
    (nn.GELU(approximate="tanh"), randn(C1), ()),
    (nn.Sigmoid(), randn(C1), ()),
    (nn.Tanh(), randn(C1), ()),
    (nn.Softsign(), randn(C1), ()),
    (nn.Tanhshrink(), randn(C1), ()),
    (nn.Softmax2d(), randn(C2), ()),
    (nn.LogSigmoid(), randn(C1), ()),
    (nn.Softmax(dim=1), randn(C1), ()),
    (nn.Softmax(), randn(C1), (IMPLICIT_DIM,)),
    (nn.LogSoftmax(dim=0), randn(C1), ()),
    (nn.Softmin(dim=-1), randn(C1), ()),
    (nn.GLU(dim=1), randn((2, 4, 3)), ()),
    (nn.LeakyReLU(0.2, inplace=True), randn(C1), ()),
    (nn.ELU(alpha=0.5, inplace=True), randn(C1), ()),
    (nn.CELU(alpha=2.0), randn(C1), ()),
    (nn.PReLU(num_parameters=3, init=0.1), randn(C1), ()),
    (nn.Hardtanh(-2.0, 3.0, inplace=True), randn(C1), ()),
    (nn.Hardtanh(-math.inf, 0.5), randn(C1), ()),
    (nn.Softplus(beta=2.0, threshold=10.0), randn(C1), ()),
    (nn.Threshold(0.1, -math.inf, inplace=True), randn(C1), ()),
    (nn.Hardshrink(0.3), randn(C1), ()),
    (nn.Softshrink(0.2), randn(C1), ()),
    (nn.RReLU(0.1, 0.4), randn(C1), ()),
    # dropout
    (nn.Dropout(0.3, inplace=True), randn(C1), ()),
    (nn.Dropout1d(0.2), randn(C1), ()),
    (nn.Dropout2d(0.1, inplace=True), randn(C2), ()),
    (nn.Dropout3d(0.4), randn(C3), ()),
    (nn.AlphaDropout(0.25), randn(C1), ()),
    (nn.FeatureAlphaDropout(0.15), randn(C2), ()),
    # pooling
    (nn.MaxPool1d(3, stride=2, padding=1, dilation=2, return_indices=True, ceil_mode=True), randn((2, 3, 10)), ()),
    (nn.MaxPool2d((2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True), randn(C2), ()),
    (nn.MaxPool3d(2, return_indices=True), randn(C3), ()),
    (nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False), randn((2, 3, 10)), ()),
    (nn.AvgPool2d((3, 2), stride=1, padding=1, divisor_override=3), randn(C2), ()),
    (nn.AvgPool3d(2, stride=1, count_include_pad=False), randn(C3), ()),
    (nn.AdaptiveMaxPool1d(3, return_indices=True), randn((2, 3, 10)), ()),
    (nn.AdaptiveMaxPool2d((2, None)), randn((2, 3, 6, 5)), ()),
    (nn.AdaptiveMaxPool3d((2, 3, None)), randn((1, 2, 4, 6, 5)), ()),
    (nn.AdaptiveAvgPool1d(4), randn((2, 3, 10)), ()),
    (nn.AdaptiveAvgPool2d((None, 3)), randn(C2), ()),
    (nn.AdaptiveAvgPool3d(2), randn(C3), ()),
    (nn.LPPool1d(1.5, 3, stride=2, ceil_mode=True), rand((2, 3, 10)), ()),
    (nn.LPPool2d(2.0, (2, 3)), rand(C2), ()),
    (nn.LPPool3d(3.0, 2, stride=1), rand(C3), ()),
    # shape
    (
        nn.Upsample(scale_factor=(2, 1.5), mode="bilinear", align_corners=True, recompute_scale_factor=True),
        randn((1, 2, 4, 4)),
        (),
    ),
    (nn.Upsample(size=(3, 5), mode="nearest-exact"), randn((1, 2, 4, 4)), ()),
    (nn.UpsamplingNearest2d(scale_factor=2), randn((1, 2, 3, 3)), ()),
    (nn.UpsamplingBilinear2d(size=(5, 7)), randn((1, 2, 3, 3)), ()),
    (nn.PixelShuffle(2), randn((1, 8, 3, 3)), ()),
    (nn.PixelUnshuffle(2), randn((1, 2, 4, 6)), ()),
    (nn.ChannelShuffle(2), randn((1, 4, 3, 3)), ()),
    (nn.ZeroPad1d((1, 2)), randn(C1), ()),
    (nn.ZeroPad2d((1, 0, 2, 3)), randn(C2), ()),
    (nn.ZeroPad3d(1), randn(C3), ()),
    (nn.ConstantPad1d(2, 3.5), randn(C1), ()),
    (nn.ConstantPad2d((1, 2, 0, 1), -1.0), randn(C2), ()),
    (nn.ConstantPad3d(1, math.inf), randn(C3), ()),
    (nn.ReflectionPad1d(2), randn(C1), ()),
    (nn.ReflectionPad2d((1, 2, 2, 1)), randn(C2), ()),
    (nn.ReflectionPad3d(1), randn(C3), ()),
    (nn.ReplicationPad1d((3, 1)), randn(C1), ()),
    (nn.ReplicationPad2d(2), randn(C2), ()),
    (nn.ReplicationPad3d((1, 0, 0, 1, 2, 0)), randn(C3), ()),
    (nn.CircularPad1d(2), randn(C1), ()),
    (nn.CircularPad2d((1, 0, 2, 1)), randn(C2), ()),
    (nn.CircularPad3d(1), randn(C3), ()),
    # recurrent
    (
        nn.LSTM(4, 6, num_layers=2, bias=False, batch_first=True, dropout=0.2, bidirectional=True, proj_size=3),
        randn((2, 5, 4)),
        (NO_ONEDNN,),
    ),
    (nn.GRU(4, 5, num_layers=2, dropout=0.1, bidirectional=True), randn((5, 2, 4)), ()),
    (nn.RNN(4, 5, nonlinearity="relu", bias=False, batch_first=True), randn((2, 5, 4)), ()),
    # attention
    (
        nn.MultiheadAttention(
            8, 2, dropout=0.1, bias=False, add_bias_kv=True, add_zero_attn=True, kdim=6, vdim=5, batch_first=True
        ),
        randn((2, 3, 8), (2, 4, 6), (2, 4, 5)),
        (),
    ),
    (nn.MultiheadAttention(8, 4), randn((3, 2, 8), (4, 2, 8), (4, 2, 8)), ()),
    *MORE_CASES,
]


def _ids() -> list[str]:
    seen: dict[str, int] = {}
    ids = []
    for module, _, _ in CASES:
        name = type(module).__name__
        seen[name] = seen.get(name, 0) + 1
        ids.append(name if seen[name] == 1 else f"{name}-{seen[name]}")
    return ids


PARAMS = [pytest.param(m, inputs, marks=marks, id=i) for (m, inputs, marks), i in zip(CASES, _ids())]


@pytest.fixture(scope="module")
def t2i() -> torch2ir.Torch2Ir:
    return torch2ir.get_default_converter()


@pytest.fixture(scope="module")
def i2t() -> ir2torch.Ir2Torch:
    return ir2torch.get_default_converter()


def public_state(module: nn.Module) -> dict[str, Any]:
    """The module's public plain attributes (catches arguments its ``repr`` does not show)."""
    return {k: v for k, v in vars(module).items() if not k.startswith("_") and k != "training"}


def same_outputs(a: Any, b: Any) -> bool:
    """Exact equality (``torch.equal``) of tensors or nested tuples of tensors."""
    if isinstance(a, (tuple, list)):
        return type(a) is type(b) and len(a) == len(b) and all(same_outputs(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b) and a.dtype == b.dtype
    return a == b


@pytest.mark.parametrize(("module", "inputs"), PARAMS)
def test_attributes_rebuild_the_module(module: nn.Module, inputs: Inputs, t2i: torch2ir.Torch2Ir) -> None:
    attrs = t2i.attributes(module)
    assert not {"device", "dtype"} & attrs.keys()
    rebuilt = type(module)(**attrs)
    assert rebuilt.extra_repr() == module.extra_repr()
    assert repr(rebuilt) == repr(module)


@pytest.mark.parametrize(("module", "inputs"), PARAMS)
def test_attributes_survive_the_codec(module: nn.Module, inputs: Inputs, t2i: torch2ir.Torch2Ir) -> None:
    attrs = t2i.attributes(module)
    assert values_equal(decode(encode(attrs)), attrs)


@pytest.mark.parametrize(("module", "inputs"), PARAMS)
def test_builder_rebuilds_an_equivalent_module(
    module: nn.Module, inputs: Inputs, t2i: torch2ir.Torch2Ir, i2t: ir2torch.Ir2Torch
) -> None:
    ir_type = t2i.type_of(type(module))
    data = decode(encode(t2i.attributes(module)))
    rebuilt = i2t.builders.get(ir_type)(Implementation(name="x", type=ir_type, data=data))
    assert type(rebuilt) is type(module)
    assert rebuilt.extra_repr() == module.extra_repr()
    assert repr(rebuilt) == repr(module)
    assert values_equal(public_state(rebuilt), public_state(module))
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    assert {k: tuple(v.shape) for k, v in rebuilt.state_dict().items()} == expected

    rebuilt.load_state_dict(module.state_dict())
    module.eval()
    rebuilt.eval()
    torch.manual_seed(0)
    args = inputs()
    with torch.no_grad():
        want = module(*(a.clone() for a in args))
        got = rebuilt(*(a.clone() for a in args))
    assert same_outputs(got, want)


def _quantization(cls: type) -> bool:
    """torch.ao's quantization classes: their cases are in tests/quant/test_every_class.py."""
    return cls.__module__.startswith("torch.ao")


def test_every_registered_class_has_a_case(t2i: torch2ir.Torch2Ir) -> None:
    assert {type(m) for m, _, _ in CASES} == {cls for cls in t2i.types() if not _quantization(cls)}


def test_registries_are_symmetric(t2i: torch2ir.Torch2Ir, i2t: ir2torch.Ir2Torch) -> None:
    types = t2i.types()
    assert len(types) >= 60
    assert len(set(types.values())) == len(types), "two classes share an IR type"
    # torch2ir emits the container types itself (never called containers), not through a handler
    containers = set(CONTAINER_TYPES.values())
    assert containers.isdisjoint(types.values())
    named = set(t2i.named_types().values())  # registered by class name (torchao's observers)
    assert named.isdisjoint(types.values())
    # torch2ir emits opaque leaves and the modules an opaque leaf owns itself (opaque=, torch2ir.opaque), not
    # through a handler
    assert {OPAQUE_TYPE, OWNED_TYPE}.isdisjoint(set(types.values()) | named | containers)
    # "module": rebuilt from its graph, registered so that register_override can replace it (ir2torch.handlers.graph)
    built = set(types.values()) | named | containers | {OPAQUE_TYPE, OWNED_TYPE, "module"}
    assert built == set(i2t.builders.keys())


def test_ir_types_are_lowercased_class_names(t2i: torch2ir.Torch2Ir) -> None:
    assert t2i.type_of(nn.Conv2d) == "conv2d"
    assert t2i.type_of(nn.MultiheadAttention) == "multiheadattention"
    assert t2i.type_of(NonDynamicallyQuantizableLinear) == "nondynamicallyquantizablelinear"
    assert all(t == cls.__name__.lower() for cls, t in t2i.types().items() if not _quantization(cls))
    # quantization classes share names with torch.nn's (qat.Linear, fused ConvReLU2d): their types are prefixed
    assert t2i.type_of(torch.ao.nn.qat.Linear) == "qat_linear"
    assert t2i.type_of(torch.ao.nn.intrinsic.ConvReLU2d) == "fused_convrelu2d"


def test_importing_registers_nothing() -> None:
    assert len(torch2ir.Torch2Ir().handlers) == 0
    assert len(ir2torch.Ir2Torch().builders) == 0


def test_lookalike_and_subclasses_are_not_handled(t2i: torch2ir.Torch2Ir) -> None:
    class Linear(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.in_features, self.out_features, self.bias = 2, 3, None

    class MyLinear(nn.Linear):
        pass

    assert not t2i.has_handler(Linear())
    assert not t2i.has_handler(MyLinear(2, 3))
    assert t2i.has_handler(nn.Linear(2, 3))


def test_normalized_arguments_rebuild_the_same_module(t2i: torch2ir.Torch2Ir) -> None:
    """Arguments torch normalizes at construction come back in their normalized form."""
    assert t2i.attributes(nn.Embedding(10, 4, padding_idx=-1))["padding_idx"] == 9
    assert t2i.attributes(nn.MaxPool2d(3))["stride"] == 3
    assert t2i.attributes(nn.MultiheadAttention(8, 2))["kdim"] == 8
    assert t2i.attributes(nn.Upsample(scale_factor=2))["scale_factor"] == 2.0
    assert t2i.attributes(nn.BatchNorm1d(3, affine=False))["bias"] is False
    assert t2i.attributes(nn.PReLU(init=0.1))["init"] == 0.1
    # a torch.Size is stored as a tuple: same module, only its repr differs
    size = t2i.attributes(nn.Unflatten(1, torch.Size([2, 3])))["unflattened_size"]
    assert type(size) is tuple and size == (2, 3)
