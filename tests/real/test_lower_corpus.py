"""Over the whole real corpus: the FlatIR derived from the conversion's capture (``ir.lower()``, no second
export) executes like the model and like the FlatIR of a direct export, with the same weight-name mapping, and
every node links to a node of the module-level IR it was lowered from."""

from __future__ import annotations

import pytest
import torch

import ir2torch
import torch2ir
from common.errors import ConversionError
from common.safety import Allowlist
from tests.helpers import max_abs_diff
from tests.real.corpus import CORPUS, Arch
from tests.real.shared import converted, converters
from torch2ir.lowering.capture import lower_directly

pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")


def _run(rebuilder: ir2torch.Ir2Torch, flat, model, args, kwargs):
    module = rebuilder.convert(flat, model)
    with torch.no_grad():
        return module(*args, **kwargs)


@pytest.mark.parametrize("arch", CORPUS, ids=lambda a: a.name)
def test_flat_from_the_capture_runs_like_the_model_and_the_direct_lowering(arch: Arch) -> None:
    shared = converted(arch)  # the eval-mode model and its IR, converted once (see shared.py)
    model, ir = shared.model, shared.ir
    args, kwargs = arch.inputs()
    pair = converters(arch)
    converter, rebuilder = pair["converter"], pair["rebuilder"]
    if ir.capture.refused is not None:  # a whole-model leaf (no export): refused by name, lowered directly instead
        with pytest.raises(ConversionError, match="cannot be lowered"):
            ir.lower()
        flat = torch2ir.lower(model, args, kwargs, converter=converter)
        with torch.no_grad():
            assert max_abs_diff(model(*args, **kwargs), _run(rebuilder, flat, model, args, kwargs)) <= 1e-5
        return
    flat = ir.lower()
    direct = lower_directly(model, args, kwargs, decompose=False, dynamic_shapes=None,
                            allowlist=Allowlist().extended(arch.allow))
    assert flat.weight_name_mapping == direct.weight_name_mapping
    assert flat.meta == direct.meta
    with torch.no_grad():
        expected = model(*args, **kwargs)
    got, got_direct = _run(rebuilder, flat, model, args, kwargs), _run(rebuilder, direct, model, args, kwargs)
    assert max_abs_diff(expected, got) <= 1e-5
    assert max_abs_diff(got_direct, got) <= 1e-5
    # every op links to the IR node it came from, and that node exists
    unlinked = [n.name for n in flat.nodes if n.source is None]
    assert not unlinked, unlinked[:10]
    for (key, node, variant), names in flat.lowered_from().items():
        assert node in ir[key].graphs()[variant].graph, (key, node, variant, names)
