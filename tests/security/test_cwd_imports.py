"""``python -m ir2torch`` / ``python -m torch2ir`` import nothing from the current folder (issue 28, point 6b).

``python -m`` puts the current folder first on ``sys.path`` and imports the package before its ``__main__``;
the packages take the folder off before importing anything but the standard library. Modules planted there
under the names of dependencies (``networkx``, ``torch``, ``safetensors``) write a marker when imported: no
command may create one, neither ``python -m`` nor the console scripts (which never search the folder). From
a checkout (the project's packages in the current folder), ``python -m`` still imports them from there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import torch2ir

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLANTED = ("networkx", "torch", "safetensors")


def _plant(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in PLANTED:
        marker = folder / f"{name}.marker"
        (folder / f"{name}.py").write_text(f"open({str(marker)!r}, 'w').write('imported')\n", encoding="utf-8")


def _markers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("*.marker"))


def _run_all(cmds: dict[str, list[str]], cwd: Path, pythonpath: str | None) -> dict[str, subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", HF_HUB_OFFLINE="1")
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    procs = {name: subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name, cmd in cmds.items()}
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("file") / "m.json"
    torch2ir.convert(nn.Linear(4, 2), (torch.ones(1, 4),)).save(path)
    assert json.loads(path.read_text())["format"] == "torch2ir.ir"
    return path


def test_python_m_and_console_scripts_import_no_planted_dependency(tmp_path, saved) -> None:
    """This checkout's packages come from ``PYTHONPATH`` (kept); the current folder holds only planted modules."""
    _plant(tmp_path)
    cmds = {
        "python -m ir2torch show": [sys.executable, "-m", "ir2torch", "show", str(saved)],
        "python -m torch2ir --help": [sys.executable, "-m", "torch2ir", "--help"],
        "python -X dev -m ir2torch.cli.commands show": [
            sys.executable, "-X", "dev", "-m", "ir2torch.cli.commands", "show", str(saved),
        ],
    }
    for tool in ("ir2torch", "torch2ir"):
        if (BIN / tool).exists():  # the console scripts, when installed beside this interpreter
            cmds[f"{tool} script"] = [str(BIN / tool), *(["show", str(saved)] if tool == "ir2torch" else ["--help"])]
    results = _run_all(cmds, tmp_path, str(ROOT))
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
    assert "implementations" in results["python -m ir2torch show"].stdout
    assert _markers(tmp_path) == []


def test_python_m_from_a_checkout_imports_the_project_there_and_nothing_else(tmp_path, saved) -> None:
    """The current folder holds the project's packages (as a checkout does) and the planted modules."""
    _plant(tmp_path)
    for package in ("common", "torch2ir", "ir2torch"):
        (tmp_path / package).symlink_to(ROOT / package, target_is_directory=True)
    results = _run_all({
        "show": [sys.executable, "-m", "ir2torch", "show", str(saved)],
        "where": [sys.executable, "-m", "torch2ir", "--version"],
    }, tmp_path, None)
    for name, result in results.items():
        assert result.returncode == 0, f"{name}: {result.stderr[-2000:]}"
    assert _markers(tmp_path) == []


def test_library_import_leaves_sys_path_alone(tmp_path) -> None:
    """``import ir2torch`` outside ``python -m`` changes nothing: a caller's current-folder entry stays."""
    result = _run_all({"c": [sys.executable, "-c", "import sys; before = list(sys.path); import ir2torch, torch2ir; "
                                               "assert sys.path == before, (before, sys.path); print('ok')"]},
                      tmp_path, str(ROOT))["c"]
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]
