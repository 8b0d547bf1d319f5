"""The algebra behind ``reparameterize``: a value that is one convolution of another value, exactly.

A :class:`Branch` is ``conv(source, weight, bias, stride, padding, dilation, groups)`` with zero padding, its
tensors in float64. Branches of one source compose exactly when:

- a per-channel affine map (an eval-mode batch norm) follows a branch: the weight and bias are scaled and shifted
  per output channel;
- two branches are summed with the same stride and dilation, output channels and input channels, and kernels that
  line up: each kernel is embedded, centred, in the largest one (a 1x1 convolution without padding is the centre
  tap of a 3x3 one with padding 1), and the groups become their greatest common divisor (the weights placed
  block-diagonally, zeros elsewhere); a kernel that cannot be centred (its padding would differ on both sides)
  does not compose;
- a number is added: it goes into the bias.

The source itself is the identity branch: a 1x1 depthwise convolution of weight 1 (RepVGG's identity batch norm
is then that branch after a per-channel affine map). Anything else (a convolution of a convolution, a branch of
another source) is not one convolution of the source: the functions return ``None`` and the caller leaves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

WIDE = torch.float64


@dataclass(frozen=True)
class Branch:
    """``conv(source)`` with these float64 tensors and hyperparameters; ``convs`` counts the convolutions summed."""

    weight: torch.Tensor
    bias: torch.Tensor
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    in_channels: int
    convs: int = 0

    @property
    def out_channels(self) -> int:
        return int(self.weight.shape[0])

    @property
    def kernel(self) -> tuple[int, ...]:
        return tuple(int(k) for k in self.weight.shape[2:])


def identity(channels: int, dims: int, device: torch.device | str = "cpu") -> Branch:
    """The source itself, as a depthwise 1x1 convolution of weight 1."""
    weight = torch.ones((channels, 1, *([1] * dims)), dtype=WIDE, device=device)
    return Branch(weight, torch.zeros(channels, dtype=WIDE, device=device), (1,) * dims, (0,) * dims, (1,) * dims,
                  channels, channels)


def affine(branch: Branch, scale: torch.Tensor, shift: torch.Tensor) -> Branch | None:
    """``branch * scale + shift`` per output channel (an eval-mode batch norm after it)."""
    if scale.shape != (branch.out_channels,) or shift.shape != (branch.out_channels,):
        return None
    view = (-1,) + (1,) * (branch.weight.dim() - 1)
    return Branch(branch.weight * scale.to(WIDE).view(view), branch.bias * scale.to(WIDE) + shift.to(WIDE),
                  branch.stride, branch.padding, branch.dilation, branch.groups, branch.in_channels, branch.convs)


def shifted(branch: Branch, number: float) -> Branch:
    """``branch + number``."""
    return Branch(branch.weight, branch.bias + number, branch.stride, branch.padding, branch.dilation, branch.groups,
                  branch.in_channels, branch.convs)


def _regroup(branch: Branch, groups: int) -> torch.Tensor:
    """The branch's weight for ``groups`` groups (a divisor of its own): block-diagonal, zeros elsewhere."""
    if groups == branch.groups:
        return branch.weight
    out_c, in_c = branch.out_channels, branch.in_channels
    per_in, per_out = in_c // branch.groups, out_c // branch.groups
    wide_in, wide_out = in_c // groups, out_c // groups
    weight = branch.weight.new_zeros((out_c, wide_in, *branch.kernel))
    for o in range(0, out_c, per_out):
        first_in = (o // per_out) * per_in - (o // wide_out) * wide_in
        weight[o:o + per_out, first_in:first_in + per_in] = branch.weight[o:o + per_out]
    return weight


def _embedded(weight: torch.Tensor, before: tuple[int, ...], kernel: tuple[int, ...]) -> torch.Tensor:
    if tuple(weight.shape[2:]) == kernel:
        return weight
    pad: list[int] = []
    for b, k, own in reversed(list(zip(before, kernel, weight.shape[2:]))):
        pad += [b, k - b - int(own)]
    return torch.nn.functional.pad(weight, pad)


def summed(a: Branch, b: Branch) -> Branch | None:
    """``a + b`` as one convolution of their source, or ``None`` when that is not exact (see the module)."""
    if a.stride != b.stride or a.dilation != b.dilation or a.out_channels != b.out_channels or \
            a.in_channels != b.in_channels or len(a.kernel) != len(b.kernel):
        return None
    padding = tuple(max(p, q) for p, q in zip(a.padding, b.padding))
    before: list[tuple[int, ...]] = []
    for branch in (a, b):
        offsets = []
        for big, own, d in zip(padding, branch.padding, branch.dilation):
            if (big - own) % d:
                return None
            offsets.append((big - own) // d)
        before.append(tuple(offsets))
    kernel = tuple(max(x, y) for x, y in zip(*[tuple(t + k for t, k in zip(offs, br.kernel))
                                               for offs, br in ((before[0], a), (before[1], b))]))
    for offs, br in ((before[0], a), (before[1], b)):
        if any(k - t - own != t for k, t, own in zip(kernel, offs, br.kernel)):
            return None  # not centred: the summed output would have another size
    groups = math.gcd(a.groups, b.groups)
    weight = _embedded(_regroup(a, groups), before[0], kernel) + _embedded(_regroup(b, groups), before[1], kernel)
    return Branch(weight, a.bias + b.bias, a.stride, padding, a.dilation, groups, a.in_channels, a.convs + b.convs)


def conv_branch(weight: torch.Tensor, bias: torch.Tensor | None, *, stride, padding, dilation,
                groups: int) -> Branch | None:
    """A convolution of the source, as a branch (``None``: string padding, or sizes that are not integers)."""
    dims = weight.dim() - 2
    hyper = []
    for value in (stride, padding, dilation):
        value = tuple(value) if isinstance(value, (list, tuple)) else (value,) * dims
        if len(value) != dims or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return None
        hyper.append(value)
    wide = weight.to(WIDE)
    b = bias.to(WIDE) if bias is not None else torch.zeros(weight.shape[0], dtype=WIDE, device=weight.device)
    return Branch(wide, b, hyper[0], hyper[1], hyper[2], int(groups), int(weight.shape[1]) * int(groups), 1)


__all__ = ["Branch", "affine", "conv_branch", "identity", "shifted", "summed"]
