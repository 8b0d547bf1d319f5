"""Hypothesis strategies that *construct* random valid models and their example inputs.

Every drawn model is valid by construction: each step is chosen among the layers that fit the shape of
its input, so nothing is filtered away. The models cover chains and DAGs of typed layers (linear, conv,
norms, pools, activations, dropout, attention, RNNs, embeddings), nested blocks with residual connections,
a module called twice, ``Sequential(lin, lin)`` aliases, tied weights, several inputs (a keyword-only one
among them) and outputs (tensor, tuple or dict), buffers (persistent or not) and parameters read directly
in ``forward``.

Use them in your own test suite::

    from hypothesis import given
    from common.testing import assert_roundtrip, models_and_inputs

    @given(models_and_inputs())
    def test_my_pipeline(case):
        model, args, kwargs = case
        assert_roundtrip(model, args, kwargs, rebuilder=my_rebuilder, same_classes=False)

Shrinking removes steps and simplifies layers, so a failure is reported as a short program
(``repr(model)``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import strategies as st
from torch import nn

from .programs import VOCAB, Program, RandomBlock, RandomModel, Step, Value

BATCH = 2
FEATURES = (4, 8, 12)
KINDS = ("flat", "seq", "img", "tokens")
OUTPUT_FORMATS = ("tensor", "tuple", "dict")

_ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "gelu_tanh": lambda: nn.GELU(approximate="tanh"),
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "silu": nn.SiLU,
    "leaky_relu": lambda: nn.LeakyReLU(0.1),
    "elu": nn.ELU,
    "hardswish": nn.Hardswish,
    "softplus": nn.Softplus,
    "mish": nn.Mish,
    "softmax": lambda: nn.Softmax(dim=-1),
}
Factory = Callable[[], nn.Module]


class _Scope:
    """What one :class:`Program` (the model or a nested block) is being drawn into."""

    def __init__(self, draw: st.DrawFn, types: list[Value]) -> None:
        self.draw = draw
        self.types = list(types)
        self.steps: list[Step] = []
        self.factories: dict[str, Factory] = {}
        self.calls: dict[str, tuple[Value, Value, str]] = {}  # name -> (input, output, op)
        self.linears: dict[str, tuple[int, int]] = {}  # Linear name -> (in, out)
        self.params: dict[str, tuple[int, ...]] = {}
        self.buffers: dict[str, tuple[tuple[int, ...], bool]] = {}
        self.ties: list[tuple[str, str]] = []  # (module whose weight is replaced, module it is tied to)
        self._counts: Counter[str] = Counter()

    def name(self, prefix: str) -> str:
        n = f"{prefix}{self._counts[prefix]}"
        self._counts[prefix] += 1
        return n

    def add(self, op: str, inputs: list[int], out: Value, target: str = "") -> int:
        self.steps.append(Step(op, tuple(inputs), target))
        self.types.append(out)
        return len(self.types) - 1

    def call(self, prefix: str, factory: Factory, i: int, out: Value, op: str = "call") -> int:
        name = self.name(prefix)
        self.factories[name] = factory
        self.calls[name] = (self.types[i], out, op)
        return self.add(op, [i], out, name)

    def populate(self, program: Program) -> Program:
        """Create the drawn modules, parameters and buffers on ``program`` (under the caller's seed)."""
        for name, factory in self.factories.items():
            program.add_module(name, factory())
        for name, shape in self.params.items():
            program.register_parameter(name, nn.Parameter(torch.randn(shape)))
        for name, (shape, persistent) in self.buffers.items():
            program.register_buffer(name, torch.randn(shape), persistent=persistent)
        for dst, src in self.ties:
            program.get_submodule(dst).weight = program.get_submodule(src).weight
        return program


def _with_features(v: Value, n: int) -> Value:
    shape = (v.shape[0], n, *v.shape[2:]) if v.kind == "img" else (*v.shape[:-1], n)
    return Value(v.kind, shape)


def _draw_input(draw: st.DrawFn, kind: str) -> Value:
    if kind == "flat":
        return Value("flat", (BATCH, draw(st.sampled_from(FEATURES))))
    if kind == "seq":
        return Value("seq", (BATCH, draw(st.sampled_from((3, 5))), draw(st.sampled_from(FEATURES))))
    if kind == "img":
        size = draw(st.sampled_from((4, 8)))
        return Value("img", (BATCH, draw(st.sampled_from((1, 3))), size, size))
    return Value("tokens", (BATCH, draw(st.sampled_from((3, 5)))))


def _leaf(scope: _Scope, i: int) -> int:
    """One typed layer applied to value ``i``; returns the new value's index."""
    draw, v = scope.draw, scope.types[i]
    if v.kind == "tokens":
        n = draw(st.sampled_from(FEATURES))
        return scope.call("embedding", lambda: nn.Embedding(VOCAB, n), i, Value("seq", (*v.shape, n)))
    if v.kind == "img":
        return _image_leaf(scope, i)
    f = v.features
    choices = ["linear", "act", "norm", "dropout", "identity"] + (["attention", "rnn"] * 2 if v.kind == "seq" else [])
    kind = draw(st.sampled_from(choices))
    if kind == "linear":
        return _linear(scope, i)
    if kind == "act":
        act = draw(st.sampled_from(sorted(_ACTIVATIONS)))
        return scope.call(act, _ACTIVATIONS[act], i, v)
    if kind == "norm":
        if draw(st.booleans()):
            affine = draw(st.booleans())
            return scope.call("layernorm", lambda: nn.LayerNorm(f, elementwise_affine=affine), i, v)
        return scope.call("rmsnorm", lambda: nn.RMSNorm(f), i, v)
    if kind == "dropout":
        p = draw(st.sampled_from((0.1, 0.5, 0.0)))
        return scope.call("dropout", lambda: nn.Dropout(p), i, v)
    if kind == "identity":
        return scope.call("identity", nn.Identity, i, v)
    if kind == "attention":
        heads = draw(st.sampled_from([h for h in (1, 2, 4) if f % h == 0]))
        bias = draw(st.booleans())
        factory = lambda: nn.MultiheadAttention(f, heads, bias=bias, batch_first=True)  # noqa: E731
        return scope.call("attention", factory, i, v, op="call_attention")
    cls = draw(st.sampled_from((nn.LSTM, nn.GRU, nn.RNN)))
    hidden, layers, bi = draw(st.sampled_from((4, 8))), draw(st.integers(1, 2)), draw(st.booleans())
    factory = lambda: cls(f, hidden, num_layers=layers, bidirectional=bi, batch_first=True)  # noqa: E731
    return scope.call(cls.__name__.lower(), factory, i, _with_features(v, hidden * (2 if bi else 1)), op="call_rnn")


def _linear(scope: _Scope, i: int) -> int:
    v = scope.types[i]
    f, n, bias = v.features, scope.draw(st.sampled_from(FEATURES)), scope.draw(st.booleans())
    out = scope.call("linear", lambda: nn.Linear(f, n, bias=bias), i, _with_features(v, n))
    scope.linears[scope.steps[-1].target] = (f, n)
    return out


def _image_leaf(scope: _Scope, i: int) -> int:
    draw, v = scope.draw, scope.types[i]
    b, c, h, w = v.shape
    choices = ["conv", "batchnorm", "groupnorm", "act", "dropout"] + (["pool"] if h % 2 == 0 else [])
    kind = draw(st.sampled_from(choices))
    if kind == "conv":
        n, k, bias = draw(st.sampled_from((2, 4, 8))), draw(st.sampled_from((1, 3))), draw(st.booleans())
        stride = draw(st.sampled_from((1, 2))) if h >= 4 else 1
        size = (h + 2 * (k // 2) - k) // stride + 1
        factory = lambda: nn.Conv2d(c, n, k, stride=stride, padding=k // 2, bias=bias)  # noqa: E731
        return scope.call("conv", factory, i, Value("img", (b, n, size, size)))
    if kind == "batchnorm":
        return scope.call("batchnorm", lambda: nn.BatchNorm2d(c), i, v)
    if kind == "groupnorm":
        groups = draw(st.sampled_from([g for g in (1, 2, 4) if c % g == 0]))
        return scope.call("groupnorm", lambda: nn.GroupNorm(groups, c), i, v)
    if kind == "act":
        act = draw(st.sampled_from(sorted(set(_ACTIVATIONS) - {"softmax"})))
        return scope.call(act, _ACTIVATIONS[act], i, v)
    if kind == "dropout":
        p = draw(st.sampled_from((0.1, 0.5)))
        return scope.call("dropout", lambda: nn.Dropout(p), i, v)
    pool = draw(st.sampled_from((nn.MaxPool2d, nn.AvgPool2d)))
    return scope.call(pool.__name__.lower(), lambda: pool(2), i, Value("img", (b, c, h // 2, w // 2)))


def _block(scope: _Scope, i: int) -> int:
    """A nested :class:`RandomBlock` of 1-3 steps (layers, a parameter or a buffer), maybe residual."""
    inner = _Scope(scope.draw, [scope.types[i]])
    for _ in range(scope.draw(st.integers(1, 3))):
        last = len(inner.types) - 1
        if inner.types[last].kind != "tokens" and scope.draw(st.integers(0, 4)) == 0:
            _direct_tensor(inner, last)
        else:
            _leaf(inner, last)
    residual = inner.types[-1] == inner.types[0] and inner.types[0].kind != "tokens" and scope.draw(st.booleans())

    def factory() -> nn.Module:
        return inner.populate(RandomBlock(inner.steps, inner.types, residual))

    return scope.call("block", factory, i, inner.types[-1])


def _direct_tensor(scope: _Scope, i: int) -> int:
    """``v + parameter`` or ``v * buffer``: tensors of the module read directly in ``forward``."""
    v = scope.types[i]
    shape = (v.features, 1, 1) if v.kind == "img" else (v.features,)
    if scope.draw(st.booleans()):
        name = scope.name("param")
        scope.params[name] = shape
        return scope.add("add_param", [i], v, name)
    name = scope.name("buffer")
    scope.buffers[name] = (shape, scope.draw(st.booleans()))
    return scope.add("mul_buffer", [i], v, name)


def _structural_choices(scope: _Scope, i: int) -> list[str]:
    v = scope.types[i]
    if v.kind == "tokens":
        return ["layer"] + (["reuse"] if _reusable(scope, v) else [])
    choices = ["layer", "layer", "block", "direct"]
    if v.kind in ("flat", "seq"):
        choices.append("alias")
        choices.append("tied")
    if _reusable(scope, v):
        choices.append("reuse")
    if any(j != i and t == v for j, t in enumerate(scope.types)):
        choices.append("binary")
    if _cat_partners(scope, i):
        choices.append("cat")
    if v.kind == "seq":
        choices.append("mean")
    if v.kind == "img":
        choices.append("pool_flatten")
        if v.shape[1] * v.shape[2] * v.shape[3] <= 256:
            choices.append("flatten")
    return choices


def _reusable(scope: _Scope, v: Value) -> list[str]:
    return [name for name, (inp, _, _) in scope.calls.items() if inp == v]


def _cat_partners(scope: _Scope, i: int) -> list[int]:
    v = scope.types[i]
    return [
        j
        for j, t in enumerate(scope.types)
        if t.kind == v.kind and t.kind != "tokens" and _with_features(t, 0) == _with_features(v, 0)
    ]


def _step(scope: _Scope) -> None:
    """Draw one step of the model's program (inputs prefer the newest value, which shrinks to a chain)."""
    draw = scope.draw
    n = len(scope.types)
    i = draw(st.integers(0, n - 1).map(lambda k: n - 1 - k))
    v = scope.types[i]
    kind = draw(st.sampled_from(_structural_choices(scope, i)))
    if kind == "layer":
        _leaf(scope, i)
    elif kind == "block":
        _block(scope, i)
    elif kind == "direct":
        _direct_tensor(scope, i)
    elif kind == "alias":
        f, act = v.features, draw(st.booleans())

        def alias() -> nn.Module:
            lin = nn.Linear(f, f)
            return nn.Sequential(lin, nn.ReLU(), lin) if act else nn.Sequential(lin, lin)

        scope.call("shared", alias, i, v)
    elif kind == "tied":
        sources = [n for n, (n_in, _) in scope.linears.items() if n_in == v.features]
        if not sources:  # first a Linear to tie to, on the same input
            _linear(scope, i)
            sources = [scope.steps[-1].target]
        src = draw(st.sampled_from(sources))
        n_out = scope.linears[src][1]
        bias = draw(st.booleans())
        scope.call("tied", lambda: nn.Linear(v.features, n_out, bias=bias), i, _with_features(v, n_out))
        scope.ties.append((scope.steps[-1].target, src))
    elif kind == "reuse":
        name = draw(st.sampled_from(_reusable(scope, v)))
        _, out, op = scope.calls[name]
        scope.add(op, [i], out, name)
    elif kind == "binary":
        j = draw(st.sampled_from([j for j, t in enumerate(scope.types) if j != i and t == v]))
        scope.add(draw(st.sampled_from(("add", "mul"))), [i, j], v)
    elif kind == "cat":
        j = draw(st.sampled_from(_cat_partners(scope, i)))
        out = _with_features(v, v.features + scope.types[j].features)
        scope.add("cat", [i, j], out, "1" if v.kind == "img" else "-1")
    elif kind == "mean":
        scope.add("mean", [i], Value("flat", (v.shape[0], v.shape[2])))
    elif kind == "flatten":
        scope.add("flatten", [i], Value("flat", (v.shape[0], v.shape[1] * v.shape[2] * v.shape[3])))
    else:  # pool_flatten

        def pool_flatten() -> nn.Module:
            return nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())

        scope.call("head", pool_flatten, i, Value("flat", (v.shape[0], v.shape[1])))


@st.composite
def models(
    draw: st.DrawFn, *, max_steps: int = 6, kinds: tuple[str, ...] = KINDS, training: bool = False
) -> RandomModel:
    """A random valid :class:`~common.testing.programs.RandomModel` (see the module docstring).

    Args:
        max_steps: most steps of the top-level program (nested blocks add up to 3 each).
        kinds: input families to draw from: ``"flat"`` (B, F), ``"seq"`` (B, T, F), ``"img"``
            (B, C, H, W), ``"tokens"`` (B, T) int64.
        training: return the model in train mode (dropout active, batch norm updating its statistics).
    """
    seed = draw(st.integers(0, 2**16 - 1))
    inputs = {"x": _draw_input(draw, draw(st.sampled_from(kinds)))}
    for name in ("y", "z"):
        if draw(st.booleans()):
            same = draw(st.booleans()) and inputs["x"].kind != "tokens"
            inputs[name] = inputs["x"] if same else _draw_input(draw, draw(st.sampled_from(kinds)))
    scope = _Scope(draw, list(inputs.values()))
    for _ in range(draw(st.integers(1, max_steps))):
        _step(scope)
    last = len(scope.types) - 1
    fmt = draw(st.sampled_from(OUTPUT_FORMATS))
    extra = [] if fmt == "tensor" else draw(st.lists(st.integers(0, last), max_size=2))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = RandomModel(inputs, scope.steps, scope.types, [last, *extra], fmt)
        scope.populate(model)
    return model.train(training)


def model_inputs(model: RandomModel) -> st.SearchStrategy[tuple[tuple[torch.Tensor, ...], dict[str, Any]]]:
    """Example ``(args, kwargs)`` for ``model``: seeded normal values at a drawn scale, or tokens."""
    return st.builds(model.example_inputs, seed=st.integers(0, 2**16 - 1), scale=st.sampled_from((1.0, 0.01, 100.0)))


@st.composite
def models_and_inputs(
    draw: st.DrawFn, *, max_steps: int = 6, kinds: tuple[str, ...] = KINDS, training: bool = False
) -> tuple[RandomModel, tuple[torch.Tensor, ...], dict[str, Any]]:
    """``(model, args, kwargs)``: a model from :func:`models` and inputs from :func:`model_inputs`."""
    model = draw(models(max_steps=max_steps, kinds=kinds, training=training))
    args, kwargs = draw(model_inputs(model))
    return model, args, kwargs
