"""A tensors file is checked before it is read (issue 28, point 4).

An IR or FlatIR JSON names its tensors file. Before any of its data is read or hashed, the name must
be a plain file name (no NUL or control character, no separator, not ``..``, not overlong), the
file's size must be 8 + its safetensors header length + the data the header declares, and the
header's keys, dtypes and shapes must be those the JSON records. Only then is the file read, in
chunks, while its sha256 is computed. Every refusal is an IRFormatError naming the key.
"""

from __future__ import annotations

import json
import struct
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

import common.tensor_files as tensor_files
import torch2ir
from common import IR, FlatIR
from common.errors import IRFormatError
from tests.common.atomic_saver import Stack

KINDS = ["ir", "flat"]
HUGE = 6 * 2**30


@cache
def _content(kind: str) -> Any:
    """A small IR or FlatIR holding tensors (non-persistent buffers), so it has a tensors file."""
    model = Stack(2, 0)
    return torch2ir.convert(model, (torch.ones(2, 4),)) if kind == "ir" else torch2ir.lower(model, (torch.ones(2, 4),))


def _load(kind: str, path: Path) -> Any:
    return IR.load(path) if kind == "ir" else FlatIR.load(path)


def _saved(kind: str, folder: Path) -> tuple[Path, Path]:
    """The JSON and its tensors file, saved in ``folder``."""
    path = _content(kind).save(folder / "m.json")
    return path, path.with_name(json.loads(path.read_text(encoding="utf-8"))["tensors"]["file"])


def _header(sidecar: Path) -> tuple[dict[str, Any], bytes]:
    data = sidecar.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + length]), data[8 + length:]


def _write(sidecar: Path, header: dict[str, Any], data: bytes = b"", size: int | None = None) -> None:
    raw = json.dumps(header).encode()
    with open(sidecar, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw + data)
        if size is not None:
            fh.truncate(size)  # sparse: costs no disk


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of bytes read from tensors files (through ``common.tensor_files.open_regular``)."""
    total = [0]
    real = tensor_files.open_regular

    class Counting:
        def __init__(self, fh: Any) -> None:
            self._fh = fh

        def read(self, n: int = -1) -> bytes:
            out = self._fh.read(n)
            total[0] += len(out)
            return out

        def __getattr__(self, name: str) -> Any:
            return getattr(self._fh, name)

    class Opening:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._cm = real(*args, **kwargs)

        def __enter__(self) -> Counting:
            return Counting(self._cm.__enter__())

        def __exit__(self, *exc: Any) -> Any:
            return self._cm.__exit__(*exc)

    monkeypatch.setattr(tensor_files, "open_regular", Opening)
    return total


def _refused(kind: str, path: Path, match: str, key: str, counted: list[int], most: int) -> IRFormatError:
    """The refusal of ``path``, having read at most ``most`` bytes of its tensors file."""
    with pytest.raises(IRFormatError, match=match) as info:
        _load(kind, path)
    assert counted[0] <= most, f"read {counted[0]} bytes of the tensors file before refusing it"
    assert info.value.key == key and info.value.hint
    return info.value


# -- size before data ------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_huge_sparse_file_of_zeros_is_refused_without_reading_it(tmp_path, kind, counted):
    path, sidecar = _saved(kind, tmp_path)
    with open(sidecar, "wb") as fh:
        fh.truncate(HUGE)
    _refused(kind, path, "malformed safetensors header|declares a header", "tensors.file", counted, 8)  # its length


@pytest.mark.parametrize("kind", KINDS)
def test_huge_file_behind_a_valid_header_is_refused_without_reading_its_data(tmp_path, kind, counted):
    path, sidecar = _saved(kind, tmp_path)
    header, data = _header(sidecar)
    _write(sidecar, header, data, size=HUGE)
    _refused(kind, path, f"should be {sidecar.stat().st_size - HUGE + 8 + len(json.dumps(header)) + len(data)}|"
             "should be \\d+ bytes", "tensors.file", counted, 8 + len(json.dumps(header).encode()))


@pytest.mark.parametrize("kind", KINDS)
def test_huge_tensor_the_json_does_not_record_is_refused_before_hashing(tmp_path, kind, counted):
    """Header and size agree (6 GiB of data declared and present), but the JSON records a 4-element tensor."""
    path, sidecar = _saved(kind, tmp_path)
    header, _ = _header(sidecar)
    key = next(k for k in header if k != "__metadata__")
    others, end = {}, 0
    for other, entry in header.items():
        if other not in (key, "__metadata__"):
            begin, stop = entry["data_offsets"]
            others[other] = {**entry, "data_offsets": [end, end + stop - begin]}
            end += stop - begin
    numel = (HUGE - end) // 4
    header = {**others, key: {"dtype": "F32", "shape": [numel], "data_offsets": [end, end + 4 * numel]}}
    raw = json.dumps(header).encode()
    _write(sidecar, header, size=8 + len(raw) + end + 4 * numel)
    error = _refused(kind, path, "does not fit the JSON's records; it is not read", key, counted, 8 + len(raw))
    assert f"expected shape (4,), found ({numel},) in the file" in str(error)


@pytest.mark.parametrize("kind", KINDS)
def test_header_declaring_more_data_than_the_file_has_is_refused(tmp_path, kind, counted):
    path, sidecar = _saved(kind, tmp_path)
    header, data = _header(sidecar)
    key = next(k for k in header if k != "__metadata__")
    header[key]["shape"] = [n * 1000 for n in header[key]["shape"]]
    begin, end = header[key]["data_offsets"]
    grown = (end - begin) * 999
    header[key]["data_offsets"][1] += grown
    for other, entry in header.items():
        if other not in (key, "__metadata__") and entry["data_offsets"][0] >= end:
            entry["data_offsets"] = [o + grown for o in entry["data_offsets"]]
    _write(sidecar, header, data)
    _refused(kind, path, "should be \\d+ bytes: 8 \\+ a \\d+-byte header \\+ the \\d+ bytes of data", "tensors.file",
             counted, 8 + len(json.dumps(header).encode()))


@pytest.mark.parametrize("kind", KINDS)
def test_header_length_beyond_the_file_is_refused(tmp_path, kind, counted):
    path, sidecar = _saved(kind, tmp_path)
    sidecar.write_bytes(struct.pack("<Q", 2**63) + b"{}")
    _refused(kind, path, "declares a header of \\d+ bytes, more than the file holds", "tensors.file", counted, 8)


@pytest.mark.parametrize("kind", KINDS)
def test_file_longer_than_declared_is_refused(tmp_path, kind, counted):
    path, sidecar = _saved(kind, tmp_path)
    size = sidecar.stat().st_size
    with open(sidecar, "ab") as fh:
        fh.write(b"\0" * 4096)
    _refused(kind, path, f"\\({size + 4096} bytes\\) should be {size} bytes", "tensors.file", counted, size - 1)


@pytest.mark.parametrize("kind", KINDS)
def test_intact_file_is_read_in_chunks_and_loads(tmp_path, kind, monkeypatch):
    path, _ = _saved(kind, tmp_path)
    monkeypatch.setattr(tensor_files, "_CHUNK", 16)
    assert _load(kind, path) == _content(kind)


# -- names ------------------------------------------------------------------------------------
BAD_NAMES = {
    "NUL": "m.tensors\0.safetensors",
    "control character": "m.tensors\x01.safetensors",
    "newline": "m\n.safetensors",
    "DEL": "m\x7f.safetensors",
    "separator": "sub/m.safetensors",
    "backslash": "sub\\m.safetensors",
    "absolute": "/etc/passwd",
    "parent": "..",
    "current": ".",
    "empty": "",
    "overlong": "m" * 300 + ".safetensors",
    "lone surrogate": "m\ud800.safetensors",
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", list(BAD_NAMES))
def test_invalid_tensors_file_name_is_refused(tmp_path, kind, case, counted):
    path, _ = _saved(kind, tmp_path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["tensors"]["file"] = BAD_NAMES[case]
    path.write_text(json.dumps(doc), encoding="utf-8")
    error = _refused(kind, path, "tensors.file", "tensors.file", counted, 0)  # the name refused: nothing opened
    assert "NUL" in str(error) if case == "NUL" else True


@pytest.mark.parametrize("kind", KINDS)
def test_nul_in_the_json_path_is_an_ir_format_error(kind):
    with pytest.raises(IRFormatError, match="NUL"):
        _load(kind, Path("m\0.json"))
