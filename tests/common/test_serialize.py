import json
import os
import sys

import pytest
from hypothesis import given, settings

from common import IR
from common.atomic_files import write_text_atomic
from common.errors import IRError, IRFormatError, IRSerializationError, UnsupportedFormatVersionError
from common.json_files import loads_json
from common.serialize import ir_from_document, load_ir
from common.testing import irs, mutated_documents
from tests.conftest import examples
from tests.seed import seed_dict


def test_same_ir_gives_same_bytes(tmp_path):
    a = IR.from_dict(seed_dict()).save(tmp_path / "a.json").read_bytes()
    b = IR.from_dict(seed_dict()).save(tmp_path / "b.json").read_bytes()
    assert a == b
    assert load_ir(tmp_path / "a.json").save(tmp_path / "c.json").read_bytes() == a


def test_newer_format_version_is_refused(tmp_path):
    path = IR.from_dict(seed_dict()).save(tmp_path / "v.json")
    doc = json.loads(path.read_text())
    doc["format_version"] = 99
    path.write_text(json.dumps(doc))
    with pytest.raises(UnsupportedFormatVersionError, match="format_version 99; this library reads up to 2"):
        load_ir(path)


def test_wrong_format_and_missing_file(tmp_path):
    path = tmp_path / "other.json"
    path.write_text('{"format": "something.else", "format_version": 1}')
    with pytest.raises(IRFormatError, match="expected 'torch2ir.ir'"):
        load_ir(path)
    with pytest.raises(IRFormatError, match="no such file"):
        load_ir(tmp_path / "missing.json")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": NaN}', "NaN is not allowed"),
        ('{"a": ', "not valid JSON"),
        ("[" * 100000 + "]" * 100000, "nests arrays and objects 100000 deep"),
        ('{"a": ' + "1" * 5000 + "}", "cannot be parsed"),
        (b"\xff\xfe{", "not UTF-8"),
    ],
)
def test_strict_json_parsing(text, message):
    with pytest.raises(IRFormatError, match=message):
        loads_json(text)


def test_crash_during_write_leaves_old_file_and_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "model.ir.json"
    target.write_text("old contents")

    def failing_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(target, "new contents")
    assert target.read_text() == "old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.ir.json"]


def test_unserializable_value_fails_before_touching_the_file(tmp_path):
    ir = IR.from_dict(seed_dict())
    ir["0"].data["fn"] = sys.exit
    with pytest.raises(IRSerializationError, match="builtin_function_or_method"):
        ir.save(tmp_path / "x.json")
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=examples(200))
@given(irs())
def test_random_valid_irs_save_load_identity_and_determinism(tmp_path_factory, ir):
    tmp = tmp_path_factory.mktemp("ir")
    first = ir.save(tmp / "a.json")
    loaded = load_ir(first)
    assert loaded == ir
    assert loaded.save(tmp / "b.json").read_bytes() == first.read_bytes()


@settings(max_examples=examples(500))
@given(mutated_documents())
def test_mutated_documents_raise_only_ir_errors(text):
    try:
        ir = ir_from_document(loads_json(text))
    except IRError:
        return
    # a mutation may leave a valid document: then it must be a usable, re-savable IR
    assert isinstance(ir, IR)
    assert ir_from_document(json.loads(json.dumps(_doc(ir)))) == ir


def _doc(ir):
    from common.serialize import ir_to_document

    return ir_to_document(ir)


def test_saved_files_get_the_usual_permissions(tmp_path):
    import os
    import stat

    from common.atomic_files import write_text_atomic

    old = os.umask(0o022)
    try:
        path = write_text_atomic(tmp_path / "x.json", "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
