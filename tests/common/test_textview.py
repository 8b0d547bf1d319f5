"""Text views of an in-memory IR: ``str(ir)`` / ``ir.summary()`` (the tree, repeats once) and ``print_readable``."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

import torch2ir
from common.render import RenderError
from tests.models.zoo import by_name


@pytest.fixture(scope="module")
def nested():
    case = by_name("nested_containers")
    args, kwargs = case.inputs()
    model = case.build()
    return model, args, torch2ir.convert(model, args, kwargs)


class _Block(nn.Module):
    def __init__(self, dim: int, out: int, p: float = 0.0) -> None:
        super().__init__()
        self.lin, self.drop = nn.Linear(dim, out), nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(torch.relu(self.lin(x)))


class _Stack(nn.Module):
    """Blocks 0-2 identical, 3 with another dropout, 4-5 identical again, 6 of another width."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_Block(8, 8) for _ in range(3)] + [_Block(8, 8, 0.5)]
                                    + [_Block(8, 8) for _ in range(2)] + [_Block(8, 4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def test_str_and_summary_print_the_tree_with_repeats_once(nested):
    model, _, ir = nested
    text = str(ir)
    assert text == ir.summary()
    assert "0-1 x2  SkipConnection  (5 nodes)" in text
    assert f"parameters       {sum(p.numel() for p in model.parameters())} elements" in text
    assert "inputs           x: float32[2, 8]" in text
    full = ir.summary(collapse=False)
    assert "0-1 x2" not in full
    assert re.search(r"├─ 0  SkipConnection", full) and re.search(r"└─ 1  SkipConnection", full)
    # every module the model has appears in the expanded tree, by its last name and class
    for path, module in model.named_modules():
        if path:
            assert f"{path.rsplit('.', 1)[-1]}  {type(module).__name__}" in full, path
    assert ir.summary(depth=1).count("\n") < full.count("\n")
    with pytest.raises(RenderError, match="depth must be 0 or more"):
        ir.summary(depth=-1)


def test_only_identical_consecutive_blocks_fold():
    model = _Stack().eval()
    x = torch.randn(2, 8)
    ir = torch2ir.convert(model, (x,))
    lines = [line.strip("│├└─ ") for line in ir.summary().splitlines()]
    blocks = [line for line in lines if line.split("  ")[0].replace("-", "").replace(" x", "").isdigit()]
    # 0-2 are the same; 3 differs (dropout p), 4-5 are the same; 6 differs (out_features)
    assert [b.split("  ")[0] for b in blocks] == ["0-2 x3", "3", "4-5 x2", "6"], blocks
    assert ir.summary(collapse=False).count("_Block") == 7


def test_print_readable_shows_each_node_with_the_shapes_torch_computes(nested, capsys):
    model, args, ir = nested
    shapes: dict[str, torch.Size] = {}
    hooks = [m.register_forward_hook(lambda mod, inp, out, path=path: shapes.__setitem__(path, out.shape))
             for path, m in model.named_modules() if path]
    with torch.no_grad():
        model(*args)
    for hook in hooks:
        hook.remove()
    text = ir["root"].print_readable()
    assert capsys.readouterr().out.rstrip("\n") == text
    assert text.splitlines()[1] == 'def forward(self, x: "f32[2, 8]"):'
    for call, path in (("heads_proj", "heads.proj"), ("heads_act", "heads.act")):
        dims = ", ".join(map(str, shapes[path]))
        assert f'{call}: "f32[{dims}]" = self.{path}(' in text, text
    assert "blocks_1 = self.blocks[1](blocks_0)" in text
    block = ir["blocks.0"].print_readable(print_output=False)
    assert capsys.readouterr().out == ""
    assert 'add: "f32[2, 8]" = aten.add.Tensor(x, act)' in block and block.rstrip().endswith("return add")
    leaf = ir["heads.proj"].print_readable(print_output=False)
    weight = model.heads.proj.weight
    assert "# attributes: in_features=8, out_features=8, bias=True" in leaf
    assert f"# parameter weight: f32[{weight.shape[0]}, {weight.shape[1]}]" in leaf and "no graph" in leaf


def test_text_views_of_a_decoder_fold_its_layers():
    from common.cli.model import build_model

    model = build_model("llama", hf=True, config={"num_hidden_layers": 3, "hidden_size": 32, "intermediate_size": 64,
                                                  "num_attention_heads": 4, "num_key_value_heads": 2,
                                                  "vocab_size": 50})
    ids = torch.randint(0, 50, (1, 6))
    ir = torch2ir.convert(model, (ids,))
    text = str(ir)
    assert "0-2 x3  LlamaDecoderLayer" in text and text.count("LlamaDecoderLayer") == 1
    attn = ir["layers.1.self_attn"].print_readable(print_output=False)
    assert 'q_proj: "f32[1, 6, 32]" = self.q_proj(' in attn
    assert re.search(r'softmax(_\d+)?: "f32\[1, 4, 6, 6\]" = aten\.softmax\.int\(', attn), attn


def test_print_readable_of_a_hand_built_ir_reads_arguments_from_its_edges():
    from common import IR
    from tests.seed import seed_dict

    ir = IR.from_dict(seed_dict())  # nodes without args/kwargs or meta: the edges say what flows where
    text = ir["root"].print_readable(print_output=False)
    assert text.splitlines()[1:] == ["def forward(self, input_1):", "    _0 = self[0](input_1)  # custom_linear",
                                     "    return _0"], text
    assert "# attributes: in_features=1, out_features=2, bias=True" in ir["0"].print_readable(print_output=False)
    assert "0  custom_linear" in str(ir)


def test_a_graph_prints_in_the_order_it_runs():
    """The train-mode factor of a dropout is added to the graph after its output; it prints before its reader."""
    import torch.nn.functional as F

    class Attention(torch.nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return F.scaled_dot_product_attention(q, q, q, dropout_p=0.1 if self.training else 0.0)

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention = Attention()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attention(x)

    ir = torch2ir.convert(Model().eval(), (torch.randn(1, 2, 4, 8),))
    impl = ir["attention"]
    assert list(impl.nodes).index("output") < list(impl.nodes).index("scaled_dot_product_attention_dropout_p")
    lines = impl.print_readable(print_output=False).splitlines()
    factor = next(i for i, line in enumerate(lines) if line.strip().startswith("scaled_dot_product_attention_drop"))
    reader = next(i for i, line in enumerate(lines) if "dropout_p=scaled_dot_product_attention_dropout_p" in line)
    assert factor < reader < next(i for i, line in enumerate(lines) if line.strip().startswith("return"))
