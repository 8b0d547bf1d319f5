import pytest

from common.errors import DuplicateHandlerError, HandlerNotFoundError
from common.registry import Registry


def test_register_refuses_duplicate_and_override_refuses_missing():
    reg = Registry("IR type")

    @reg.register("linear")
    def a(impl):
        return "a"

    with pytest.raises(DuplicateHandlerError, match="already has a handler"):
        reg.register("linear", lambda impl: "b")
    expected = "(?s)no handler to override for IR type 'lineer'.*nearest known: linear"
    with pytest.raises(HandlerNotFoundError, match=expected):
        reg.register_override("lineer", lambda impl: "b")
    assert reg.get("linear")(None) == "a"


def test_missing_lookup_lists_nearest_keys():
    reg = Registry("IR type")
    for key in ("conv1d", "conv2d", "linear"):
        reg.register(key, lambda impl, key=key: key)
    with pytest.raises(HandlerNotFoundError) as info:
        reg.get("conv2")
    assert "conv2d" in str(info.value) and "conv1d" in str(info.value)
    assert isinstance(info.value, LookupError)


def test_scoped_overrides_match_only_their_paths_latest_first():
    reg = Registry()
    reg.register("linear", lambda: "base")
    reg.register_override("linear", lambda: "encoder", where="encoder.layer.*")
    reg.register_override("linear", lambda: "layer1", where=lambda p: p.startswith("encoder.layer.1."))
    assert reg.get("linear", "encoder.layer.0.dense")() == "encoder"
    assert reg.get("linear", "encoder.layer.1.dense")() == "layer1"
    assert reg.get("linear", "decoder.dense")() == "base"
    assert reg.get("linear")() == "base"
    reg.register_override("linear", lambda: "global")
    assert reg.get("linear", "encoder.layer.0.dense")() == "global"


def test_copies_are_independent():
    reg = Registry()
    reg.register("a", lambda: 1)
    other = reg.copy()
    other.register("b", lambda: 2)
    other.register_override("a", lambda: 3)
    assert "b" not in reg and reg.get("a")() == 1 and other.get("a")() == 3


def test_class_keys_name_the_class():
    class Linear:  # a user class that merely shares a name
        pass

    import torch.nn as nn

    reg = Registry("module class")
    reg.register(nn.Linear, lambda m: {})
    assert Linear not in reg
    with pytest.raises(HandlerNotFoundError, match="test_class_keys_name_the_class.<locals>.Linear"):
        reg.get(Linear)
