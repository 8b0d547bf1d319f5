import pytest
import torch
from torch import nn

import ir2torch
from common import IR
from common.errors import HandlerNotFoundError, StateDictError
from tests.seed import seed_dict


def _converter():
    conv = ir2torch.get_default_converter()
    conv.register("custom_linear", lambda impl: nn.Linear(impl.data["in_features"], impl.data["out_features"],
                                                          bias=impl.data["bias"]))
    return conv




def test_seed_rebuild_matches_linear(tmp_path):
    reference = nn.Linear(1, 2)
    path = IR.from_dict(seed_dict()).save(tmp_path / "seed.json")
    state = {f"0.{k}": v for k, v in reference.state_dict().items()}
    model = _converter().convert(path, state)
    assert isinstance(model.get_submodule("0"), nn.Linear)
    assert [n for n, _ in model.named_modules()] == ["", "0"]
    x = torch.randn(7, 1)
    assert torch.equal(model(x), reference(x))


def test_seed_without_builder_names_type_and_how_to_register():
    with pytest.raises(HandlerNotFoundError, match="no builder for type 'custom_linear'") as info:
        ir2torch.convert(seed_dict())
    assert info.value.implementation == "0" and "register" in str(info.value)


def test_state_dict_mismatch_lists_every_key():
    with pytest.raises(StateDictError) as info:
        _converter().convert(seed_dict(), {"0.weight": torch.zeros(3, 1), "extra": torch.zeros(1)})
    message = str(info.value)
    assert "0.weight: expected shape (2, 1), found (3, 1)" in message
    assert "0.bias: missing" in message and "extra: unexpected" in message


def test_registering_on_one_converter_leaves_others_alone():
    mine = _converter()
    assert "custom_linear" in mine.builders
    assert "custom_linear" not in ir2torch.get_default_converter().builders


def test_meta_rebuild_allocates_no_storage():
    model = _converter().convert(seed_dict(), device="meta")
    assert all(p.is_meta for p in model.parameters())
