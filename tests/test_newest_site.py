"""``make test-newest`` (scripts/newest_site.py): its selection names existing tests, its policy for releases that do
not install with the pinned torch, and docs/testing.md's table of versions against the pin files.

pip is not run here: :func:`newest_site._pip_report` is replaced by answers recorded from pip's own output.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent

# pip's output when a release requires another torch than the pinned one (pip 23.2, trimmed)
CONFLICT = """\
ERROR: Cannot install torchvision==0.29.1 because these package versions have conflicting dependencies.

The conflict is caused by:
    torchvision 0.29.1 depends on torch>=2.14.0
    The user requested (constraint) torch==2.13.0

To fix this you could try to:
ERROR: ResolutionImpossible: for help visit https://pip.pypa.io/en/latest/topics/dependency-resolution/
"""


def _script() -> ModuleType:
    """A fresh copy of the script as a module (registered while it runs: its dataclass looks itself up there)."""
    spec = importlib.util.spec_from_file_location("newest_site", ROOT / "scripts" / "newest_site.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def _report(**versions: str) -> dict:
    return {"install": [{"metadata": {"name": name, "version": version}} for name, version in versions.items()]}


def test_every_selected_test_exists():
    selection = _script().SELECTION
    assert f"the {len(selection)} test ids" in " ".join((ROOT / "docs" / "testing.md").read_text().split())
    for node in selection:
        path, name = node.split("::")
        function, _, param = name.partition("[")
        source = (ROOT / path).read_text()
        defined = {n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef)}
        assert function in defined, node
        if param:  # a parametrized id: the name is spelled in a file of the test's folder
            folder = "\n".join(p.read_text() for p in (ROOT / path).parent.glob("*.py"))
            assert f'"{param.rstrip("]")}"' in folder, node


def test_pip_conflict_is_quoted():
    newest_site = _script()
    assert newest_site.conflict(CONFLICT) == ("torchvision 0.29.1 depends on torch>=2.14.0; "
                                             "The user requested (constraint) torch==2.13.0")
    assert newest_site.conflict("ERROR: No matching distribution found for x") == (
        "ERROR: No matching distribution found for x")


def test_a_newest_release_needing_a_newer_torch_is_reported_and_the_newest_that_installs_is_tested(monkeypatch):
    newest_site = _script()
    calls = []

    def pip(arguments):
        calls.append(list(arguments))
        if "--no-deps" in arguments:  # the newest releases on the index
            return _report(pkga="2.0", pkgb="1.0"), ""
        if "pkga==2.0" in arguments:
            return None, CONFLICT.replace("torchvision 0.29.1", "pkga 2.0")
        return _report(pkga="1.5", pkgb="1.0", helper="3.1"), ""

    monkeypatch.setattr(newest_site, "_pip_report", pip)
    result = newest_site.plan(["pkga", "pkgb"], [])
    assert result.tested == {"pkga": "1.5", "pkgb": "1.0"}
    assert result.install == ["helper==3.1", "pkga==1.5", "pkgb==1.0"]
    assert result.notes == ["pkga 2.0 is NOT TESTED: it does not install with "
                            f"{', '.join(newest_site.pins(newest_site.sys.path))} (pkga 2.0 depends on "
                            "torch>=2.14.0; The user requested (constraint) torch==2.13.0); pkga 1.5 is"]
    assert all("-c" in c for c in calls[1:])  # every resolution but the first is constrained to the pins


def test_a_package_with_no_release_beside_the_pins_keeps_its_pinned_version(monkeypatch):
    newest_site = _script()

    def pip(arguments):
        if "--no-deps" in arguments:
            return _report(pkga="2.0", pkgb="1.0"), ""
        if "pkga" in arguments:
            return None, CONFLICT
        return _report(pkgb="1.0"), ""

    monkeypatch.setattr(newest_site, "_pip_report", pip)
    result = newest_site.plan(["pkga", "pkgb"], [])
    assert result.tested == {"pkga": "-", "pkgb": "1.0"}
    assert result.install == ["pkgb==1.0"]
    assert result.notes[0].startswith("no release of pkga installs with") and "torch>=2.14.0" in result.notes[0]


def test_an_unreachable_index_is_an_error_saying_nothing_was_tested(monkeypatch):
    newest_site = _script()
    monkeypatch.setattr(newest_site, "_pip_report", lambda arguments: (None, "ERROR: Could not find a version"))
    with pytest.raises(newest_site.NewestSiteError, match="cannot be looked up: ERROR: Could not find") as info:
        newest_site.plan(["pkga"], [])
    assert info.value.hint
    monkeypatch.setattr(newest_site, "plan", lambda packages, after: (_ for _ in ()).throw(
        newest_site.NewestSiteError("index down")))
    assert newest_site.main(["--target", "unused"]) == 0  # reported, not a failure of the project
    assert newest_site.main(["--target", "unused", "--strict"]) == 1


def _pins(path: Path) -> dict[str, str]:
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"([A-Za-z0-9_.-]+)==([^\s#]+)", line)
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def test_the_table_of_versions_tested_agrees_with_the_pins():
    pins = _pins(ROOT / "constraints.txt") | _pins(ROOT / "tests" / "ecosystems" / "requirements.txt")
    text = (ROOT / "docs" / "testing.md").read_text()
    table = text[text.index("## Versions tested"):]
    rows = [row for row in re.findall(r"^\| (\w+) \| (\S+)[^|]*\| ([^|]+) \|$", table, flags=re.MULTILINE)
            if row[0] != "package"]
    assert {name for name, _, _ in rows} == {"torch", "torchvision", *_script().PACKAGES}
    for name, pinned, _ in rows:
        assert pins[name] == pinned, f"docs/testing.md pins {name} {pinned}, the pin files {pins[name]}"


def test_no_resolution_goes_below_the_installed_version(monkeypatch):
    newest_site = _script()
    calls = []

    def pip(arguments):
        calls.append(list(arguments))
        return _report(pytest="99.0"), ""

    monkeypatch.setattr(newest_site, "_pip_report", pip)
    newest_site.plan(["pytest"], [])
    installed = newest_site.visible(newest_site.sys.path)["pytest"].version
    assert all(f"pytest>={installed}" in c for c in calls[1:]), calls  # pip backtracks no further than the pin
