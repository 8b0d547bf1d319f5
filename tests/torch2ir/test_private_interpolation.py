"""Interpolation modes ``torch.export`` writes as private ATen kernels (``scripts/classify_ops.py``'s
``EXPORTED_PRIVATE``) convert and rebuild exactly."""

from __future__ import annotations

import torch


def test_functional_nearest_exact_interpolation_converts_exactly() -> None:
    """``F.interpolate(mode="nearest-exact")`` exports as the private ``_upsample_nearest_exact{1,2,3}d`` (diffusers'
    Wan VAE): allowed, and the rebuilt model returns the same tensors."""
    import torch.nn.functional as F

    import ir2torch
    import torch2ir

    class Resize(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (F.interpolate(x, scale_factor=2.0, mode="nearest-exact"),
                    F.interpolate(x.flatten(2), size=5, mode="nearest-exact"),
                    F.interpolate(x[:, :, None], scale_factor=(1.0, 1.5, 1.5), mode="nearest-exact"))

    x = torch.randn(1, 2, 4, 4)
    rebuilt = ir2torch.convert(torch2ir.convert(Resize(), (x,)), {})
    assert all(torch.equal(a, b) for a, b in zip(rebuilt(x), Resize()(x), strict=True))
