"""Executing FlatIRs lowered from meta copies of real models, with the real weights."""

from __future__ import annotations

import pytest
import torch
from torch import fx

import ir2torch
from common import save_safetensors, verify
from common.errors import StateDictError
from tests.flat.cases import MODEL_NAMES, built, full_state, lowered
from tests.helpers import max_abs_diff


@pytest.mark.parametrize("decompose", [False, True], ids=["aten", "core_aten"])
@pytest.mark.parametrize("name", MODEL_NAMES)
def test_flat_module_reproduces_the_original(name, decompose):
    b = built(name)
    flat = lowered(name, decompose)
    module = ir2torch.convert(flat, full_state(b.model))
    assert isinstance(module, fx.GraphModule)
    with torch.no_grad():
        out = module(*b.args, **b.kwargs)
    assert max_abs_diff(b.expected, out) <= 1e-5  # also asserts the same type and pytree structure
    assert flat.meta["decomposition"] == ("core_aten" if decompose else "none")
    assert flat.meta["device"] == "meta"
    # the module is an fx graph of the FlatIR's ops, one call per node, in order
    calls = [n.meta["op_type"] for n in module.graph.nodes if "flat_node" in n.meta]
    assert calls == [n.op_type for n in flat.nodes]


@pytest.mark.parametrize("name", ["bert", "resnet", "lstm"])
def test_common_verify_accepts_the_flat_module(name):
    b = built(name)
    module = ir2torch.convert(lowered(name), full_state(b.model))
    report = verify(b.model, module, b.args, b.kwargs)
    assert report.ok, str(report)
    assert report.max_abs_diff <= 1e-5
    # the flat module has no submodule calls to pair with the original's: only the root call is compared
    assert report.calls_compared == 1
    assert report.first_divergence is None


def test_state_from_a_safetensors_file_with_tied_weights(tmp_path):
    b = built("gpt2")
    flat = lowered("gpt2")
    assert b.model.lm_head.weight is b.model.transformer.wte.weight
    path = save_safetensors(b.model.state_dict(), tmp_path / "gpt2.safetensors")
    module = ir2torch.convert(flat, path)
    with torch.no_grad():
        assert max_abs_diff(b.expected, module(*b.args, **b.kwargs)) <= 1e-5
    # GPT-2 has no non-persistent state: the file alone suffices, and it is memory-mapped, not copied into RAM
    assert all(b.model.state_dict()[k].shape == v.shape for k, v in module.state_dict().items())


def test_state_from_the_original_model_includes_non_persistent_buffers():
    b = built("llama")
    flat = lowered("llama")
    assert any(w.kind == "buffer" and w.persistent is False for w in flat.weights)  # rotary inv_freq
    module = ir2torch.convert(flat, b.model)
    with torch.no_grad():
        assert max_abs_diff(b.expected, module(*b.args, **b.kwargs)) <= 1e-5


def test_executed_module_has_the_original_state_dict_keys_and_values():
    b = built("bert")
    module = ir2torch.convert(lowered("bert"), full_state(b.model))
    original = b.model.state_dict()
    state = module.state_dict()
    assert set(state) <= set(original)
    for key, value in state.items():
        assert torch.equal(value, original[key]), key
    assert module.get_parameter("encoder.layer.0.attention.self.query.weight").requires_grad


def test_device_meta_allocates_nothing_and_runs_on_meta():
    flat = lowered("bert")
    module = ir2torch.convert(flat, device="meta")
    assert all(t.is_meta for t in module.state_dict().values())
    b = built("bert")
    ids, mask = b.args[0].to("meta"), b.kwargs["attention_mask"].to("meta")
    out = module(ids, attention_mask=mask)
    assert out.last_hidden_state.is_meta
    assert out.last_hidden_state.shape == b.expected.last_hidden_state.shape


def test_missing_weight_is_a_state_dict_error_naming_the_key():
    b = built("bert")
    state = full_state(b.model)
    del state["encoder.layer.1.output.dense.weight"]
    with pytest.raises(StateDictError, match=r"encoder\.layer\.1\.output\.dense\.weight: missing") as info:
        ir2torch.convert(lowered("bert"), state)
    assert info.value.key == "encoder.layer.1.output.dense.weight"


def test_non_persistent_buffers_missing_from_a_plain_state_dict_are_reported_with_a_hint():
    b = built("bert")
    with pytest.raises(StateDictError, match="embeddings.position_ids: missing") as info:
        ir2torch.convert(lowered("bert"), b.model.state_dict())
    assert "named_buffers" in str(info.value)
    assert "embeddings.token_type_ids: missing" in str(info.value)  # every problem is listed at once


def test_mis_shaped_weight_is_reported():
    b = built("resnet")
    state = full_state(b.model)
    key = next(k for k in state if k.endswith("convolution.weight"))
    state[key] = state[key][:1]
    with pytest.raises(StateDictError, match=f"{key}: expected float32"):
        ir2torch.convert(lowered("resnet"), state)


def test_non_strict_leaves_missing_weights_uninitialised():
    b = built("bert")
    state = full_state(b.model)
    del state["pooler.dense.bias"]
    module = ir2torch.convert(lowered("bert"), state, strict=False)
    assert module.get_parameter("pooler.dense.bias").shape == (64,)
