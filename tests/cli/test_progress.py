"""The progress bar: drawn on a terminal, silent elsewhere and with --quiet."""

from __future__ import annotations

import io
import time

import pytest

from common.progress import Progress, is_terminal


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _smart_terminal(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")


def test_bar_is_drawn_on_a_terminal_and_erased_at_the_end():
    stream = FakeTerminal()
    with Progress(3, "convert", stream=stream, interval=0) as bar:
        with bar.stage("build model"):
            assert "convert [" in stream.getvalue() and "0/3 | build model" in stream.getvalue()
        with bar.stage("export"):
            pass
        assert bar.render().startswith("convert [################........] 2/3 ")
        with bar.stage("save"):
            pass
    text = stream.getvalue()
    assert text.startswith("\r") and "\r" in text and "\n" not in text  # redrawn in place
    assert "[########################] 3/3" in text
    assert text.endswith("\r") and text.rstrip("\r").endswith(" " * 10)  # the line is blanked at the end


def test_ticking_thread_redraws_a_long_stage():
    stream = FakeTerminal()
    with Progress(1, "demo", stream=stream, interval=0.01) as bar, bar.stage("long"):
        time.sleep(0.2)
        spinner = {c for c in "|/-\\" if f"{c} long" in stream.getvalue()}
    assert len(spinner) >= 2  # the spinner moved while the stage ran
    assert bar._thread is None  # stopped on exit


def test_quiet_off_a_terminal_and_with_enabled_false(monkeypatch):
    plain = io.StringIO()
    with Progress(2, "x", stream=plain) as bar, bar.stage("a"):
        pass
    assert plain.getvalue() == "" and not is_terminal(plain)

    quiet = FakeTerminal()
    with Progress(2, "x", stream=quiet, enabled=False) as bar, bar.stage("a"):
        pass
    assert quiet.getvalue() == ""

    monkeypatch.setenv("TERM", "dumb")
    dumb = FakeTerminal()
    with Progress(1, "x", stream=dumb) as bar, bar.stage("a"):
        pass
    assert dumb.getvalue() == ""


def test_a_failing_stage_still_counts_and_closes():
    stream = FakeTerminal()
    with pytest.raises(RuntimeError), Progress(2, "x", stream=stream, interval=0) as bar, bar.stage("boom"):
        raise RuntimeError("boom")
    assert bar.done == 1 and not bar.active
    assert stream.getvalue().endswith("\r")
