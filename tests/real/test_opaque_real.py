"""``opaque="auto"`` on real models torch.export cannot trace (tests/real/corpus.py UNSUPPORTED): transformers'
modules keep their config object as an attribute, which an opaque leaf cannot record, so the conversion is refused
naming that attribute and the module (not silently rebuilt without it)."""

from __future__ import annotations

import pytest

import torch2ir
from common.errors import ConversionError
from tests.real.corpus import UNSUPPORTED

_MODULES = {
    "longformer": ("encoder.layer.0.attention.self",
                   "transformers.models.longformer.modeling_longformer.LongformerSelfAttention"),
    "mixtral_eager": ("model.layers.0.mlp.experts", "transformers.models.mixtral.modeling_mixtral.MixtralExperts"),
}


@pytest.mark.parametrize("arch", [a for a in UNSUPPORTED if a.name in _MODULES], ids=lambda a: a.name)
def test_auto_finds_the_module_and_names_the_attribute_it_cannot_record(arch) -> None:
    path, qualname = _MODULES[arch.name]
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    with pytest.raises(ConversionError, match=rf"the opaque leaf {path} \({qualname}\) holds attribute 'config'"):
        torch2ir.convert(model, args, kwargs, opaque="auto")
