"""A plain install: numpy declared, versions, ``--version``, the demo without the ``viz`` extra, and the
check that the imported ``common`` is this project's.

The fresh virtual environment of the plain-install test gets torch (a wheel of several hundred MB, most
of the test's time to unpack) from this environment through a ``.pth`` file naming a folder that holds
only torch's own top-level packages; pip sees that torch installed and installs everything else the
project declares (numpy, safetensors, networkx and torch's small dependencies) from the wheels. Elsewhere
the missing ``viz`` extra is simulated by making ``import matplotlib`` fail in the process that runs the demo.
"""

from __future__ import annotations

import importlib.metadata
import io
import re
import sys
from pathlib import Path

import pytest
import tomllib

import common
import ir2torch
import torch2ir
from common.cli.demo import run_demo
from tests.cli.helpers import REPO, command, explain, run, run_all


def test_numpy_is_declared_and_pinned_to_the_installed_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "numpy" in project["dependencies"]
    pins = dict(line.split("==") for line in (REPO / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    assert pins["numpy"] == importlib.metadata.version("numpy")
    assert any(re.match(r"numpy\b", r) for r in importlib.metadata.requires("torch2ir") or [])


def test_versions_agree_with_the_installed_distribution(capsys):
    installed = importlib.metadata.version("torch2ir")
    assert common.__version__ == torch2ir.__version__ == ir2torch.__version__ == installed
    results = run_all({tool: command(tool, "--version") for tool in ("torch2ir", "ir2torch")})
    for tool, result in results.items():
        assert result.returncode == 0 and result.stdout == f"{tool} {installed}\n", explain(result)
        assert "NumPy" not in result.stderr, explain(result)  # torch's "Failed to initialize NumPy" warning


def test_demo_without_matplotlib_writes_text_pictures_and_says_how_to_get_png(tmp_path, monkeypatch):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    with pytest.raises(ImportError):
        import matplotlib  # noqa: F401
    out = io.StringIO()
    assert run_demo(tmp_path, quiet=True, stdout=out) == 0
    report = out.getvalue()
    assert "verify: OK" in report and "max |original - rebuilt| = 0 " in report
    assert not (tmp_path / "demo.hierarchy.png").exists()
    assert (tmp_path / "demo.hierarchy.dot").is_file() and (tmp_path / "demo.hierarchy.mmd").is_file()
    draw = next(line for line in report.splitlines() if line.strip().startswith("draw"))
    assert "no PNG: PNG and SVG pictures need matplotlib" in draw and "pip install 'torch2ir[viz]'" in draw


@pytest.mark.parametrize("package", ["torch2ir", "ir2torch"])
def test_a_foreign_common_package_is_refused_on_import(tmp_path, package):
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "__init__.py").write_text("VALUE = 1\n")  # another distribution's `common`
    code = f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import {package}"
    result = run([sys.executable, "-c", code], cwd=tmp_path)
    assert result.returncode == 1, explain(result)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and "is not torch2ir's" in last, explain(result)
    assert str(tmp_path / "common") in last and "own virtual environment" in last
    fine = run([sys.executable, "-c", f"import {package}; print({package}.__version__)"])
    assert fine.returncode == 0 and fine.stdout.strip() == common.__version__, explain(fine)


def _share_torch(venv: Path, folder: Path) -> None:
    """Make this environment's torch (only its files: ``torch``, ``torchgen``, ``functorch`` and its
    dist-info) importable in ``venv`` through a ``.pth`` file, instead of unpacking its wheel again."""
    dist = importlib.metadata.distribution("torch")
    tops = {Path(str(f)).parts[0] for f in dist.files or [] if not str(f).startswith("..")}
    folder.mkdir()
    for name in sorted(tops):
        (folder / name).symlink_to(Path(str(dist.locate_file(name))))
    (site,) = (venv / "lib").glob("python3*/site-packages")
    (site / "shared_torch.pth").write_text(f"{folder}\n")


def test_plain_install_in_a_fresh_venv_runs_the_demo(tmp_path):
    """``pip install .`` without extras, offline from the machine's local wheels, then the demo (torch shared)."""
    import shutil
    import subprocess

    source = tmp_path / "src"
    source.mkdir()
    for name in ("common", "torch2ir", "ir2torch"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    # the runtime pins only: the extras' pins (brevitas wants an older setuptools than torch's build) do not apply
    runtime = ("torch", "networkx", "safetensors", "numpy")
    pins = [line for line in (REPO / "constraints.txt").read_text().splitlines()
            if line.split("==")[0].strip() in runtime]
    (source / "constraints.txt").write_text("\n".join(pins) + "\n")
    venv = tmp_path / "venv"
    # offline from this machine's wheel mirror when it has one, else from the configured registry
    local = ["--index-url", "file:///opt/pypi/simple", "--find-links", "/opt/wheels"] \
        if Path("/opt/pypi/simple").is_dir() else []
    done = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=240,
                          check=False)
    assert done.returncode == 0, explain(done)
    _share_torch(venv, tmp_path / "shared")
    done = subprocess.run([str(venv / "bin" / "pip"), "install", *local, "-c", str(source / "constraints.txt"),
                           str(source)], capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, explain(done)
    installed = done.stdout.splitlines()[-1]  # "Successfully installed ...": the declared dependencies came from pip
    assert all(f" {name}-" in installed for name in ("torch2ir", "numpy", "safetensors", "networkx")), installed
    assert " torch-" not in installed and "matplotlib" not in done.stdout, installed
    where = run([str(venv / "bin" / "python"), "-c", "import numpy, torch; print(numpy.__file__, torch.__file__)"])
    assert where.returncode == 0 and str(venv) in where.stdout.split()[0], explain(where)
    demo = run([str(venv / "bin" / "torch2ir"), "demo", "--out", str(tmp_path / "out")], cwd=tmp_path)
    assert demo.returncode == 0, explain(demo)
    assert "verify: OK" in demo.stdout and "NumPy" not in demo.stderr, explain(demo)
    assert "no PNG: PNG and SVG pictures need matplotlib" in demo.stdout and "torch2ir[viz]" in demo.stdout
    assert (tmp_path / "out" / "demo.safetensors").is_file()  # writing weights needs numpy: declared
    version = run([str(venv / "bin" / "ir2torch"), "--version"], cwd=tmp_path)
    assert version.stdout.strip() == f"ir2torch {common.__version__}", explain(version)
