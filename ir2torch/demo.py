"""Minimal end-to-end example: the seed IR of DESIGN.md, saved, loaded, rebuilt, run.

Run with ``python -m ir2torch.demo`` (``make demo``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
from torch import nn

import ir2torch
from common import IR, Implementation

SEED = {
    "root": {
        "name": "root",
        "type": "module",
        "nodes": {
            "input_1": {"name": "input_1", "type": "input", "implementation": "input"},
            "_0": {"name": "_0", "type": "custom_linear", "implementation": "0"},
            "output": {"name": "output", "type": "output", "implementation": "output"},
        },
        "edges": {
            ("input_1", "_0"): {"src": "input_1", "dst": "_0"},
            ("_0", "output"): {"src": "_0", "dst": "output"},
        },
    },
    "0": {"name": "0", "type": "custom_linear", "in_features": 1, "out_features": 2, "bias": True,
          "nodes": {}, "edges": {}},
}


def main() -> int:
    ir = IR.from_dict(SEED).validate()
    with tempfile.TemporaryDirectory() as tmp:
        path = ir.save(Path(tmp) / "seed.ir.json")
        loaded = IR.load(path)
        size = path.stat().st_size
    assert loaded == ir

    converter = ir2torch.get_default_converter()

    @converter.register("custom_linear")
    def build_linear(impl: Implementation) -> nn.Module:
        return nn.Linear(impl.data["in_features"], impl.data["out_features"], bias=impl.data["bias"])

    reference = nn.Linear(1, 2)
    model = converter.convert(loaded, {"0.weight": reference.weight.detach(), "0.bias": reference.bias.detach()})
    x = torch.linspace(-1, 1, 5).unsqueeze(1)
    diff = (model(x) - reference(x)).abs().max().item()
    print(f"IR: {len(loaded)} implementations, saved as {size} bytes of JSON and loaded back equal")
    print(f"rebuilt: {model.__class__.__name__} with child {model.get_submodule('0')}")
    print(f"max |rebuilt(x) - nn.Linear(x)| over {x.shape[0]} inputs: {diff:.3g}")
    return 0 if diff == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
