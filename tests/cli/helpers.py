"""Running the real ``torch2ir`` / ``ir2torch`` commands in subprocesses, several at a time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv's bin folder, where the console scripts are installed


def command(tool: str, *args: str) -> list[str]:
    """``python -m tool args...`` with this interpreter."""
    return [sys.executable, "-m", tool, *map(str, args)]


def _env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)  # the commands must work from the installed package (+ --import-path)
    return env


def run(cmd: list[str], timeout: float = 180, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """Run one command from ``cwd``, the repository root by default (stdout/stderr are pipes, not terminals)."""
    return subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout, check=False)


def run_all(
    cmds: dict[str, list[str]], timeout: float = 180, cwd: Path = REPO
) -> dict[str, subprocess.CompletedProcess]:
    """Start every command at once from ``cwd``, wait for all; torch's start-up time is then paid in parallel."""
    procs = {name: subprocess.Popen(cmd, cwd=cwd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for name, cmd in cmds.items()}
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=timeout)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def explain(result: subprocess.CompletedProcess) -> str:
    """A failure message with the command's exit code and both streams."""
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
