"""Over the whole real corpus: after one backward pass, every parameter of the rebuilt model has the gradient
the original's parameter of the same name gets (training through a rebuild is the original's training).

The eval-mode IR of each architecture is the one ``test_corpus`` converted (see ``shared.py``). Both models
run in eval mode (no dropout masks to replay), from the same inputs, and the loss is a fixed weighted sum of
every floating-point output (weights drawn once from a seeded generator, so that outputs cannot cancel out);
the gradients are compared name by name, with the same tolerance as the outputs.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

from tests.real.corpus import CORPUS, Arch
from tests.real.shared import converted, converters

pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")

TOLERANCE = 1e-5


def _loss(output: object) -> torch.Tensor:
    """A weighted sum of every floating-point tensor of ``output`` that depends on the parameters."""
    generator = torch.Generator().manual_seed(0)
    total = torch.zeros(())
    for leaf in pytree.tree_leaves(output):
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point() and leaf.requires_grad:
            weights = torch.rand(leaf.shape, generator=generator, dtype=leaf.dtype)
            total = total + (leaf * weights).sum().to(total.dtype)
    return total


def _gradients(model: torch.nn.Module, args: tuple, kwargs: dict) -> dict[str, torch.Tensor | None]:
    model.zero_grad(set_to_none=True)
    loss = _loss(model(*args, **kwargs))
    assert loss.requires_grad, "no output depends on a parameter"
    loss.backward()
    return {name: p.grad for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("arch", CORPUS, ids=lambda a: a.name)
def test_every_parameter_gets_the_original_gradient(arch: Arch) -> None:
    shared = converted(arch)  # the eval-mode model as built and its IR (converted once, see shared.py)
    model, ir = shared.model.eval(), shared.ir
    rebuilt = converters(arch)["rebuilder"].convert(ir, model.state_dict()).eval()
    args, kwargs = arch.inputs()
    expected = _gradients(model, args, kwargs)
    got = _gradients(rebuilt, args, kwargs)
    assert sorted(got) == sorted(expected)
    reached = [name for name, grad in expected.items() if grad is not None]
    assert reached, "the loss reaches no parameter"
    for name, grad in expected.items():
        other = got[name]
        assert (grad is None) == (other is None), f"{name}: gradient {'missing' if other is None else 'extra'}"
        if grad is not None:
            diff = (grad.double() - other.double()).abs().max().item() if grad.numel() else 0.0
            assert diff <= TOLERANCE, f"{name}: gradients differ by {diff:.3g}"
