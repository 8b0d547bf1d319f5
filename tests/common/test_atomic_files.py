"""An IR or FlatIR JSON and its tensors file are one unit on disk (issue #13, point 4).

The JSON names a content-addressed tensors file and records its sha256; a load refuses any other
file (swapped, altered, missing, a FIFO, a symlink) with IRFormatError; saves killed at random
points or racing each other never leave a JSON with another save's tensors, and the next save
removes what interrupted ones left.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

import torch2ir
from common import IR, FlatIR
from common.errors import IRError, IRFormatError
from common.flat_files import document_format
from common.values import encode
from tests.common.atomic_saver import Stack, contents

ROOT = Path(__file__).resolve().parents[2]
KINDS = ["ir", "flat"]


@cache
def _pair(kind: str) -> tuple[Any, Any]:
    """Two small contents of one kind, with different graphs and tensors."""
    if kind in ("ir", "32 layers"):
        return contents(2 if kind == "ir" else 32)
    return tuple(torch2ir.lower(Stack(2, variant), (torch.ones(2, 4),)) for variant in (0, 1))


def _load(kind: str, path: Path) -> Any:
    return IR.load(path) if kind == "ir" else FlatIR.load(path)


def _entry(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))["tensors"]


def _sidecar(path: Path) -> Path:
    return path.with_name(_entry(path)["file"])


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _clean(path: Path) -> list[str]:
    """What a folder holding only the save at ``path`` lists: the JSON and its tensors file (a completed save
    removes its lock file)."""
    return sorted([path.name, _sidecar(path).name])


@contextlib.contextmanager
def _no_hang(seconds: int = 10) -> Iterator[None]:
    """Fail with TimeoutError instead of blocking forever (a read of a FIFO with no writer)."""

    def fail(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    old = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# -- the pair on disk -------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_json_records_the_sha256_of_its_content_addressed_tensors_file(tmp_path, kind):
    a, _ = _pair(kind)
    path = a.save(tmp_path / "m.json")
    sidecar = _sidecar(path)
    digest = hashlib.sha256(sidecar.read_bytes()).hexdigest()
    assert _entry(path) == {"file": f"m.tensors.{digest[:16]}.safetensors", "sha256": digest, "keys": sorted(a.tensors)}
    assert _listing(tmp_path) == ["m.json", sidecar.name]
    loaded = _load(kind, path)
    assert loaded == a and all(torch.equal(loaded.tensors[k], v) for k, v in a.tensors.items())
    (tmp_path / "again").mkdir()
    again = a.save(tmp_path / "again" / "m.json")  # same content: same bytes, same name
    assert again.read_bytes() == path.read_bytes() and _sidecar(again).read_bytes() == sidecar.read_bytes()


@pytest.mark.parametrize("kind", KINDS)
def test_tensors_file_of_another_save_is_refused(tmp_path, kind):
    a, b = _pair(kind)
    path = a.save(tmp_path / "m.json")
    (tmp_path / "other").mkdir()
    other = b.save(tmp_path / "other" / "m.json")
    shutil.copyfile(_sidecar(other), _sidecar(path))  # b's tensors under the name a's JSON gives
    with pytest.raises(IRFormatError, match="does not belong to this JSON") as info:
        _load(kind, path)
    assert str(_sidecar(path)) in str(info.value) and "save the IR again" in str(info.value)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("alter", ["flip", "truncate", "append", "empty"])
def test_altered_tensors_file_is_refused(tmp_path, kind, alter):
    path = _pair(kind)[0].save(tmp_path / "m.json")
    data = bytearray(_sidecar(path).read_bytes())
    changed = {"flip": lambda: data[:-1] + bytes([data[-1] ^ 1]), "truncate": lambda: data[:-1],
               "append": lambda: data + b"\0", "empty": lambda: b""}[alter]()  # fmt: skip
    _sidecar(path).write_bytes(bytes(changed))
    # a file of the wrong size is refused by its header before any data is read or hashed
    message = {"flip": "sha256 is [0-9a-f]{64}, the JSON records", "empty": "too short for a safetensors file"}.get(
        alter, r"should be \d+ bytes: 8 \+ a \d+-byte header \+ the \d+ bytes of data its header declares")
    with pytest.raises(IRFormatError, match=message):
        _load(kind, path)


@pytest.mark.parametrize("kind", KINDS)
def test_missing_tensors_file_is_refused(tmp_path, kind):
    path = _pair(kind)[0].save(tmp_path / "m.json")
    _sidecar(path).unlink()
    with pytest.raises(IRFormatError, match=r"tensors file 'm\.tensors\.[0-9a-f]{16}\.safetensors' is missing"):
        _load(kind, path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.update(sha256="xyz"), "not 64 lowercase hex"),
        (lambda e: e.update(sha256=e["sha256"].upper()), "not 64 lowercase hex"),
        (lambda e: e.update(signature="x"), "'tensors' must be"),
        (lambda e: e.update(keys=[1]), "'tensors' must be"),
        (lambda e: e.update(file="../m.tensors.safetensors"), "plain file name"),
        (lambda e: e.update(keys=e["keys"][:1]), "holds"),
    ],
)
def test_malformed_tensors_entry_is_refused(tmp_path, change, message):
    path = _pair("ir")[0].save(tmp_path / "m.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc["tensors"])
    path.write_text(json.dumps(doc), encoding="utf-8")
    with pytest.raises(IRFormatError, match=message):
        IR.load(path)


@pytest.mark.parametrize("kind", KINDS)
def test_format_version_1_files_without_sha256_still_load(tmp_path, kind):
    """Files written before content addressing: ``<stem>.tensors.safetensors``, no sha256; checked by keys."""
    from safetensors.torch import save_file

    a, _ = _pair(kind)
    path = a.save(tmp_path / "m.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.pop("bodies", None) is not None:  # format 1 stored every instance in full
        doc["format_version"], doc["implementations"] = 1, a.to_dict(value_fn=encode, edge_list=True)
    _sidecar(path).unlink()
    save_file(dict(a.tensors), tmp_path / "m.tensors.safetensors")
    doc["tensors"] = {"file": "m.tensors.safetensors", "keys": sorted(a.tensors)}
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert doc["format_version"] == 1 and _load(kind, path) == a
    save_file({"other": torch.ones(1)}, tmp_path / "m.tensors.safetensors")
    with pytest.raises(IRFormatError, match=r"holds \['other'\]"):
        _load(kind, path)
    a.save(path)  # the next save names a content-addressed file and removes the old one
    assert _listing(tmp_path) == _clean(path) and _load(kind, path) == a


# -- only regular files are read --------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_fifo_tensors_file_is_refused_without_blocking(tmp_path, kind):
    path = _pair(kind)[0].save(tmp_path / "m.json")
    sidecar = _sidecar(path)
    sidecar.unlink()
    os.mkfifo(sidecar)
    with _no_hang(), pytest.raises(IRFormatError, match=r"is a named pipe \(FIFO\), not a regular file"):
        _load(kind, path)


@pytest.mark.parametrize("special", ["fifo", "/dev/null", "directory"])
def test_special_file_as_the_json_path_is_refused_without_blocking(tmp_path, special):
    path = tmp_path / "m.json"
    if special == "fifo":
        os.mkfifo(path)
    elif special == "directory":
        path.mkdir()
    else:
        path = Path(special)
    kind = {"fifo": "named pipe", "/dev/null": "character device", "directory": "directory"}[special]
    for load in (IR.load, FlatIR.load, document_format):
        with _no_hang(), pytest.raises(IRFormatError, match=f"is a {kind}.*, not a regular file"):
            load(path)


@pytest.mark.parametrize("kind", KINDS)
def test_symlinked_tensors_file_is_refused_even_with_the_right_bytes(tmp_path, kind):
    """A link could make a load read any file; the JSON names a file beside it, so a link is refused."""
    path = _pair(kind)[0].save(tmp_path / "m.json")
    sidecar = _sidecar(path)
    target = tmp_path / "elsewhere.safetensors"
    sidecar.rename(target)
    sidecar.symlink_to(target)
    with pytest.raises(IRFormatError, match="is a symbolic link, not a regular file") as info:
        _load(kind, path)
    assert "replace the link by a copy" in str(info.value)
    sidecar.unlink()
    target.rename(sidecar)
    link = tmp_path / "link.json"
    link.symlink_to(path)  # the JSON itself may be a link (followed); its tensors file is looked up beside it
    assert _load(kind, link) == _pair(kind)[0]


# -- cleanup -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_next_save_removes_what_interrupted_saves_left_and_nothing_else(tmp_path, kind):
    a, b = _pair(kind)
    path = a.save(tmp_path / "m.json")
    debris = [".m.json.k2j4_x9a.tmp", ".m.tensors.0123456789abcdef.safetensors.abc123.tmp",
              ".m.tensors.safetensors.zz.tmp", "m.tensors.0123456789abcdef.safetensors", "m.tensors.safetensors"]
    others = ["n.json", ".n.json.abc123.tmp", "n.tensors.0123456789abcdef.safetensors", "mm.tensors.safetensors",
              "m.x.tensors.0123456789abcdef.safetensors", ".m.json.not.ours.tmp", "m.tensors.0123.safetensors"]
    for name in debris + others:
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "m.tensors.fedcba9876543210.safetensors").mkdir()  # a folder is never removed
    kept = sorted([*others, "m.tensors.fedcba9876543210.safetensors"])
    b.save(path)
    assert _listing(tmp_path) == sorted([*_clean(path), *kept])
    assert _load(kind, path) == b


@pytest.mark.parametrize("kind", KINDS)
def test_a_load_removes_what_interrupted_saves_left_unless_a_save_is_under_way(tmp_path, kind):
    a, _ = _pair(kind)
    path = a.save(tmp_path / "m.json")
    debris = [".m.json.k2j4_x9a.tmp", ".m.tensors.0123456789abcdef.safetensors.abc123.tmp",
              "m.tensors.0123456789abcdef.safetensors"]
    for name in debris:
        (tmp_path / name).write_bytes(b"x")
    from common.atomic_files import save_lock

    with save_lock(path):  # a save holds the lock: the load must not touch files that save may be writing
        assert (tmp_path / ".m.json.lock").exists()
        assert _load(kind, path) == a
    assert _listing(tmp_path) == sorted([*_clean(path), *debris])  # the save's lock file went with it
    assert _load(kind, path) == a  # no lock file: every save completed, nothing to clean
    assert _listing(tmp_path) == sorted([*_clean(path), *debris])
    (tmp_path / ".m.json.lock").write_bytes(b"")  # what a save killed midway leaves beside its debris
    assert _load(kind, path) == a  # no save under way: the leftovers and the lock file go, the pair stays
    assert _listing(tmp_path) == _clean(path)
    assert _load(kind, path) == a


def test_a_load_in_a_read_only_folder_removes_nothing_and_succeeds(tmp_path):
    a, _ = _pair("ir")
    path = a.save(tmp_path / "m.json")
    (tmp_path / ".m.json.k2j4_x9a.tmp").write_bytes(b"x")
    tmp_path.chmod(0o555)
    try:
        assert _load("ir", path) == a
        if os.geteuid() != 0:  # root writes anywhere: only for others is the folder really read-only
            assert (tmp_path / ".m.json.k2j4_x9a.tmp").exists()
    finally:
        tmp_path.chmod(0o755)


def test_saving_without_tensors_removes_the_old_tensors_file(tmp_path):
    a, _ = _pair("ir")
    path = a.save(tmp_path / "m.ir.json")
    bare = IR.from_dict(a.to_dict())
    assert not bare.tensors
    bare.save(path)
    assert "tensors" not in json.loads(path.read_text(encoding="utf-8"))
    assert _listing(tmp_path) == ["m.ir.json"]


# -- killed and concurrent saves -----------------------------------------------------------------
class Savers:
    """A helper process (tests/common/atomic_saver.py) that forks savers of 32-layer IRs."""

    def __init__(self, folder: Path) -> None:
        self.pids: set[int] = set()
        script = "import sys; from tests.common.atomic_saver import main; main(sys.argv[1:])"
        self.proc = subprocess.Popen([sys.executable, "-c", script, str(folder), "32"], cwd=ROOT,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
        ready, seconds = self._reply().split()
        assert ready == "ready"
        self.save_seconds = float(seconds)  # how long one save takes on this machine now

    def _reply(self) -> str:
        line = self.proc.stdout.readline().strip()
        assert line, f"the saver process ended (exit code {self.proc.poll()})"
        return line

    def start(self, path: Path, first: int, step: int) -> int:
        """Fork a saver saving content ``first``, ``first + step``, ... (mod 2) to ``path`` in a loop; its pid."""
        self.proc.stdin.write(f"save {path} {first} {step}\n")
        self.proc.stdin.flush()
        pid = int(self._reply())
        self.pids.add(pid)
        return pid

    def kill(self, pid: int) -> None:
        """SIGKILL a saver and wait for it; it must have been saving still (not ended on an error)."""
        os.kill(pid, signal.SIGKILL)
        self.proc.stdin.write(f"reap {pid}\n")
        self.proc.stdin.flush()
        status = int(self._reply())
        self.pids.discard(pid)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"saver ended with {status}"

    def close(self) -> None:
        for pid in list(self.pids):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def savers(tmp_path_factory):
    helper = Savers(tmp_path_factory.mktemp("savers"))
    yield helper
    helper.close()


def _identity(path: Path) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns


def test_kill_9_at_random_points_of_saves_never_leaves_a_mixed_pair(tmp_path, savers):
    path = tmp_path / "m.ir.json"
    irs = _pair("32 layers")  # the helper converted the same two models
    irs[0].save(path)
    rng = random.Random(4)
    rounds: Counter[str] = Counter()
    kill = 0
    # at least 60 kills, and on until they landed at various points: after saves of either content
    # (a loaded machine can slow the savers down), and in the middle of saves
    while kill < 60 or min(rounds["saved 0"], rounds["saved 1"]) < 5 or rounds["interrupted"] < 5:
        assert kill < 300, f"the kills did not land at various points of the saves: {rounds}"
        before = _identity(path)
        pid = savers.start(path, kill % 2, 1)  # saves irs[kill % 2], then the other, and so on
        time.sleep(rng.uniform(0.0, 4 * savers.save_seconds))  # about 0 to 4 saves (a saver starts in ~1 save)
        savers.kill(pid)
        left = set(_listing(tmp_path)) != set(_clean(path))  # temporary or stale files left by the kill
        rounds["interrupted"] += left
        # Stronger than "consistent or IRError": the JSON on disk always names its own tensors file.
        loaded = IR.load(path)
        assert loaded == irs[0] or loaded == irs[1], f"kill {kill}: a JSON loaded with tensors not its own"
        assert set(_listing(tmp_path)) == set(_clean(path)), f"kill {kill}: the load left the leftovers"
        if _identity(path) != before:  # the saver replaced the JSON at least once
            rounds[f"saved {int(loaded == irs[1])}"] += 1
        if kill % 4 == 3:
            irs[kill % 2].save(path)
            assert _listing(tmp_path) == _clean(path), f"kill {kill}: the next save left debris"
        kill += 1


def test_concurrent_saves_to_one_path_never_give_a_mixed_pair(tmp_path, savers):
    path = tmp_path / "m.ir.json"
    irs = _pair("32 layers")
    irs[0].save(path)
    pids = [savers.start(path, 0, 0), savers.start(path, 1, 0)]  # one saves irs[0] only, the other irs[1] only
    loads: Counter[str] = Counter()
    start = time.monotonic()
    while time.monotonic() - start < 2.0 or min(loads["0"], loads["1"]) < 5:  # 2 s, and both savers got through
        assert time.monotonic() - start < 30.0, f"a saver never got through: {loads}"
        try:
            loaded = IR.load(path)
        except IRError:
            loads["error"] += 1
            continue
        assert loaded == irs[0] or loaded == irs[1], "a load mixed the JSON of one save with the tensors of another"
        loads[str(int(loaded == irs[1]))] += 1
    for pid in pids:
        savers.kill(pid)
    assert loads["error"] <= (loads["0"] + loads["1"]) // 10, loads  # loads retry: errors are rare at worst
    irs[1].save(path)
    assert _listing(tmp_path) == _clean(path) and IR.load(path) == irs[1]

