"""Over the whole real corpus: after one backward pass, every parameter of the rebuilt model has the gradient
the original's parameter of the same name gets (training through a rebuild is the original's training).

The eval-mode IR of each architecture is the one ``test_corpus`` converted (see ``shared.py``). Both models
run in eval mode (no dropout masks to replay), from the same inputs, and the loss is a fixed weighted sum of
every floating-point output (``tests.helpers.weighted_loss``: weights drawn once from a seeded generator, so
that outputs cannot cancel out); the gradients are compared name by name, with the same tolerance as the outputs.
"""

from __future__ import annotations

import pytest

from tests.helpers import assert_same_gradients
from tests.real.corpus import CORPUS, Arch
from tests.real.shared import converted, converters

pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")

TOLERANCE = 1e-5


@pytest.mark.parametrize("arch", CORPUS, ids=lambda a: a.name)
def test_every_parameter_gets_the_original_gradient(arch: Arch) -> None:
    shared = converted(arch)  # the eval-mode model as built and its IR (converted once, see shared.py)
    model, ir = shared.model.eval(), shared.ir
    rebuilt = converters(arch)["rebuilder"].convert(ir, model.state_dict()).eval()
    args, kwargs = arch.inputs()
    assert_same_gradients(model, rebuilt, args, kwargs, TOLERANCE)
