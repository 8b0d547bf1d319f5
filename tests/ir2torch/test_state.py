"""Loading state into rebuilt models: safetensors with ties, meta + assign, remapping, errors."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

import ir2torch
from common import load_safetensors, remap_state_dict, save_safetensors
from common.errors import StateDictError
from common.rewrite import rename_implementation
from tests.helpers import converted, max_abs_diff


def test_tied_state_saves_to_safetensors_where_plain_save_file_refuses(tmp_path):
    _, model, *_ = converted("gpt2")
    with pytest.raises(RuntimeError):  # the reason this helper exists
        save_file(model.state_dict(), str(tmp_path / "plain.safetensors"))
    path = save_safetensors(model.state_dict(), tmp_path / "gpt2.safetensors")
    loaded = load_safetensors(path)
    assert sorted(loaded) == sorted(model.state_dict())
    assert loaded["lm_head.weight"] is loaded["transformer.wte.weight"]
    for key, value in model.state_dict().items():
        assert torch.equal(loaded[key], value), key


@pytest.mark.parametrize("name", ["gpt2", "bert", "conv_net", "shared_sequential"])
def test_meta_rebuild_plus_safetensors_equals_dict_load(tmp_path, name):
    _, model, args, kwargs, ir = converted(name)
    path = save_safetensors(model.state_dict(), tmp_path / "state.safetensors")
    from_file = ir2torch.convert(ir, path, device="meta")
    from_dict = ir2torch.convert(ir, model.state_dict())
    assert not any(t.is_meta for t in from_file.state_dict().values())
    assert not any(b.is_meta for _, b in from_file.named_buffers())
    with torch.no_grad():
        expected = model(*args, **kwargs)
        assert max_abs_diff(expected, from_file(*args, **kwargs)) == 0.0
        assert max_abs_diff(expected, from_dict(*args, **kwargs)) == 0.0
    if name == "gpt2":
        assert from_file.lm_head.weight is from_file.transformer.wte.weight


def test_meta_rebuild_without_state_allocates_nothing():
    _, _, _, _, ir = converted("bert")
    model = ir2torch.convert(ir, device="meta")
    assert all(p.is_meta for p in model.parameters())
    assert all(b.is_meta for b in model.buffers())


def _state_error(ir, state, **kw):
    with pytest.raises(StateDictError) as info:
        ir2torch.convert(ir, state, **kw)
    return str(info.value)


def test_every_mismatch_is_listed_with_expected_and_found():
    _, model, _, _, ir = converted("skip_connection")
    state = dict(model.state_dict())
    keys = list(state)
    state[keys[0]] = torch.zeros(3, 3)  # wrong shape
    state[keys[1]] = state[keys[1]].double()  # wrong dtype
    message = _state_error(ir, state)
    assert f"{keys[0]}: expected shape {tuple(model.state_dict()[keys[0]].shape)}, found (3, 3)" in message
    assert f"{keys[1]}: expected dtype torch.float32, found torch.float64" in message


def test_missing_entries_name_the_keys_tried():
    _, model, _, _, ir = converted("skip_connection")
    state = dict(model.state_dict())
    gone = next(iter(state))
    del state[gone]
    message = _state_error(ir, state)
    assert f"{gone}: not in the state dict (tried {gone})" in message


def test_unexpected_keys_are_refused_only_when_strict():
    _, model, args, _, ir = converted("skip_connection")
    state = dict(model.state_dict()) | {"extra.weight": torch.zeros(1)}
    rebuilt = ir2torch.convert(ir, remap_state_dict(state, ir) | {"extra.weight": torch.zeros(1)}, strict=False)
    assert torch.equal(rebuilt(*args), model(*args))
    from ir2torch.rebuild.state import load_into  # direct: the remap already dropped 'extra.weight'

    with pytest.raises(StateDictError, match="extra.weight: unexpected key"):
        load_into(rebuilt, _no_state_ir(), state, {}, strict=True, retie=lambda: None)


def _no_state_ir():
    from common import IR
    from tests.seed import seed_dict

    return IR.from_dict(seed_dict())


@pytest.mark.parametrize(("content", "message"), [(None, "no such state file"), (b"garbage", "cannot read")])
def test_bad_state_files(tmp_path, content, message):
    _, _, _, _, ir = converted("skip_connection")
    path = tmp_path / "state.safetensors"
    if content is not None:
        path.write_bytes(content)
    assert message in _state_error(ir, path)


def test_remap_after_rename_and_removal():
    _, model, args, _, ir = converted("unused_and_identity")
    unused = [k for k, impl in ir.items() if k != "root" and not _called(ir, k) and impl.state]
    assert unused, "the zoo model has an unused module with parameters"
    from common import IR
    from common.serialize import ir_from_document, ir_to_document

    copy = ir_from_document(ir_to_document(ir))
    for key in unused:
        del copy[key]
    called = next(k for k, impl in copy.items() if k != "root" and impl.state)
    rename_implementation(copy, called, called + "_renamed")
    remapped = remap_state_dict(model.state_dict(), copy)
    assert not any(k.startswith(tuple(u + "." for u in unused)) for k in remapped)
    assert any(k.startswith(called + "_renamed.") for k in remapped)
    with pytest.raises(StateDictError, match="unexpected key") as info:  # strict: the removed modules' keys
        ir2torch.convert(copy, model.state_dict())
    assert all(f"{u}.weight: unexpected key" in str(info.value) for u in unused)
    rebuilt = ir2torch.convert(copy, remapped)  # the remap keeps only the rewritten IR's entries
    assert torch.equal(rebuilt(*args), model(*args))
    assert torch.equal(ir2torch.convert(copy, model.state_dict(), strict=False)(*args), model(*args))
    assert isinstance(copy, IR)


def _called(ir, key):
    return any(attrs.get("implementation") == key for impl in ir.values() for _, attrs in impl.graph.nodes(data=True))


def test_a_failing_state_map_names_its_implementation():
    _, model, _, _, ir = converted("skip_connection")
    conv = ir2torch.get_default_converter()

    def broken(impl, state):
        raise ValueError("no scale for you")

    conv.register_override("linear", lambda impl: torch.nn.Linear(**impl.data), state_map=broken)
    with pytest.raises(StateDictError, match="state_map of the override failed: ValueError: no scale") as info:
        conv.convert(ir, model.state_dict())
    assert info.value.implementation in ir and ir[info.value.implementation].type == "linear"
