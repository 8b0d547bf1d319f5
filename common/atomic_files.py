"""Files on disk: atomic writes, reads that only open regular files, and the lock and cleanup of a save.

An IR (or FlatIR) JSON and its tensors file are one unit (see ``docs/ir-spec.md``):

- the tensors file is content-addressed, ``<stem>.tensors.<first 16 hex of sha256>.safetensors``,
  and the JSON names it together with the full sha256 of its bytes, so a JSON always names exactly
  the tensors file it was written with;
- a save writes the tensors file, then the JSON (each through a temporary file, ``fsync`` and an
  atomic rename), then removes the tensors files of that stem the new JSON does not name and any
  temporary files an interrupted save left behind; all of it holds an ``fcntl.flock`` on the lock
  file ``.<name>.lock`` beside the JSON, so concurrent saves to one path run one after the other (the
  file is removed when the save ends);
- reads ``stat`` a path before opening it and open only regular files (a FIFO or a device is
  refused at once, never waited on); a tensors file must not be a symbolic link.

This module knows nothing of the IR; :mod:`common.tensor_files` and :mod:`common.serialize` build saving and
loading on it.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: saves to one path are not serialized
    fcntl = None  # type: ignore[assignment]

PathLike = str | os.PathLike

_KINDS = {stat.S_IFIFO: "named pipe (FIFO)", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
          stat.S_IFSOCK: "socket", stat.S_IFDIR: "directory", stat.S_IFLNK: "symbolic link"}  # fmt: skip
#: the random part ``tempfile.mkstemp`` puts into a name
_TMP_PART = r"\.[A-Za-z0-9_]+\.tmp"


class NotRegularFileError(OSError):
    """``path`` exists but is not a regular file (``kind`` says what it is); raised before it is opened."""

    def __init__(self, path: PathLike, kind: str) -> None:
        super().__init__(f"{os.fspath(path)} is a {kind}, not a regular file")
        self.kind = kind


def read_regular(path: PathLike, *, follow_symlinks: bool = True) -> bytes:
    """The bytes of ``path``, which must be a regular file (see :func:`open_regular`).

    Raises:
        NotRegularFileError: the path is a FIFO, device, socket, directory (or a symbolic link when
            ``follow_symlinks`` is false).
        OSError: the file is missing (``FileNotFoundError``) or cannot be read.
    """
    with open_regular(path, follow_symlinks=follow_symlinks) as fh:
        return fh.read()


@contextlib.contextmanager
def open_regular(path: PathLike, *, follow_symlinks: bool = True) -> Iterator[BinaryIO]:
    """Open ``path``, which must be a regular file, for reading bytes (nothing is read yet).

    The file's type is checked with ``stat`` (``lstat`` when ``follow_symlinks`` is false) before it
    is opened, and again on the open descriptor (opened non-blocking, so a FIFO swapped in between
    cannot block), so a FIFO or device is never read from or waited on.

    Raises:
        NotRegularFileError: the path is a FIFO, device, socket, directory (or a symbolic link when
            ``follow_symlinks`` is false).
        OSError: the file is missing (``FileNotFoundError``) or cannot be opened.
    """
    st = os.stat(path) if follow_symlinks else os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(path, _KINDS.get(stat.S_IFMT(st.st_mode), "special file"))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_symlinks and os.path.islink(path):  # replaced by a link after the lstat (ELOOP)
            raise NotRegularFileError(path, "symbolic link") from None
        raise exc from None
    with open(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(path, _KINDS.get(stat.S_IFMT(st.st_mode), "special file"))
        yield fh


@contextlib.contextmanager
def atomic_path(path: PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on failure it is removed.

    The temporary file is ``.<name>.<random>.tmp``; a process killed while it exists leaves it
    behind, and the next :func:`clean_stale` of that path removes it.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=_folder(path))
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a written file gets the usual permissions
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _folder(path: Path) -> str:
    return str(path.parent) if str(path.parent) else "."


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes_atomic(path: PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` through a temporary file, ``fsync`` and an atomic rename."""
    with atomic_path(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    return Path(path)


def write_text_atomic(path: PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` through a temporary file, ``fsync`` and an atomic rename."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def sync_folder(path: PathLike) -> None:
    """``fsync`` the folder holding ``path`` so the renames done in it survive a power loss (best effort)."""
    with contextlib.suppress(OSError):
        fd = os.open(_folder(Path(path)), os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _lock_path(path: Path) -> Path:
    return path.with_name(f".{path.name}.lock")


def _is_current(fd: int, lock: Path) -> bool:
    """Whether ``fd`` (locked) is still the lock file on disk: a save that finished removed it (and another may have
    made a new one), so a lock taken on a removed file locks nothing and must be taken again."""
    try:
        on_disk = os.stat(lock, follow_symlinks=False)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (on_disk.st_dev, on_disk.st_ino) == (held.st_dev, held.st_ino)


def _release(fd: int, lock: Path) -> None:
    """Remove the lock file while still holding it, then release it (a save waiting on it finds it removed and
    locks a new one; one arriving now creates a new one)."""
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)
    finally:
        os.close(fd)


@contextlib.contextmanager
def save_lock(path: PathLike) -> Iterator[None]:
    """Hold an exclusive ``fcntl.flock`` on ``.<name>.lock`` beside ``path`` (created for the save, removed after).

    A save waiting for the lock gets it once the holder removed the file, sees that the file it locked is no longer
    the one on disk and locks the current one (creating it when none is there): so two saves never hold the lock of
    one path at once, and a save that completed leaves no lock file behind (one killed midway does; the next save
    or load of the path removes it). Without ``fcntl`` (not POSIX) this does nothing.

    Raises:
        OSError: the lock file cannot be created or opened (e.g. a read-only folder).
    """
    if fcntl is None:  # pragma: no cover
        yield
        return
    lock = _lock_path(Path(path))
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        fd = os.open(lock, flags | getattr(os, "O_NONBLOCK", 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            current = _is_current(fd, lock)
        except BaseException:
            os.close(fd)
            raise
        if current:
            break
        os.close(fd)  # locked a file the previous holder removed: lock the one on disk now
    try:
        yield
    finally:
        _release(fd, lock)


@contextlib.contextmanager
def try_save_lock(path: PathLike) -> Iterator[bool]:
    """Take :func:`save_lock`'s lock without waiting and without creating the lock file; yields whether it
    was taken (False: no lock file, which a completed save removes, a save holds it, or it cannot be opened).
    A lock file found is one a save killed midway left: taken, it is removed when the block ends."""
    if fcntl is None:  # pragma: no cover
        yield False
        return
    lock = _lock_path(Path(path))
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(lock, flags)
    except OSError:
        yield False
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        taken = _is_current(fd, lock)
    except OSError:
        taken = False
    if not taken:
        os.close(fd)
        yield False
        return
    try:
        yield True
    finally:
        _release(fd, lock)


def sidecar_stem(path: PathLike) -> str:
    """The stem of the tensors files of the JSON at ``path``: ``model.ir.json`` -> ``model.ir``."""
    name = Path(path).name
    return name[: -len(".json")] if name.endswith(".json") else name


def sidecar_name(path: PathLike, sha256: str | None = None) -> str:
    """The tensors file name of the JSON at ``path``: ``<stem>.tensors.<sha256[:16]>.safetensors``.

    Without ``sha256``, the name format_version 1 files written before content addressing used:
    ``<stem>.tensors.safetensors``.
    """
    stem = sidecar_stem(path)
    return f"{stem}.tensors.{sha256[:16]}.safetensors" if sha256 else f"{stem}.tensors.safetensors"


def clean_stale(path: PathLike, keep: str | None) -> list[str]:
    """Remove what interrupted saves of ``path`` left beside it; return the names removed.

    Removed: temporary files of the JSON and of its tensors files (``.<name>.<random>.tmp``) and
    the tensors files of the JSON's stem (old and content-addressed names) other than ``keep``.
    Call it only while holding :func:`save_lock` of ``path``: then no other save of ``path`` is
    under way, so none of these files is in use by a writer.
    """
    path = Path(path)
    sidecars = re.escape(sidecar_stem(path)) + r"\.tensors(\.[0-9a-f]{16})?\.safetensors"
    stale = re.compile(rf"\.{re.escape(path.name)}{_TMP_PART}|\.{sidecars}{_TMP_PART}|{sidecars}")
    removed = []
    with os.scandir(_folder(path)) as entries:
        for entry in entries:
            if entry.name == keep or not stale.fullmatch(entry.name) or entry.is_dir(follow_symlinks=False):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                removed.append(entry.name)
    return sorted(removed)


__all__ = ["NotRegularFileError", "atomic_path", "clean_stale", "open_regular", "read_regular", "save_lock",
           "sidecar_name", "sidecar_stem", "sync_folder", "try_save_lock", "write_bytes_atomic", "write_text_atomic"]
