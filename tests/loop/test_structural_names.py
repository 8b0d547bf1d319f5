"""Node names come from each graph's own structure, so the loop is a fixpoint under ``dynamic_shapes`` too.

Export numbers its nodes over the whole model (``add_252``) and its symbols too (``sym_size_int_9``); those
counters shift whenever anything before them changes, and a rebuilt model's export is such a change (its
generated code spells a few computations differently). The IR names a node by what it computes, numbered
within its graph (``add``, ``add_1``...), leaves out the number-valued computations nothing reads, and writes
its own node names into the runtime assertions' messages; ``convert(rebuild(ir)) == ir`` then holds with
symbolic dimensions as it does with static ones.
"""

from __future__ import annotations

import inspect
import operator

import pytest
import torch
from torch import fx, nn
from torch.export import Dim

import ir2torch
import torch2ir
from torch2ir.hierarchy.recover import dead_symbolic


def _differences(a, b) -> list[str]:
    return sorted(k for k in set(a) | set(b) if k not in a or k not in b or a[k] != b[k])


def _decoder(name: str) -> nn.Module:
    import transformers

    small = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=100, use_cache=False)
    if name == "gpt2":
        return transformers.GPT2Model(transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100,
                                                              bos_token_id=0, eos_token_id=0, use_cache=False))
    if name == "jetmoe":  # a router whose expert sizes are data-dependent (unbacked symbols, runtime assertions)
        config = transformers.JetMoeConfig(**small, kv_channels=8, num_local_experts=4, num_experts_per_tok=2)
        return transformers.JetMoeModel(config)
    config = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[name](**small)
    return {"llama": transformers.LlamaModel, "qwen2": transformers.Qwen2Model}[name](config)


@pytest.mark.parametrize("name", ["llama", "gpt2", "qwen2", "jetmoe"])
def test_decoders_with_dynamic_batch_and_sequence_reach_a_fixpoint(name):
    torch.manual_seed(0)
    model = _decoder(name).eval()
    ids = torch.randint(0, 100, (2, 8))
    dims = {"input_ids": {0: Dim("batch", max=64), 1: Dim("seq", min=2, max=128)}}
    ir = torch2ir.convert(model, (), {"input_ids": ids}, dynamic_shapes=dims)
    # every module keeps its call signature: sizes are computed where they are read (torch2ir.hierarchy.local_sizes)
    unsigned = [k for k, impl in ir.items() if impl.type == "module" and impl.node_count
                and "forward_arg_names" not in impl.meta]
    assert unsigned == []
    rebuilt = ir2torch.convert(ir, model.state_dict())
    again = torch2ir.convert(rebuilt, (), {"input_ids": ids}, dynamic_shapes=dims)
    assert again == ir, _differences(ir, again)
    longer = torch.randint(0, 100, (3, 11))  # and the rebuilt model still runs other shapes exactly
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(input_ids=longer).last_hidden_state,
                                   model(input_ids=longer).last_hidden_state, rtol=0, atol=0)
    layers = [k for k in ir if k.endswith(("layers.0", "layers.1", "h.0", "h.1"))]
    assert len(layers) == 2
    # identical layers: the nodes they compute have identical names, wherever they sit in the model (an input
    # the call's signature does not name is named after the value the caller passes)
    computed = [[n for n in ir[k].nodes if ir[k].node(n)["type"] != "input"] for k in layers]
    assert computed[0] == computed[1]
    assert any(n.startswith("add_") for n in computed[0])


class _Block(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 1) * (x + 2)


class _Prefixed(nn.Module):
    """``count`` additions in the parent before the block: export's counter of ``add`` differs per count."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.count = count
        self.block = _Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.count):
            x = x + 1
        return self.block(x)


def test_a_module_gets_the_same_node_names_whatever_comes_before_it():
    x = torch.randn(2, 3)
    names = [torch2ir.convert(_Prefixed(count), (x,))["block"].nodes for count in (0, 3)]
    assert names[0] == names[1]
    assert sorted(names[0]) == ["add", "add_1", "mul", "output", "x"]
    parent = torch2ir.convert(_Prefixed(3), (x,))["root"].nodes
    assert [n for n in parent if n.startswith("add")] == ["add", "add_1", "add_2"]


def test_number_valued_computations_nothing_reads_are_dead():
    graph = fx.Graph()
    x = graph.placeholder("x")
    size = graph.call_function(torch.ops.aten.sym_size.int, (x, 0))
    unused = graph.call_function(operator.add, (size, 1))
    unused_too = graph.call_function(operator.mul, (unused, 2))  # read only by a dead value
    read = graph.call_function(operator.mul, (size, 2))
    view = graph.call_function(torch.ops.aten.view.default, (x, [read]))
    unread_tensor = graph.call_function(torch.ops.aten.relu.default, (x,))
    graph.output(view)
    for node, value in ((size, 3), (unused, 4), (unused_too, 8), (read, 6)):
        node.meta["val"] = value
    for node in (view, unread_tensor):
        node.meta["val"] = torch.empty(6)
    assert dead_symbolic(graph) == {unused, unused_too}


def test_runtime_assertions_name_the_ir_node_they_check():
    class Split(nn.Module):
        def forward(self, x: torch.Tensor, sizes: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return torch.split(x, sizes.tolist())

    ir = torch2ir.convert(Split(), (torch.randn(6), torch.tensor([2, 4])))
    root = ir["root"]
    checks = [root.node(n) for n in root.nodes if root.node(n).get("implementation") == "aten._assert_scalar.default"]
    assert checks
    for check in checks:
        checked, message = check["args"]
        assert message.endswith(f"on node '{checked.node}'"), message
        assert checked.node in root.nodes


class _NoGradChild(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():  # a wrap_with_set_grad_enabled body
            mask = x.ne(0).to(torch.int32)
            positions = mask.cumsum(1) * mask
        return x + positions


class _NoGradRoot(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.child = _NoGradChild()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child(x * x.ne(1) * x.ne(2))  # two `ne`s before the body's: export names its own `ne_2`


def _bodies(ir) -> list:
    return [a for impl in ir.values() for _, attrs in impl.graph.nodes(data=True)
            for a in attrs.get("args", []) if type(a).__name__ == "Subgraph"]


def test_a_no_grad_body_is_named_from_its_own_structure():
    model, x = _NoGradRoot(), torch.randn(2, 5)
    ir = torch2ir.convert(model, (x,), dynamic_shapes=({0: Dim("batch", max=16)},))
    (body,) = _bodies(ir)
    computed = [n for n in body.impl.nodes if body.impl.node(n)["type"] == "function"]
    assert "ne" in computed and not any(n.startswith("ne_") for n in computed), computed
    rebuilt = ir2torch.convert(ir)
    assert torch2ir.convert(rebuilt, (x,), dynamic_shapes=({0: Dim("batch", max=16)},)) == ir
    bigger = torch.randn(7, 5)
    assert torch.equal(rebuilt(bigger), model(bigger))


def test_m2m100_position_bodies_reach_a_fixpoint_under_a_dynamic_batch():
    """M2M100 computes its sinusoidal positions under ``no_grad``: the body's names were export's (``ne_3``)
    and differed on the rebuilt model's conversion."""
    from tests.real.corpus import CORPUS

    (arch,) = [a for a in CORPUS if a.name == "m2m100"]
    torch.manual_seed(0)
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    batch = Dim("batch", min=2, max=8)
    bound = inspect.signature(model.forward).bind(*args, **kwargs).arguments
    dims = {name: {0: batch} if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == 2 else None
            for name, value in bound.items()}
    ir = torch2ir.convert(model, args, kwargs, dynamic_shapes=dims)
    assert _bodies(ir)
    again = torch2ir.convert(ir2torch.convert(ir, model.state_dict()), args, kwargs, dynamic_shapes=dims)
    assert again == ir, _differences(ir, again)
