"""IRs the view tests open: a small Llama converted for real, a synthetic 80-block decoder, a hostile IR."""

from __future__ import annotations

import functools

import torch

from common.ir import IR, Implementation
from common.values import Ref

F32 = torch.float32
HIDDEN = {"shape": [1, 16, 64], "dtype": F32}


@functools.cache
def small_llama() -> IR:
    """``LlamaForCausalLM`` with 4 identical decoder layers (hidden 64), converted on ``(1, 16)`` token ids."""
    from transformers import LlamaConfig, LlamaForCausalLM

    import torch2ir

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        num_hidden_layers=4, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
        max_position_embeddings=64, vocab_size=100, use_cache=False, attn_implementation="eager")).eval()
    return torch2ir.convert(model, (torch.zeros((1, 16), dtype=torch.long),))


def _chain(impl: Implementation, start: str, ops: int, prefix: str = "op") -> str:
    prev = start
    for j in range(ops):
        name = impl.add_node(f"{prefix}_{j}", "function", "aten.relu.default", args=[Ref(prev)], kwargs={},
                             meta=HIDDEN)
        impl.add_edge(prev, name, slot=0)
        prev = name
    return prev


def decoder(blocks: int, ops: int = 40) -> IR:
    """A hand-built IR of ``blocks`` identical blocks (``layers.0`` ..), each a graph of ``ops`` nodes calling
    two linear leaves: the scale of a 70B Llama's tree (80 blocks, about 1000 implementations) built in a second."""
    ir = IR()
    root = ir.add(Implementation("root", "module", meta={"class": "demo.Decoder"}))
    ir.add(Implementation("layers", "modulelist", meta={"class": "torch.nn.ModuleList"}))
    prev = root.add_node("x", "input", "input", meta=HIDDEN)
    for i in range(blocks):
        key = f"layers.{i}"
        call = root.add_node(f"layers_{i}", "module", key, args=[Ref(prev)], kwargs={})
        root.add_edge(prev, call, slot=0)
        prev = call
        block = ir.add(Implementation(key, "module", meta={"class": "demo.Block", "out_spec": '[1, {"type": null}]'}))
        last = _chain(block, block.add_node("x", "input", "input", meta=HIDDEN), ops)
        for lin in ("up", "down"):
            node = block.add_node(lin, "linear", f"{key}.{lin}", args=[Ref(last)], kwargs={}, meta=HIDDEN)
            block.add_edge(last, node, slot=0)
            last = node
            ir.add(Implementation(f"{key}.{lin}", "linear", {"in_features": 64, "out_features": 64, "bias": False},
                                  state={"weight": {"kind": "parameter", "shape": [64, 64], "dtype": F32}},
                                  meta={"class": "torch.nn.Linear"}))
        out = block.add_node("output", "output", "output", args=[[Ref(last)]], kwargs={})
        block.add_edge(last, out, slot=(0, 0))
    out = root.add_node("output", "output", "output", args=[[Ref(prev)]], kwargs={})
    root.add_edge(prev, out, slot=(0, 0))
    return ir


#: strings that would run script if they ever became markup (no dots: they are also module path components)
IMG = "<img src=x onerror=document['title']='PWNED'>"
END = "</script><script>document['title']='PWNED'</script>"
SVG = "<svg onload=document['title']='PWNED'>"


def hostile() -> IR:
    """An IR whose paths, types, classes, attributes, state names, node names and meta are markup and script."""
    ir = IR()
    root = ir.add(Implementation("root", "module", {END: IMG}, meta={"class": END, IMG: SVG}))
    x = root.add_node(IMG, "input", "input", meta={"shape": [1, SVG], "dtype": F32})
    call = root.add_node(END, "module", IMG, args=[Ref(x)], kwargs={"k": SVG})
    root.add_edge(x, call, slot=0)
    out = root.add_node("output", "output", "output", args=[[Ref(call)]], kwargs={})
    root.add_edge(call, out, slot=(0, 0))
    inner = ir.add(Implementation(IMG, SVG, {"size": END}, state={END: {"kind": "buffer", "shape": [2], "dtype": F32,
                                                                      IMG: SVG}},
                                  aliases=[SVG], meta={"class": IMG, "out_spec": END}))
    y = inner.add_node(SVG, "input", "input", meta=HIDDEN)
    op = inner.add_node(END, "function", f"aten.{IMG}", args=[Ref(y)], kwargs={}, meta=HIDDEN)
    inner.add_edge(y, op, slot=0)
    ret = inner.add_node("output", "output", "output", args=[[Ref(op)]], kwargs={})
    inner.add_edge(op, ret, slot=(0, 0))
    ir.add(Implementation(f"{IMG}.{END}", "linear", {IMG: END}, meta={"class": SVG}))
    return ir


def nested_runs(blocks: int = 3, experts: int = 4) -> IR:
    """``layers.i.experts.j``: a run of identical experts inside each of a run of identical blocks (an MoE's shape)."""
    ir = IR()
    ir.add(Implementation("root", "module", meta={"class": "demo.MoE"}))
    ir.add(Implementation("layers", "modulelist"))
    for i in range(blocks):
        ir.add(Implementation(f"layers.{i}", "module", meta={"class": "demo.Block"}))
        ir.add(Implementation(f"layers.{i}.experts", "modulelist"))
        for j in range(experts):
            ir.add(Implementation(f"layers.{i}.experts.{j}", "linear", {"in_features": 4, "out_features": 4},
                                  state={"weight": {"kind": "parameter", "shape": [4, 4], "dtype": F32}}))
    return ir
