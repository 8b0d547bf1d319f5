"""PT2E across a handoff (issue 51, point 1): a rebuilt prepared model, calibrating (PTQ) or training (QAT),
finishes with ``convert_pt2e`` into the int8 model the original gives (X86 and XNNPACK quantizers); the record it
needs (``meta["pt2e_prepared"]``, :mod:`common.pt2e_prepared`) is checked on load; a fresh process loads a
converted PT2E file with no import of its own. The torchvision and timm models: tests/ecosystems/test_pt2e_handoff.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ir2torch
import torch2ir
from common import IR
from common.errors import IRError
from common.pt2e_prepared import PT2E_PREPARED_KEY
from tests.quant.pt2e_handoff import ALLOW, assert_finishes_alike
from tests.quant.pt2e_stages import quantizer
from tests.quant.test_pt2e import ConvNet, X, _quantized

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
ROOT = Path(__file__).resolve().parents[2]


def _prepared(name: str, qat: bool) -> torch.nn.Module:
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e, prepare_qat_pt2e

    torch.manual_seed(0)
    graph = torch.export.export(ConvNet().train(qat), (X,)).module()
    model = (prepare_qat_pt2e if qat else prepare_pt2e)(graph, quantizer(name, qat))
    model(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(1)))
    return model


@pytest.mark.parametrize("qat", [False, True], ids=["ptq", "qat"])
@pytest.mark.parametrize("name", ["x86", "xnnpack"])
def test_a_rebuilt_prepared_model_finishes_as_the_original(name: str, qat: bool, tmp_path: Path) -> None:
    batches = [(torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(s)) * (s + 1),) for s in (2, 3)]
    model = _prepared(name, qat)
    ir = torch2ir.convert(model, (X,), allow=ALLOW)
    record = ir.root.meta[PT2E_PREPARED_KEY]
    assert record["is_qat"] is qat and record["scopes"]
    if name == "xnnpack":  # a shared observer (its second path is an alias) and scopes below the root
        assert any(path for path, _ in record["scopes"].values())
    assert_finishes_alike(model, (X,), batches, tmp_path)


def test_the_rebuild_converts_back_with_the_record() -> None:
    model = _prepared("xnnpack", False)
    ir = torch2ir.convert(model, (X,), allow=ALLOW)
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=ALLOW)
    again = torch2ir.convert(rebuilt, (X,), allow=ALLOW)
    assert again.root.meta[PT2E_PREPARED_KEY] == ir.root.meta[PT2E_PREPARED_KEY]


def test_the_record_follows_the_model() -> None:
    """torchao leaves the attributes on a converted model too (``convert_pt2e`` puts the prepared model's ``meta``
    back): the IR records what the model holds; a float model holds nothing."""
    model = _quantized(qat=False, convert=True)
    converted = torch2ir.convert(model, (X,), allow=ALLOW)
    assert (PT2E_PREPARED_KEY in converted.root.meta) == ("_observed_graph_module_attrs" in model.meta)
    assert PT2E_PREPARED_KEY not in torch2ir.convert(ConvNet().eval(), (X,)).root.meta


HOSTILE = [
    "__import__('os')", 1, [], {"is_qat": 1, "scopes": {}}, {"is_qat": False}, {"is_qat": False, "scopes": []},
    {"is_qat": False, "scopes": {}, "extra": 1}, {"is_qat": False, "scopes": {"a": "os.system"}},
    {"is_qat": False, "scopes": {"a": ["", 7]}}, {"is_qat": False, "scopes": {"a": ["x" * 2000, None]}},
    {"is_qat": False, "scopes": {"a": ["", "b\n"]}}, {"is_qat": False, "scopes": {"": ["", None]}},
    {"is_qat": False, "scopes": {"a": ["", None, None]}}, {"is_qat": False, "scopes": {"a": [None, None]}},
    {"is_qat": False, "scopes": {str(i): ["", None] for i in range(10**5 + 1)}},
]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_record_is_an_ir_error_and_runs_nothing(value: object, tmp_path: Path) -> None:
    model = _prepared("xnnpack", False)
    ir = torch2ir.convert(model, (X,), allow=ALLOW)
    path = tmp_path / "hostile.ir.json"
    ir.save(path)
    data = json.loads(path.read_text())
    data["implementations"]["root"]["meta"][PT2E_PREPARED_KEY] = value
    path.write_text(json.dumps(data))
    before = set(sys.modules)
    with pytest.raises(IRError, match=PT2E_PREPARED_KEY):
        ir2torch.convert(IR.load(path, allow=ALLOW), model.state_dict(), allow=ALLOW)
    assert set(sys.modules) == before  # nothing imported


def test_a_record_below_the_root_is_refused(tmp_path: Path) -> None:
    model = _prepared("x86", False)
    ir = torch2ir.convert(model, (X,), allow=ALLOW)
    path = tmp_path / "moved.ir.json"
    ir.save(path)
    data = json.loads(path.read_text())
    data["implementations"]["conv"].setdefault("meta", {})[PT2E_PREPARED_KEY] = \
        data["implementations"]["root"]["meta"].pop(PT2E_PREPARED_KEY)
    path.write_text(json.dumps(data))
    with pytest.raises(IRError, match="belongs to the root"):
        ir2torch.convert(IR.load(path, allow=ALLOW), model.state_dict(), allow=ALLOW)


def test_a_fresh_process_loads_a_converted_pt2e_file_without_an_import(tmp_path: Path) -> None:
    """``quantized_decomposed`` is registered by a torch module ``import torch`` does not load
    (``torch.ao.quantization.fx._decomposed``): loading a file naming its operators, with them allowed, imports
    it (common.op_libraries); torchao is not imported."""
    from common import save_safetensors

    model = _quantized(qat=False, convert=True)
    torch2ir.convert(model, (X,), allow=ALLOW).save(tmp_path / "q.ir.json")
    save_safetensors(model.state_dict(), tmp_path / "q.safetensors")
    torch.save({"x": X, "y": model(X)}, tmp_path / "xy.pt")
    script = (
        "import sys, torch, ir2torch\n"
        "from common import IR\n"
        "d = torch.load(sys.argv[1] + '/xy.pt')\n"
        "ir = IR.load(sys.argv[1] + '/q.ir.json', allow=['quantized_decomposed::*'])\n"
        "m = ir2torch.convert(ir, sys.argv[1] + '/q.safetensors', allow=['quantized_decomposed::*'])\n"
        "assert torch.equal(m(d['x']), d['y'])\n"
        "assert not any(k.startswith('torchao') for k in sys.modules), 'torchao imported'\n"
        "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-2000:]
    refused = subprocess.run([sys.executable, "-c", script.replace("allow=['quantized_decomposed::*']", "")
                              .replace(", )", ")"), str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                             env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
                             timeout=300)
    assert refused.returncode != 0 and "allow=['quantized_decomposed::" in refused.stderr, refused.stderr[-2000:]
