import sys
import textwrap

import pytest
import torch

import ir2torch
from common import IR
from common.errors import UnsafeTargetError
from common.safety import Allowlist, check_target, function_name, resolve_target
from tests.seed import seed_dict

UNSAFE = ["os.system", "builtins.eval", "subprocess.run", "subprocess.Popen", "pkg.mod.fn", "torch.load",
          "torch.hub.load", "operator.attrgetter", "", "aten.add.Tensor; import os", "aten..x"]


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_names_are_refused(name):
    with pytest.raises(UnsafeTargetError):
        check_target(name)


def _ir_calling(target):
    doc = seed_dict()
    doc["root"]["nodes"]["f"] = {"name": "f", "type": "function", "implementation": target}
    doc["root"]["edges"][("_0", "f")] = {"src": "_0", "dst": "f"}
    doc["root"]["edges"][("f", "output")] = {"src": "f", "dst": "output"}
    del doc["root"]["edges"][("_0", "output")]
    return doc


@pytest.mark.parametrize("name", ["os.system", "builtins.eval", "subprocess.run", "evil_pkg_t2i.boom"])
def test_ir_naming_unsafe_function_is_refused_on_load_and_never_imported(tmp_path, monkeypatch, name):
    marker = tmp_path / "imported.txt"
    (tmp_path / "evil_pkg_t2i.py").write_text(
        textwrap.dedent(f"""
            open({str(marker)!r}, "w").write("imported")
            def boom(*a):
                open({str(marker)!r}, "w").write("called")
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    path = tmp_path / "evil.ir.json"
    IR.from_dict(_ir_calling(name)).save(path)  # saving is fine: it is just data
    with pytest.raises(UnsafeTargetError, match="not on the allow-list"):
        IR.load(path)
    with pytest.raises(UnsafeTargetError):
        ir2torch.convert(_ir_calling(name))
    assert not marker.exists()
    assert "evil_pkg_t2i" not in sys.modules
    new = {m for m in set(sys.modules) - before if m.split(".")[0] not in ("ir2torch", "common", "torch2ir")}
    assert new == set()  # nothing outside the library itself was imported


def test_allowed_names_resolve_to_the_real_callables():
    import operator

    assert resolve_target("aten.add.Tensor") is torch.ops.aten.add.Tensor
    assert resolve_target("operator.getitem") is operator.getitem
    assert resolve_target("torch.cat") is torch.cat
    assert resolve_target("torch.nn.functional.gelu") is torch.nn.functional.gelu
    assert function_name(torch.ops.aten.addmm.default) == "aten.addmm.default"
    assert function_name(operator.getitem) == "operator.getitem"


def test_allowlist_extension_is_per_instance():
    def my_op(x):
        return x + 1

    mine = Allowlist()
    mine.allow("my.op", my_op)
    assert mine.resolve("my.op") is my_op
    with pytest.raises(UnsafeTargetError):
        check_target("my.op")
    copy = mine.copy()
    copy.allow("other.op", my_op)
    assert not mine.is_allowed("other.op")
