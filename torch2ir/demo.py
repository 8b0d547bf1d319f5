"""The main job on a built-in model: convert, save, load, rebuild, load state, compare.

Run with ``python -m torch2ir.demo [--out DIR]`` (``make demo``). The model (a conv stem
feeding a small transformer block) is defined here: no download, no extra dependency.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import torch
from torch import nn
from torch.utils import _pytree as pytree


class ConvStem(nn.Module):
    """Patchify an image: conv -> batch norm -> GELU, then flatten to tokens."""

    def __init__(self, channels: int = 3, width: int = 32) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, width, kernel_size=4, stride=4)
        self.norm = nn.BatchNorm2d(width)
        self.act = nn.GELU()

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.conv(image))).flatten(2).transpose(1, 2)


class Block(nn.Module):
    """Pre-norm transformer block: attention and MLP, each with a residual."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, dropout=0.1, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class DemoModel(nn.Module):
    """Conv stem + one transformer block + a classifier head, returning a dict."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = ConvStem()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(32, classes)

    def forward(self, image: torch.Tensor) -> dict[str, torch.Tensor]:
        x = self.stem(image)
        for block in self.blocks:
            x = block(x)
        return {"logits": self.head(x.mean(dim=1)), "tokens": x}


def main(argv: list[str] | None = None) -> int:
    import ir2torch
    import torch2ir
    from common import IR

    parser = argparse.ArgumentParser(prog="torch2ir-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for the IR files (default: a temporary folder)")
    options = parser.parse_args(argv)
    torch.manual_seed(0)
    model = DemoModel().eval()
    image = torch.randn(2, 3, 32, 32)
    with tempfile.TemporaryDirectory() as tmp:
        out = options.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        ir = torch2ir.convert(model, (image,))
        t1 = time.perf_counter()
        path = ir.save(out / "demo.ir.json")
        loaded = IR.load(path)
        t2 = time.perf_counter()
        rebuilt = ir2torch.convert(loaded, model.state_dict())
        t3 = time.perf_counter()
        with torch.no_grad():
            expected, got = model(image), rebuilt(image)
        diff = max((a - b).abs().max().item() for a, b in zip(pytree.tree_leaves(expected), pytree.tree_leaves(got)))
        types: dict[str, int] = {}
        for impl in loaded.values():
            types[impl.type] = types.get(impl.type, 0) + 1
        print(f"model      DemoModel, {sum(p.numel() for p in model.parameters())} parameters")
        print(f"IR         {len(loaded)} implementations: "
              + ", ".join(f"{n} {t}" for t, n in sorted(types.items(), key=lambda kv: -kv[1])))
        print(f"file       {path.name}, {path.stat().st_size} bytes" + (f" in {out}" if options.out else ""))
        print(f"timings    convert {t1 - t0:.2f}s, save+load {t2 - t1:.2f}s, rebuild+load state {t3 - t2:.2f}s")
        print(f"rebuilt    {type(rebuilt.blocks[0].attn).__name__} at blocks.0.attn, "
              f"{type(rebuilt.head).__name__} at head, same module paths: "
              f"{[n for n, _ in rebuilt.named_modules()] == [n for n, _ in model.named_modules()]}")
        print(f"outputs    {sorted(got)}; max |original - rebuilt| = {diff:.3g}")
    return 0 if diff == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
