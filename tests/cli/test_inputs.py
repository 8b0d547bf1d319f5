"""--input, --kwargs/--config JSON and model factories, without subprocesses."""

from __future__ import annotations

import pytest
import torch

from common.cli.app import CommandError
from common.cli.inputs import InputSpec, make_inputs, parse_input, parse_json_option
from common.cli.model import build_model, load_factory


@pytest.mark.parametrize(
    ("text", "spec"),
    [
        ("2x3x32x32", InputSpec(None, (2, 3, 32, 32), torch.float32)),
        ("2x8:int64", InputSpec(None, (2, 8), torch.int64)),
        ("mask=2X8:int64:0..2", InputSpec("mask", (2, 8), torch.int64, 0.0, 2.0)),
        ("x=4:float16:-1..1", InputSpec("x", (4,), torch.float16, -1.0, 1.0)),
        ("scalar:bool", InputSpec(None, (), torch.bool)),
    ],
)
def test_parse_input(text, spec):
    assert parse_input(text) == spec


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2x", "is not sizes joined by 'x'"),
        ("2*3", "is not sizes joined by 'x'"),
        ("2x-3", "is not sizes joined by 'x'"),
        ("2x3:int64:0..2:x", "too many ':'"),
        ("2x3:floaty", "unknown dtype 'floaty'"),
        ("2x3:int64:5..1", "LOW..HIGH with LOW < HIGH"),
        ("2x3:int64:0.5..2", "must have integer bounds"),
        ("2x3:int64:a..b", "LOW..HIGH"),
        ("1bad=2x3", "is not a keyword name"),
    ],
)
def test_parse_input_errors(text, message):
    with pytest.raises(CommandError, match="cannot read --input") as info:
        parse_input(text)
    assert message in info.value.message and info.value.hint


def test_make_inputs_positional_keyword_ranges_and_meta():
    specs = [parse_input("2x8:int64"), parse_input("mask=2x8:int64:1..2"), parse_input("u=1000:float32:2..3")]
    args, kwargs = make_inputs(specs, seed=3, vocab=5, extra={"flag": True})
    assert len(args) == 1 and args[0].dtype == torch.int64 and args[0].min() >= 0 and args[0].max() < 5
    assert torch.equal(kwargs["mask"], torch.ones(2, 8, dtype=torch.int64))
    assert kwargs["u"].min() >= 2 and kwargs["u"].max() < 3 and kwargs["flag"] is True
    again, _ = make_inputs(specs, seed=3, vocab=5)
    assert torch.equal(args[0], again[0])  # seeded
    (meta,), _ = make_inputs([parse_input("2x3")], meta=True)
    assert meta.is_meta and meta.shape == (2, 3)
    with pytest.raises(CommandError, match="given twice"):
        make_inputs([parse_input("a=2"), parse_input("a=3")])
    with pytest.raises(CommandError, match="by --input and by --kwargs"):
        make_inputs([parse_input("a=2")], extra={"a": 1})


def test_json_options(tmp_path):
    assert parse_json_option(None, "--config") == {}
    assert parse_json_option('{"a": [1, 2]}', "--config") == {"a": [1, 2]}
    path = tmp_path / "c.json"
    path.write_text('{"layers": 2}', encoding="utf-8")
    assert parse_json_option(f"@{path}", "--config") == {"layers": 2}
    with pytest.raises(CommandError, match="cannot read --config file"):
        parse_json_option(f"@{tmp_path / 'missing.json'}", "--config")


def test_factories_by_module_path_and_by_file(tmp_path):
    assert load_factory("tests.models.zoo:ConvNet").__name__ == "ConvNet"
    assert load_factory("torch.nn:Linear") is torch.nn.Linear
    script = tmp_path / "my_models.py"
    script.write_text("import torch\ndef tiny(width=3):\n    return torch.nn.Linear(width, 2)\n", encoding="utf-8")
    model = build_model(f"{script}:tiny", config={"width": 5})
    assert isinstance(model, torch.nn.Linear) and model.in_features == 5 and not model.training
    assert build_model("torch.nn:Linear", config={"in_features": 4, "out_features": 2}, meta=True).weight.is_meta
    first = build_model("torch.nn:Linear", config={"in_features": 4, "out_features": 2}, seed=7)
    second = build_model("torch.nn:Linear", config={"in_features": 4, "out_features": 2}, seed=7)
    assert torch.equal(first.weight, second.weight)
    with pytest.raises(CommandError, match="did you mean ConvNet"):
        load_factory("tests.models.zoo:ConvNett")
    with pytest.raises(CommandError, match="no such file"):
        load_factory(f"{tmp_path / 'none.py'}:f")


def test_hf_model_from_a_config_name():
    model = build_model("bert", hf=True, config={"num_hidden_layers": 1, "hidden_size": 32, "num_attention_heads": 2,
                                                   "intermediate_size": 64, "vocab_size": 50})
    assert type(model).__name__ == "BertModel" and len(model.encoder.layer) == 1
    assert model.config.use_cache is False and model.config._attn_implementation == "eager"
    with pytest.raises(CommandError, match="did you mean bert"):
        build_model("berta", hf=True)
