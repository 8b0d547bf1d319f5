"""State given to a rebuild is checked against the IR's own records: sidecar tensors, state dicts, strict, aliases."""

from __future__ import annotations

import hashlib
import json

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

import ir2torch
import torch2ir
from common import IR, load_safetensors, save_safetensors
from common.errors import IRError, IRFormatError, StateDictError, UnsafeNameError
from tests.helpers import converted


class WithTable(nn.Module):
    """An embedding, a linear layer and a non-persistent int64 buffer kept in the IR's sidecar."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.lin = nn.Linear(4, 4)
        self.register_buffer("ids", torch.tensor([1, 2, 3, 4]), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(self.emb(self.ids)) + x


def _case() -> tuple[nn.Module, torch.Tensor, IR]:
    torch.manual_seed(0)
    model = WithTable().eval()
    x = torch.randn(4, 4)
    return model, x, torch2ir.convert(model, (x,))


def _rewrite_sidecar(path, tensors: dict[str, torch.Tensor]) -> None:
    """Replace the sidecar of the IR saved at ``path`` by ``tensors`` and make the JSON agree with it (keys and
    hash): a consistent pair crafted by whoever wrote both files, which only the state checks can refuse."""
    doc = json.loads(path.read_text())
    sidecar = path.with_name(doc["tensors"]["file"])
    save_file(tensors, str(sidecar))
    doc["tensors"]["keys"] = sorted(tensors)
    doc["tensors"]["sha256"] = hashlib.sha256(sidecar.read_bytes()).hexdigest()
    path.write_text(json.dumps(doc))


def test_the_sidecar_round_trips_untouched(tmp_path):
    model, x, ir = _case()
    assert sorted(ir.tensors) == ["ids"]
    ir.save(tmp_path / "m.ir.json")
    rebuilt = ir2torch.convert(tmp_path / "m.ir.json", model.state_dict())
    assert torch.equal(rebuilt.ids, model.ids) and torch.equal(rebuilt(x), model(x))


@pytest.mark.parametrize("bad", [torch.full((1000, 3), float("nan")), torch.tensor([1.0, 2.0, 3.0, 4.0]),
                                 torch.tensor([1, 2, 3])])
def test_a_sidecar_tensor_of_another_shape_or_dtype_is_refused(tmp_path, bad):
    model, _, ir = _case()
    path = ir.save(tmp_path / "m.ir.json")
    _rewrite_sidecar(path, {"ids": bad})
    with pytest.raises(IRError, match=r"ids: expected (shape \(4,\)|dtype torch.int64)") as info:
        ir2torch.convert(path, model.state_dict())
    assert info.value.key == "ids"


def test_a_sidecar_tensor_on_an_unrecorded_name_is_refused(tmp_path):
    model, x, ir = _case()
    path = ir.save(tmp_path / "m.ir.json")
    _rewrite_sidecar(path, {"ids": model.ids.clone(), "emb.forward": torch.zeros(2)})
    with pytest.raises(IRFormatError, match="emb.forward: no recorded state entry has this path"):
        ir2torch.convert(path, model.state_dict())
    # the same IR without the intruder rebuilds, and its embedding's forward is the method
    rebuilt = ir2torch.convert(ir, model.state_dict())
    assert rebuilt.emb.forward.__func__ is nn.Embedding.forward
    assert torch.equal(rebuilt(x), model(x))


def test_a_recorded_constant_may_not_shadow_a_method():
    model, _, ir = _case()
    ir["emb"].state["forward"] = {"kind": "constant", "shape": [2], "dtype": torch.float32}
    ir.tensors["emb.forward"] = torch.zeros(2)
    with pytest.raises(UnsafeNameError, match="state name 'forward' .* would shadow an attribute of nn.Module"):
        ir2torch.convert(ir, model.state_dict())
    assert nn.Embedding.forward.__name__ == "forward"


@pytest.mark.parametrize("path", ["lin.weight", "emb.weight"])
def test_the_sidecar_may_not_carry_parameters(path):
    model, _, ir = _case()
    ir.tensors[path] = model.state_dict()[path].clone()
    with pytest.raises(IRFormatError, match=f"{path}: the entry is a parameter"):
        ir2torch.convert(ir, model.state_dict())


def test_state_dict_tensors_must_match_the_records_even_through_a_state_map():
    model, _, ir = _case()
    conv = ir2torch.get_default_converter()
    seen = []

    def state_map(impl, chunk):
        seen.append(chunk)
        return chunk

    conv.register_override("linear", lambda impl: nn.Linear(**impl.data), state_map=state_map)
    state = dict(model.state_dict()) | {"lin.weight": torch.zeros(5, 4)}
    with pytest.raises(StateDictError, match=r"lin.weight: expected shape \(4, 4\), found \(5, 4\)"):
        conv.convert(ir, state)
    assert seen == []  # refused before the override's state map saw anything
    state = dict(model.state_dict()) | {"emb.weight": model.emb.weight.detach().double()}
    with pytest.raises(StateDictError, match="emb.weight: expected dtype torch.float32, found torch.float64"):
        conv.convert(ir, state)


def test_strict_refuses_every_unknown_key():
    model, _, ir = _case()
    extra = {"emb.forward": torch.zeros(1), "lin.extra": torch.zeros(2), "nowhere.weight": torch.zeros(3)}
    with pytest.raises(StateDictError) as info:
        ir2torch.convert(ir, {**model.state_dict(), **extra})
    for key in extra:
        assert f"{key}: unexpected key (no recorded state entry of the IR)" in str(info.value)
    assert "3 keys of the state dict are no recorded state entry" in str(info.value)


def test_non_strict_ignores_unknown_keys_and_never_sets_them():
    model, x, ir = _case()
    extra = {"emb.forward": torch.zeros(1), "lin.extra": torch.zeros(2), "training": torch.ones(1)}
    rebuilt = ir2torch.convert(ir, {**model.state_dict(), **extra}, strict=False)
    assert rebuilt.emb.forward.__func__ is nn.Embedding.forward
    assert not hasattr(rebuilt.lin, "extra") and rebuilt.training is False
    assert torch.equal(rebuilt(x), model(x))
    # missing entries stay as built (uninitialised), and are not reported
    partial = {k: v for k, v in model.state_dict().items() if k != "lin.bias"}
    assert ir2torch.convert(ir, partial, strict=False).lin.bias.shape == (4,)
    with pytest.raises(StateDictError, match="lin.bias: not in the state dict"):
        ir2torch.convert(ir, partial)


def test_non_persistent_values_passed_with_the_state_are_checked():
    model, x, ir = _case()
    ir.tensors.clear()  # as if converted on meta: the buffer's value comes with the state
    good = {**model.state_dict(), "ids": model.ids}
    assert torch.equal(ir2torch.convert(ir, good)(x), model(x))
    with pytest.raises(StateDictError, match=r"ids: expected dtype torch.int64, found torch.float32"):
        ir2torch.convert(ir, {**model.state_dict(), "ids": model.ids.float()})


def test_flat_ir_weights_are_checked_and_unknown_keys_never_attached():
    model, x, _ = _case()
    flat = torch2ir.lower(model, (x,))
    state = {**model.state_dict(), "emb.forward": torch.zeros(1)}
    with pytest.raises(StateDictError, match="emb.forward: unexpected"):
        ir2torch.convert(flat, state)
    rebuilt = ir2torch.convert(flat, state, strict=False)
    assert "emb.forward" not in rebuilt.state_dict() and not isinstance(getattr(rebuilt, "emb", None), torch.Tensor)
    assert torch.equal(rebuilt(x), model(x))
    assert torch.equal(ir2torch.convert(flat, model.state_dict())(x), model(x))  # every key the model had
    with pytest.raises(StateDictError, match=r"lin.weight: expected float32\[4, 4\], found float32\[4, 5\]"):
        ir2torch.convert(flat, {**model.state_dict(), "lin.weight": torch.zeros(4, 5)})
    missing = {k: v for k, v in model.state_dict().items() if k != "lin.bias"}
    with pytest.raises(StateDictError, match="lin.bias: missing"):
        ir2torch.convert(flat, missing)


@pytest.mark.parametrize("aliases", ['["a", "b"]', '{"b": ["a"]}', '{"b": {"k": 1}}', '"a"', "not json", "7",
                                     '{"": "a"}', '{"b": ' + "[" * 5000 + "]" * 5000 + "}",
                                     '{"b": ' + '{"k": ' * 5000 + "1" + "}" * 5000 + "}"])
def test_malformed_aliases_metadata_is_a_state_dict_error(tmp_path, aliases):
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(2)}, str(path), metadata={"torch2ir.aliases": aliases})
    with pytest.raises(StateDictError, match="malformed torch2ir.aliases"):
        load_safetensors(path)
    _, _, _, _, ir = converted("skip_connection")
    with pytest.raises(StateDictError):
        ir2torch.convert(ir, path)


def test_an_alias_may_not_replace_a_stored_tensor(tmp_path):
    path = tmp_path / "w.safetensors"
    save_file({"a": torch.zeros(2), "b": torch.ones(2)}, str(path), metadata={"torch2ir.aliases": '{"b": "a"}'})
    with pytest.raises(StateDictError, match="alias 'b' is also a stored tensor"):
        load_safetensors(path)
    saved = save_safetensors({"a": torch.ones(2)} | {"c": torch.zeros(1)}, tmp_path / "ok.safetensors")
    assert sorted(load_safetensors(saved)) == ["a", "c"]


def test_a_state_dict_error_lists_the_first_keys_of_each_kind_and_counts_the_rest() -> None:
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(30)])
    ir = torch2ir.convert(model, (torch.randn(2, 4),))
    renamed = {f"{k}x": v for k, v in model.state_dict().items()}
    with pytest.raises(StateDictError) as info:
        ir2torch.convert(ir, renamed)
    text = str(info.value)
    assert "60 entries of the IR are missing" in text and "60 keys of the state dict are no recorded" in text
    assert text.count("... and 54 more") == 2 and "0.weightx: unexpected key" in text
    assert len(text.splitlines()) < 20  # not 120 lines
