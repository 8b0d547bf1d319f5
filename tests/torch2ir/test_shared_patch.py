"""The process-wide patch the frontends share (torch2ir.frontend.shared_patch): installed by the first block
entered, undone when the last one leaves, acted on only by the threads inside it."""

from __future__ import annotations

import threading

import pytest

from torch2ir.frontend.shared_patch import SharedPatch


class _Target:
    value = "original"


def _patch() -> tuple[SharedPatch, list[str]]:
    log: list[str] = []

    def install(value: str = "patched") -> object:
        log.append("install")
        _Target.value = value

        def undo() -> None:
            log.append("undo")
            _Target.value = "original"

        return undo

    return SharedPatch(install), log


def test_nested_blocks_install_once_and_undo_on_the_last_exit() -> None:
    patch, log = _patch()
    assert not patch.inside() and not patch.installed
    with patch.entered("first"):
        assert _Target.value == "first" and patch.inside()
        with patch.entered("second"):  # already installed: its arguments are not used
            assert _Target.value == "first"
        assert _Target.value == "first" and patch.inside()
    assert _Target.value == "original" and not patch.inside() and not patch.installed
    assert log == ["install", "undo"]


def test_an_error_in_the_block_still_undoes_the_patch() -> None:
    patch, log = _patch()
    with pytest.raises(RuntimeError, match="inside"), patch.entered():
        raise RuntimeError("inside")
    assert _Target.value == "original" and not patch.inside()
    assert log == ["install", "undo"]


def test_a_failing_install_leaves_nothing_entered() -> None:
    def install() -> object:
        raise ValueError("cannot install")

    patch = SharedPatch(install)
    with pytest.raises(ValueError, match="cannot install"), patch.entered():
        pass
    assert not patch.inside() and not patch.installed


def test_only_the_threads_inside_see_themselves_inside_and_the_last_one_undoes() -> None:
    patch, log = _patch()
    entered, release = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def other() -> None:
        with patch.entered():
            seen["other inside"] = patch.inside()
            entered.set()
            release.wait(10)
        seen["other after"] = patch.inside()

    with patch.entered():
        worker = threading.Thread(target=other)
        worker.start()
        assert entered.wait(10)
    # this thread left, the other is still inside: the patch stays, this thread is not inside
    assert patch.installed and not patch.inside() and _Target.value == "patched"
    release.set()
    worker.join(10)
    assert seen == {"other inside": True, "other after": False}
    assert _Target.value == "original" and log == ["install", "undo"]
