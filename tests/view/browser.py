"""Headless Chromium (Debian's ``chromium`` package) driven from the tests: the page's DOM after its scripts ran,
a screenshot, and a PNG's pixels.

The browser is a requirement of the test suite, not an option: ``make test`` installs it when missing
(``scripts/install_browser.sh``); without it (``/usr/bin/chromium``, or the ``CHROMIUM`` environment variable's
path) a test that needs it fails, naming the package to install.
"""

from __future__ import annotations

import os
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("CHROMIUM") or "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium(args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    if not CHROMIUM.is_file():
        pytest.fail(f"{CHROMIUM} is missing: the interactive view is tested in a real browser; install Debian's "
                    "chromium package (apt-get install -y chromium), as make test does, or set CHROMIUM=<path>",
                    pytrace=False)
    profile.mkdir(parents=True, exist_ok=True)
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=timeout, check=False)


def dump_dom(url: str, tmp: Path, *, budget_ms: int | None = 5000, size: tuple[int, int] | None = None) -> str:
    """The serialized DOM of ``url`` once loaded (its scripts ran; ``budget_ms`` of virtual time for timers), in a
    window of ``size`` (width, height; the browser's default, 800 x 600, without)."""
    budget = [f"--virtual-time-budget={budget_ms}"] if budget_ms is not None else []
    window = [f"--window-size={size[0]},{size[1]}"] if size is not None else []
    done = _chromium([*budget, *window, "--dump-dom", url], tmp / "profile-dom")
    assert done.returncode == 0 and "<html" in done.stdout, f"chromium --dump-dom failed:\n{done.stderr[-3000:]}"
    return done.stdout


def screenshot(url: str, tmp: Path, size: tuple[int, int] = (1280, 800)) -> Path:
    """A PNG screenshot of ``url`` at ``size`` (width, height)."""
    out = tmp / "screenshot.png"
    done = _chromium(["--virtual-time-budget=5000", f"--window-size={size[0]},{size[1]}", f"--screenshot={out}", url],
                     tmp / "profile-shot")
    assert done.returncode == 0 and out.is_file(), f"chromium --screenshot failed:\n{done.stderr[-3000:]}"
    return out


def pixels(png: Path):
    """The PNG's pixels as an ``(height, width, channels)`` float array in 0..1 (matplotlib, the viz extra)."""
    from matplotlib import image

    return image.imread(png)


class Elements(HTMLParser):
    """Every start tag of a document: ``tags`` as ``(name, {attribute: value})`` and the text shown."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self._in_script = False
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag in ("script", "style")

    def handle_endtag(self, tag: str) -> None:
        self._in_script = False

    def handle_data(self, data: str) -> None:
        if not self._in_script:
            self.text.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        """The attributes of every ``tag`` element."""
        return [attrs for name, attrs in self.tags if name == tag]

    def shown(self) -> str:
        """The text outside scripts and styles, pieces joined by newlines."""
        return "\n".join(t for t in self.text if t.strip())
