"""The built-in demo model: a conv stem feeding two pre-norm transformer blocks and a classifier head.

It is defined here, in plain ``torch.nn`` (no download, no extra dependency), and exercises what a
real model does: handled leaves (``Conv2d``, ``BatchNorm2d``, ``LayerNorm``, ``MultiheadAttention``,
``Linear``, ``Dropout``), modules rebuilt from their graphs (``ConvStem``, ``Block``), containers
(``ModuleList``, ``Sequential``), residual adds and a dict output.

``torch2ir demo`` (``make demo``) runs the main job on it; see :mod:`common.cli.demo`.
``python -m torch2ir.demo [--out DIR]`` is the same as ``torch2ir demo [--out DIR]``.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["Block", "ConvStem", "DemoModel", "example_inputs", "main"]


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
    """Pre-norm transformer block: self-attention and an MLP, each with a residual."""

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
    """Conv stem + two transformer blocks + a classifier head; returns ``{"logits", "tokens"}``."""

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


def example_inputs(device: str | torch.device = "cpu") -> tuple[torch.Tensor]:
    """A seeded batch of two 3x32x32 images (empty on ``device="meta"``)."""
    if torch.device(device).type == "meta":
        return (torch.empty(2, 3, 32, 32, device="meta"),)
    return (torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0)).to(device),)


def main(argv: list[str] | None = None) -> int:
    """``python -m torch2ir.demo [options]``: the same as ``torch2ir demo [options]``."""
    import sys

    from torch2ir.cli import main as cli_main

    return cli_main(["demo", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
