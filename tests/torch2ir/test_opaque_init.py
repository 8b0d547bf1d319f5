"""Opaque leaves holding what an IR cannot record as a value (a configuration object, a function): the module is
constructed again from its recorded constructor arguments, which conversion checks by constructing one from the
recorded form and comparing; anything the construction does not reproduce is refused by name. Hostile ``init``
fields in a file are refused with an IRError, nothing imported."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import ConversionError, IRError

NEVER = "this"  # a standard-library module no test imports


class TinyConfig:
    """A configuration class as transformers' are: ``to_dict`` / ``from_dict``, private state set after."""

    def __init__(self, width: int = 4, gain: float = 1.0, labels: dict | None = None) -> None:
        self.width, self.gain = width, gain
        self.labels = {int(k): v for k, v in (labels or {}).items()}  # int keys, as transformers' id2label
        self._impl = "eager"

    def to_dict(self) -> dict[str, Any]:
        return {"width": self.width, "gain": self.gain, "labels": dict(self.labels)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TinyConfig:
        return cls(**d)


def _double(x: torch.Tensor) -> torch.Tensor:
    return 2 * x


class Configured(nn.Module):
    """A data-dependent branch, a config object, a function attribute, a child and a parameter."""

    def __init__(self, config: TinyConfig, layer: int = 0) -> None:
        super().__init__()
        self.config, self.layer = config, layer
        self.act = _double
        self.lin = nn.Linear(config.width, config.width)
        self.bias = nn.Parameter(torch.zeros(config.width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.act(self.lin(x)) * self.config.gain + self.bias + self.layer
        return x - self.layer


class Outer(nn.Module):
    def __init__(self, config: TinyConfig) -> None:
        super().__init__()
        self.block = Configured(config, layer=3)
        self.head = nn.Linear(config.width, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


CLASS = f"{__name__}.Configured"
X = torch.randn(2, 4).abs()


def _model(**config: Any) -> Outer:
    torch.manual_seed(0)
    cfg = TinyConfig(gain=0.5, labels={0: "a", 1: "b"}, **config)
    cfg._impl = "sdpa"  # private state set after construction, as transformers' _attn_implementation
    return Outer(cfg).eval()


def test_a_module_with_a_config_is_constructed_again_and_runs_exactly(tmp_path) -> None:
    model = _model()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    data = ir["block"].data
    assert data["attributes"] == {"layer": 3} and set(data["init"]) == {"config", "layer"}
    assert data["init"]["config"]["$config"] == {"class": f"{__name__}.TinyConfig", "private": {"_impl": "sdpa"},
                                                 "values": {"gain": 0.5, "labels": {"0": "a", "1": "b"}, "width": 4}}
    ir.save(tmp_path / "m.ir.json")
    rebuilt = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), model.state_dict(), allow=[CLASS])
    block = rebuilt.block
    assert type(block) is Configured and block.config._impl == "sdpa" and block.config.labels == {0: "a", 1: "b"}
    assert block.act is _double and block.layer == 3
    for x in (X, -X):  # both branches of its own forward
        assert torch.equal(rebuilt(x), model(x))
    assert torch2ir.convert(rebuilt, (X,), opaque="auto") == ir


def test_an_attribute_the_construction_does_not_reproduce_is_refused_by_name() -> None:
    model = _model()
    model.block.act = torch.tanh  # changed after construction: constructing it again would give _double
    with pytest.raises(ConversionError, match=r"attribute 'act' .* does not reproduce it"):
        torch2ir.convert(model, (X,), opaque="auto")
    model = _model()
    model.block.config = TinyConfig(width=4, gain=9.0)  # no longer the config its parameters were made with
    model.block.lin2 = nn.Linear(4, 4)  # a child the constructor does not make
    # constructing it again would differ: its attributes are recorded as they are instead (configs, objects)
    ir = torch2ir.convert(model, (X,), opaque="auto")
    assert "init" not in ir["block"].data and ir["block"].data["configs"]["config"]["$config"]["values"]["gain"] == 9
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[CLASS])
    assert rebuilt.block.config.gain == 9.0 and torch.equal(rebuilt(X), model(X))


class NoKeep(Configured):
    """Takes an argument it does not keep: it cannot be constructed again from what it holds."""

    def __init__(self, config: TinyConfig, secret: int) -> None:
        super().__init__(config)


def test_a_required_argument_the_module_does_not_keep_records_its_attributes_instead() -> None:
    model = Outer(TinyConfig())
    model.block = NoKeep(TinyConfig(), secret=1)
    ir = torch2ir.convert(model.eval(), (X,), opaque=[NoKeep])
    data = ir["block"].data  # its config set as an attribute, its function attribute named
    assert "init" not in data and set(data["configs"]) == {"config"}
    assert data["objects"] == {"act": {"function": f"{__name__}._double"}}
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=[f"{__name__}.NoKeep"])
    assert rebuilt.block.act is _double and torch.equal(rebuilt(X), model(X)) and torch.equal(rebuilt(-X), model(-X))
    model.block.act = lambda x: x  # a function an IR cannot name: refused
    with pytest.raises(ConversionError, match="takes 'secret'"):
        torch2ir.convert(model.eval(), (X,), opaque=[NoKeep])


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[dict, dict]:
    model = _model()
    path = tmp_path_factory.mktemp("init") / "m.json"
    torch2ir.convert(model, (X,), opaque="auto").save(path)
    return json.loads(path.read_text()), model.state_dict()


def _refused(tmp_path, doc: dict, state: dict, edit: Any) -> IRError:
    doc = json.loads(json.dumps(doc))
    init = doc["implementations"]["block"]["init"]
    (tag, config), = init["config"]["$dict"]  # a key starting with "$" is written as {"$dict": [[key, value]]}
    assert tag == "$config"
    edit(init, config)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    before = set(sys.modules)
    with pytest.raises(IRError) as info:
        ir2torch.convert(path, state, allow=[CLASS])
    assert NEVER not in sys.modules and not {m for m in set(sys.modules) - before if m.startswith(NEVER)}
    return info.value


@pytest.mark.parametrize("edit", [
    lambda init, config: config.update({"class": f"{NEVER}.Zen"}),  # another package: not allowed
    lambda init, config: config.update({"class": "os.system"}),
    lambda init, config: config.update({"class": "builtins.eval"}),
    lambda init, config: config.update({"class": "not a name"}),
    lambda init, config: config["private"].update({"__class__": 1}),
    lambda init, config: config["private"].update({"public": 1}),
    lambda init, config: config.update({"extra": 1}),
    lambda init, config: config.update({"values": [1, 2]}),
    lambda init, config: config["values"].update({"deep": [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}),
    lambda init, config: init.update({"__init__": 1}),
    lambda init, config: init.update({"forward": 1}),
    lambda init, config: init.update({"x": {"$dict": [["$other", 1]]}}),
], ids=["never", "os.system", "eval", "not-a-name", "dunder-private", "public-private", "extra-field", "values-list",
        "deep", "dunder-argument", "forward", "unknown-tag"])
def test_hostile_init_fields_are_refused(tmp_path, saved, edit) -> None:
    doc, state = saved
    _refused(tmp_path, doc, state, edit)


class Indexed(nn.Module):
    """Holds only a config besides plain values and takes a ``layer_idx`` it does not keep (as LFM3-VL's vision
    attention): it cannot be constructed again, so its config is recorded as an attribute (``configs``)."""

    def __init__(self, config: TinyConfig, layer_idx: int) -> None:
        super().__init__()
        self.config = config
        self.scale = 1.0 + layer_idx
        self.lin = nn.Linear(config.width, config.width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.sum() > 0:
            return self.lin(x) * self.config.gain * self.scale
        return x


class HasIndexed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        config = TinyConfig(gain=0.5)
        config._impl = "sdpa"
        self.block = Indexed(config, layer_idx=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x) + 1


INDEXED = f"{__name__}.Indexed"


def _indexed() -> HasIndexed:
    torch.manual_seed(0)
    return HasIndexed().eval()


def test_a_module_that_cannot_be_constructed_again_keeps_its_config_as_an_attribute(tmp_path) -> None:
    model = _indexed()
    ir = torch2ir.convert(model, (X,), opaque="auto")
    data = ir["block"].data
    assert "init" not in data and data["attributes"] == {"scale": 3.0}
    assert data["configs"]["config"]["$config"] == {"class": f"{__name__}.TinyConfig", "private": {"_impl": "sdpa"},
                                                    "values": {"gain": 0.5, "labels": {}, "width": 4}}
    ir.save(tmp_path / "m.ir.json")
    rebuilt = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), model.state_dict(), allow=[INDEXED])
    block = rebuilt.block
    assert type(block) is Indexed and type(block.config) is TinyConfig and block.config._impl == "sdpa"
    for x in (X, -X):
        assert torch.equal(rebuilt(x), model(x))
    assert torch2ir.convert(rebuilt, (X,), opaque="auto") == ir


@pytest.fixture(scope="module")
def saved_configs(tmp_path_factory) -> tuple[dict, dict]:
    model = _indexed()
    path = tmp_path_factory.mktemp("configs") / "m.json"
    torch2ir.convert(model, (X,), opaque="auto").save(path)
    return json.loads(path.read_text()), model.state_dict()


def _config_of(configs: dict) -> dict:
    (tag, config), = configs["config"]["$dict"]
    assert tag == "$config"
    return config


@pytest.mark.parametrize("edit", [
    lambda block: _config_of(block["configs"]).update({"class": f"{NEVER}.Zen"}),
    lambda block: _config_of(block["configs"]).update({"class": "os.system"}),
    lambda block: _config_of(block["configs"]).update({"class": "not a name"}),
    lambda block: _config_of(block["configs"])["private"].update({"__class__": 1}),
    lambda block: block["configs"].update({"plain": 1}),
    lambda block: block["configs"].update({"__class__": block["configs"]["config"]}),
    lambda block: block["configs"].update({"forward": block["configs"]["config"]}),
    lambda block: block["configs"].update({"train": block["configs"]["config"]}),  # would shadow a method
    lambda block: block["configs"].update({"scale": block["configs"]["config"]}),  # also an attribute
    lambda block: block.update({"configs": [1]}),
    lambda block: block.update({"init": {}}),  # init and configs together
], ids=["never", "os.system", "not-a-name", "dunder-private", "not-a-config", "dunder-name", "forward", "shadows",
        "clash", "not-a-mapping", "with-init"])
def test_hostile_configs_fields_are_refused(tmp_path, saved_configs, edit) -> None:
    doc, state = saved_configs
    doc = json.loads(json.dumps(doc))
    edit(doc["implementations"]["block"])
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    before = set(sys.modules)
    with pytest.raises(IRError):
        ir2torch.convert(path, state, allow=[INDEXED])
    assert NEVER not in sys.modules and not {m for m in set(sys.modules) - before if m.startswith(NEVER)}


class StrictConfig(TinyConfig):
    """Refuses what its own to_dict gives (as a transformers config with a validator the shrunk values fail)."""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StrictConfig:
        raise ValueError("`mrope_section` must have three entries")


def test_a_configuration_that_does_not_load_back_is_refused_by_name() -> None:
    model = Outer(StrictConfig())
    with pytest.raises(ConversionError, match=r"'config' .* does not load back from its to_dict\(\) \(ValueError"):
        torch2ir.convert(model.eval(), (X,), opaque="auto")


class BoxCoder:
    """A plain helper object (as torchvision's detection helpers): made in a module's constructor from an
    argument the module does not keep."""

    def __init__(self, weights: tuple[float, float]) -> None:
        self.weights = weights
        self.clip = 4.0

    def decode(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.weights[0]).clamp(max=self.clip)


class Proposals(nn.Module):
    def __init__(self, fg_iou_thresh: float) -> None:
        super().__init__()
        self.box_coder = BoxCoder((fg_iou_thresh, 1.0))
        self.similarity = _double  # a module-level function (as torchvision's box_iou)
        self.conv = nn.Conv2d(1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kept = self.conv(x).flatten()
        kept = kept[kept > 0]
        return self.similarity(self.box_coder.decode(kept)).sum() if kept.numel() > 4 else kept.sum()


class Detector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rpn = Proposals(0.7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rpn(x) * 2


PROPOSALS = f"{__name__}.Proposals"
IMAGE = torch.randn(1, 1, 4, 4)


def test_plain_helper_objects_are_recorded_and_made_again_without_their_constructor(tmp_path) -> None:
    torch.manual_seed(0)
    model = Detector().eval()
    ir = torch2ir.convert(model, (IMAGE,), opaque="auto")
    data = ir["rpn"].data
    assert "init" not in data and data["objects"] == {
        "box_coder": {"class": f"{__name__}.BoxCoder", "attributes": {"weights": (0.7, 1.0), "clip": 4.0}},
        "similarity": {"function": f"{__name__}._double"}}
    ir.save(tmp_path / "m.ir.json")
    rebuilt = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), model.state_dict(), allow=[PROPOSALS])
    assert type(rebuilt.rpn.box_coder) is BoxCoder and rebuilt.rpn.box_coder.weights == (0.7, 1.0)
    assert rebuilt.rpn.similarity is _double
    for x in (IMAGE, -IMAGE, IMAGE * 3):
        assert torch.equal(rebuilt(x), model(x))
    assert torch2ir.convert(rebuilt, (IMAGE,), opaque="auto") == ir


@pytest.fixture(scope="module")
def saved_objects(tmp_path_factory) -> tuple[dict, dict]:
    torch.manual_seed(0)
    model = Detector().eval()
    path = tmp_path_factory.mktemp("objects") / "m.json"
    torch2ir.convert(model, (IMAGE,), opaque="auto").save(path)
    return json.loads(path.read_text()), model.state_dict()


def _box_coder(rpn: dict) -> dict:
    return rpn["objects"]["box_coder"]


@pytest.mark.parametrize("edit", [
    lambda rpn: _box_coder(rpn).update({"class": f"{NEVER}.Zen"}),  # another package, not allowed
    lambda rpn: _box_coder(rpn).update({"class": "os.system"}),
    lambda rpn: _box_coder(rpn).update({"class": "not a name"}),
    lambda rpn: _box_coder(rpn).update({"class": f"{__name__}.Configured"}),  # a module class
    lambda rpn: _box_coder(rpn).update({"class": f"{__name__}.TinyConfig", "attributes": {"to_dict": 1}}),
    lambda rpn: _box_coder(rpn)["attributes"].update({"__class__": 1}),
    lambda rpn: _box_coder(rpn)["attributes"].update({"decode": 1}),  # would shadow its method
    lambda rpn: _box_coder(rpn)["attributes"].update({"x": {"$ref": "y"}}),
    lambda rpn: _box_coder(rpn).update({"extra": 1}),
    lambda rpn: rpn["objects"].update({"__dict__": _box_coder(rpn)}),
    lambda rpn: rpn["objects"].update({"conv": _box_coder(rpn)}),  # also a child's name: shadows nothing? refused
    lambda rpn: rpn.update({"objects": [1]}),
    lambda rpn: rpn.update({"init": {}}),
    lambda rpn: rpn["objects"].update({"similarity": {"function": "os.system"}}),
    lambda rpn: rpn["objects"].update({"similarity": {"function": f"{__name__}.TinyConfig"}}),  # a class
    lambda rpn: rpn["objects"].update({"similarity": {"function": f"{__name__}.NEVER"}}),  # a string constant
    lambda rpn: rpn["objects"].update({"similarity": {"function": "builtins.eval"}}),
    lambda rpn: rpn["objects"].update({"similarity": {"function": "not a name"}}),
    lambda rpn: rpn["objects"].update({"similarity": {"function": f"{__name__}._double", "x": 1}}),
], ids=["never", "os.system", "not-a-name", "module-class", "shadows-config-method", "dunder", "shadows-method",
        "not-plain", "extra-field", "dunder-name", "child-name", "not-a-mapping", "with-init", "fn-os.system",
        "fn-class", "fn-constant", "fn-eval", "fn-not-a-name", "fn-extra-field"])
def test_hostile_objects_fields_are_refused(tmp_path, saved_objects, edit) -> None:
    doc, state = saved_objects
    doc = json.loads(json.dumps(doc))
    edit(doc["implementations"]["rpn"])
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(doc))
    before = set(sys.modules)
    with pytest.raises(IRError):
        ir2torch.convert(path, state, allow=[PROPOSALS])
    assert NEVER not in sys.modules and not {m for m in set(sys.modules) - before if m.startswith(NEVER)}
