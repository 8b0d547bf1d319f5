"""The round-trip invariants on every zoo and real model: convert -> JSON -> rebuild -> load.

Outputs must be *identical* (max abs diff 0: the same ATen ops run in the same order),
with the same pytree structure, module paths, state-dict keys, real leaf classes, shared
modules and tied parameters.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import ir2torch
from common import IR
from tests.helpers import converted, max_abs_diff
from tests.models.real import REAL
from tests.models.zoo import ZOO

NAMES = [c.name for c in ZOO + REAL]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    cache: dict[str, nn.Module] = {}

    def get(name: str) -> nn.Module:
        if name not in cache:
            _, model, _, _, ir = converted(name)
            path = ir.save(tmp_path_factory.mktemp(name) / "model.ir.json")
            cache[name] = ir2torch.convert(IR.load(path), model.state_dict())
        return cache[name]

    return get


@pytest.mark.parametrize("name", NAMES)
def test_outputs_identical_after_json_round_trip(name, rebuilt):
    _, model, args, kwargs, _ = converted(name)
    with torch.no_grad():
        assert max_abs_diff(model(*args, **kwargs), rebuilt(name)(*args, **kwargs)) == 0.0


@pytest.mark.parametrize("name", NAMES)
def test_paths_state_keys_and_strict_load(name, rebuilt):
    _, model, _, _, _ = converted(name)
    new = rebuilt(name)
    assert [p for p, _ in new.named_modules(remove_duplicate=False)] == \
        [p for p, _ in model.named_modules(remove_duplicate=False)]
    assert list(new.state_dict()) == list(model.state_dict())
    new.load_state_dict(model.state_dict(), strict=True)


@pytest.mark.parametrize("name", NAMES)
def test_handled_modules_are_their_real_classes(name, rebuilt):
    _, model, _, _, ir = converted(name)
    new = rebuilt(name)
    handled = {key for key, impl in ir.items() if impl.graph.number_of_nodes() == 0 and impl.type != "module"}
    originals = dict(model.named_modules())
    for path, module in new.named_modules():
        if (path or "root") in handled:
            assert type(module) is type(originals[path]), path
            assert module.extra_repr() == originals[path].extra_repr(), path
    for path, module in model.named_modules():
        if type(module) in (nn.Linear, nn.Conv2d, nn.LayerNorm, nn.BatchNorm2d, nn.Embedding):
            assert type(new.get_submodule(path)) is type(module), path


@pytest.mark.parametrize("name", NAMES)
def test_shared_modules_and_tied_parameters_stay_shared(name, rebuilt):
    _, model, _, _, _ = converted(name)
    new = rebuilt(name)

    def groups(m, items):
        seen: dict[int, list[str]] = {}
        for path, obj in items(m):
            seen.setdefault(id(obj), []).append(path)
        return sorted(sorted(v) for v in seen.values() if len(v) > 1)

    def modules(m):
        return m.named_modules(remove_duplicate=False)

    def params(m):
        return m.named_parameters(remove_duplicate=False)

    assert groups(new, modules) == groups(model, modules)
    assert groups(new, params) == groups(model, params)


def test_gpt2_lm_head_is_tied_to_the_embedding(rebuilt):
    new = rebuilt("gpt2")
    assert new.lm_head.weight is new.transformer.wte.weight


@pytest.mark.parametrize("name", NAMES)
def test_train_mode_behaves_like_the_original(name):
    """Same seed, same outputs in train mode; running statistics equal after the step."""
    case, _, args, kwargs, _ = converted(name)
    original = case.build()  # a fresh copy: the cached model stays in eval mode
    new = ir2torch.convert(converted(name)[4], original.state_dict())
    original.train()
    new.train()
    try:
        torch.manual_seed(0)
        expected = original(*args, **kwargs)
    except ValueError as exc:  # e.g. batch norm on a single value per channel: the rebuild must agree
        with pytest.raises(type(exc)):
            new(*args, **kwargs)
        return
    torch.manual_seed(0)
    got = new(*args, **kwargs)
    # BERT/GPT-2/T5 attention applies functional dropout depending on self.training: exact thanks
    # to the train-mode trace (torch2ir.train.dropout)
    assert max_abs_diff(expected, got) == 0.0
    for (k, a), (_, b) in zip(original.state_dict().items(), new.state_dict().items()):
        assert torch.equal(a, b), k


class _Branchy(nn.Module):
    """Data-dependent branch written with torch.cond (a higher-order op with two bodies)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = nn.Parameter(torch.tensor(2.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.lin(x)
        return torch.cond(h.sum() > 0, lambda t: t * self.scale, lambda t: t - 1.0, (h,))


def test_torch_cond_keeps_both_branches(tmp_path):
    import torch2ir

    torch.manual_seed(0)
    model = _Branchy().eval()
    x = torch.randn(2, 4)
    ir = torch2ir.convert(model, (x,))
    assert [a["implementation"] for _, a in ir.root.graph.nodes(data=True)].count("higher_order.cond") == 1
    rebuilt = ir2torch.convert(IR.load(ir.save(tmp_path / "cond.ir.json")), model.state_dict())
    direction = model.lin.weight.sum(dim=0).detach()  # h.sum() grows along this input direction
    big = (10 * direction / direction.norm()).expand(2, 4)
    assert model.lin(big).sum() > 0 and model.lin(-big).sum() < 0  # both branches are exercised
    for inp in (x, big, -big):
        assert torch.equal(model(inp), rebuilt(inp))


def test_dynamic_batch_and_sequence_run_at_two_sizes(tmp_path):
    from torch.export import Dim

    import torch2ir

    _, model, args, kwargs, _ = converted("bert")
    batch, seq = Dim("batch", min=1, max=8), Dim("seq", min=2, max=32)
    dims = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    ir = torch2ir.convert(model, args, kwargs, dynamic_shapes=dims)
    shape = ir.root.node("input_ids")["meta"]["shape"]
    assert all(isinstance(s, str) for s in shape)  # symbols, not the example's (2, 8)
    assert [ir.root.meta["range_constraints"][s] for s in shape] == [[1, 8], [2, 32]]
    rebuilt = ir2torch.convert(IR.load(ir.save(tmp_path / "dyn.ir.json")), model.state_dict())
    for b, s in ((1, 5), (3, 12)):
        ids = torch.randint(0, 100, (b, s))
        mask = torch.ones(b, s, dtype=torch.long)
        with torch.no_grad():
            assert max_abs_diff(model(ids, attention_mask=mask), rebuilt(ids, attention_mask=mask)) == 0.0
