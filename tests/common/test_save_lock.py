"""The save lock (``common.atomic_files.save_lock``): held for a save, removed when it ends, and never held twice
when a save waits on a file the holder removes."""

from __future__ import annotations

import threading
import time

from common.atomic_files import save_lock, try_save_lock


def test_a_save_waiting_for_the_lock_locks_the_file_on_disk_once_the_holder_removed_its_own(tmp_path):
    path, lock = tmp_path / "m.json", tmp_path / ".m.json.lock"
    seen: list = []
    first_in, release = threading.Event(), threading.Event()

    def first() -> None:
        with save_lock(path):
            first_in.set()
            release.wait(10)
            seen.append("first out")

    def second() -> None:
        first_in.wait(10)
        with save_lock(path):  # blocks on the first's file, which is removed when it ends: must lock the new one
            seen.append(("second in", lock.exists()))
            with try_save_lock(path) as taken:  # a third party finds the lock held
                seen.append(("third took it", taken))
            seen.append("second out")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    first_in.wait(10)
    time.sleep(0.2)  # the second is waiting in flock by now
    assert seen == [] and lock.exists()
    release.set()
    for t in threads:
        t.join(10)
    assert seen == ["first out", ("second in", True), ("third took it", False), "second out"]
    assert not lock.exists()  # a completed save leaves no lock file
