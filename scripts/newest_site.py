"""Test the library against the newest releases of the model libraries (``make test-newest``, run by ``.ci/run``).

The rest of the suite runs the pins of ``constraints.txt`` and ``tests/ecosystems/requirements.txt``; users install
whatever is newest. This script puts the newest releases of transformers, timm, diffusers, torchao and brevitas
**that install with the pinned torch** into a folder of their own (``--target``, made afresh on every run, so a
release published since the last run is picked up), prints their versions, and runs :data:`SELECTION`, a
representative part of the ecosystem tests (converted, rebuilt, equal to eager, lowered, fixpoint), with that folder
first on ``sys.path``, ahead of the project's environment and of the zoo folder (``--after``).

How the versions are chosen: pip's resolver (``pip install --dry-run --report``) with torch and torchvision
constrained to the installed ones picks the newest release of each package that can be installed beside them,
keeping every dependency the environment already meets; what the resolution adds or upgrades is installed into
``--target`` without dependencies, and torch stays the environment's own.

What happens when the newest release cannot be installed with the pinned torch (it requires a newer one): the
newest release that can is tested instead, and the log names the newer one and pip's reason (``NOT TESTED``). When
no release at or above the installed one installs, that package keeps its pinned version (``NOT TESTED`` too).
When the package index cannot be reached, or the newest releases cannot be installed together, nothing is tested
and the script exits 0 after saying so: CI does not fail for a reason outside the project (``--strict`` makes these
cases fail). A test failure with the releases that did install always fails (exit code of pytest), and so does a
release that installs but does not import. A package that does not declare its torch requirement (torchao) is
installed as its newest release; if that release needs a newer torch, its tests fail and say so. The whole check
stops itself after ``--budget`` seconds (570): tests still running then are a failure.

Usage::

    python scripts/newest_site.py --target .venv/newest-site --after .venv/zoo-site -- -n auto
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from common.errors import IRError

try:  # the tests it runs
    from scripts.newest_selection import SELECTION
except ImportError:  # run as a script (`python scripts/newest_site.py`): its own folder is first on sys.path
    from newest_selection import SELECTION  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("transformers", "timm", "diffusers", "torchao", "brevitas")
#: never installed into the folder: the environment's own (the pinned torch build and the torchvision made for it)
KEEP = ("torch", "torchvision", "torchaudio", "triton")
VERSIONS = "newest-versions.json"  # written into --target: what the last run tested
RECORD = ["run", "when and where", "pytest arguments", "outcome", "whole check", "of it installing"]  # --record
PIP_TIMEOUT = 150.0  # seconds one pip command may take: a slower index counts as unreachable


class NewestSiteError(IRError):
    """The newest releases cannot be installed here (the index is unreachable, or no release fits the pins)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="nothing in the project is at fault: `make test-zoo` tests the pinned "
                                       "releases; run `make test-newest` again when the package index is reachable")


class NewestImportError(IRError):
    """A newest release installed but the tests' environment cannot import it at the planned version."""

    def __init__(self, message: str) -> None:
        super().__init__(message, hint="a release that installs but does not import fails the run like a failing "
                                       "test: read the error above; pin the package below that release "
                                       "(constraints.txt) until the library or the release is fixed")


@dataclass
class Plan:
    """What one run installs and tests."""

    newest: dict[str, str]  # package -> its newest release on the index (installable or not)
    tested: dict[str, str] = field(default_factory=dict)  # package -> the version the tests import
    install: list[str] = field(default_factory=list)  # ``name==version`` put into --target
    notes: list[str] = field(default_factory=list)  # each newest release not tested, and why


def _pip_report(arguments: Sequence[str]) -> tuple[dict | None, str]:
    """``pip install --dry-run --report`` of ``arguments`` in this environment: (the report, or None when pip
    failed; pip's output)."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        try:
            done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--disable-pip-version-check",
                                   "--report", str(report), *arguments], capture_output=True, text=True,
                                  timeout=PIP_TIMEOUT)
        except subprocess.TimeoutExpired:
            return None, f"ERROR: pip took more than {PIP_TIMEOUT:.0f} s"
        output = "\n".join(line for line in (done.stdout + done.stderr).splitlines()
                           if not line.startswith("WARNING: Location"))  # a local index lacking a package
        if done.returncode != 0 or not report.exists():
            return None, output
        return json.loads(report.read_text()), output


def _installs(report: dict) -> dict[str, str]:
    """``{canonical name: version}`` of what a pip report would install."""
    return {canonicalize_name(item["metadata"]["name"]): item["metadata"]["version"] for item in report["install"]}


def conflict(output: str) -> str:
    """The lines of pip's output that say why a resolution failed (after ``The conflict is caused by:``), joined;
    the last ``ERROR`` line when there are none."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.strip().startswith("The conflict is caused by"):
            cause = []
            for following in lines[index + 1:]:
                if not following.strip() or following.startswith("To fix"):
                    break
                cause.append(following.strip())
            return "; ".join(cause)
    errors = [line for line in lines if line.startswith("ERROR")]
    return errors[-1] if errors else (lines[-1] if lines else "pip gave no output")


def visible(path: Sequence[str]) -> dict[str, metadata.Distribution]:
    """The distribution an import would find for each name over ``path`` (the first folder that has it)."""
    found: dict[str, metadata.Distribution] = {}
    for dist in metadata.distributions(path=list(path)):
        found.setdefault(canonicalize_name(dist.metadata["Name"] or ""), dist)
    return found


def pins(path: Sequence[str], keep: Sequence[str] = KEEP) -> list[str]:
    """``name==version`` of each ``keep`` package seen over ``path`` (its public version: ``2.13.0+cpu`` pins
    ``2.13.0``, which that build meets)."""
    seen = visible(path)
    return [f"{name}=={Version(seen[name].version).public}" for name in map(canonicalize_name, keep) if name in seen]


def plan(packages: Sequence[str], after: Sequence[str]) -> Plan:
    """Resolve the newest releases of ``packages`` that install beside the pinned torch (see the module's text).

    Raises:
        NewestSiteError: the index cannot be reached, or no package has a release that installs.
    """
    report, output = _pip_report(["--no-deps", "--ignore-installed", "--quiet", *packages])
    if report is None:
        raise NewestSiteError(f"the newest releases of {', '.join(packages)} cannot be looked up: {conflict(output)}")
    result = Plan(newest=_installs(report))
    path = [*after, *sys.path]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as handle:
        handle.write("\n".join(pins(path)) + "\n")
    constraint = ["-c", handle.name, "--upgrade"]
    seen = visible(path)
    # never below the version the environment has: pip would otherwise backtrack through every older release
    # (minutes for timm's 100) before saying that none installs
    floor = {name: f"{name}>={seen[canonicalize_name(name)].version}" if canonicalize_name(name) in seen else name
             for name in packages}
    try:
        wanted = list(packages)
        report, output = _pip_report([*constraint, *(floor[name] for name in wanted)])
        if report is None:  # some package has no release beside the pins: drop those, resolve the others together
            for name in packages:
                alone, why = _pip_report([*constraint, floor[name]])
                if alone is None:
                    wanted.remove(name)
                    result.notes.append(f"no release of {floor[name]} installs with {', '.join(pins(path))} "
                                        f"({conflict(why)}): NOT TESTED, the pinned version is")
            report, output = _pip_report([*constraint, *(floor[name] for name in wanted)]) if wanted else (None, output)
            if report is None:
                raise NewestSiteError(f"no newest release installs with {', '.join(pins(path))}: {conflict(output)}")
        resolved = _installs(report)
        kept = {canonicalize_name(k) for k in KEEP}
        for name, version in sorted(resolved.items()):
            have = seen.get(name)
            if name not in kept and (have is None or have.version != version):
                result.install.append(f"{name}=={version}")
        for name in map(canonicalize_name, packages):
            have = seen.get(name)
            result.tested[name] = resolved.get(name) or (have.version if have else "-")
            newest = result.newest.get(name)
            if newest and name in map(canonicalize_name, wanted) and result.tested[name] != newest:
                _, why = _pip_report([*constraint, f"{name}=={newest}"])
                result.notes.append(f"{name} {newest} is NOT TESTED: it does not install with "
                                    f"{', '.join(pins(path))} ({conflict(why)}); {name} {result.tested[name]} is")
    finally:
        os.unlink(handle.name)
    return result


def shadowing(folder: Path) -> list[str]:
    """The top-level packages of ``folder`` named like a module of the standard library (the folder comes first on
    ``sys.path``, ahead of the standard library too)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p.name for p in folder.iterdir() if (p / "__init__.py").exists() and (
        p.name in sys.stdlib_module_names or (stdlib / p.name).is_dir() or (stdlib / f"{p.name}.py").exists()))


def unmet(folder: Path, path: Sequence[str]) -> list[str]:
    """Every requirement (without extras) of the distributions in ``folder`` that the distributions seen over
    ``path`` do not meet, as ``who requires what (installed: version)``."""
    dists = visible(path)
    out = []
    for dist in metadata.distributions(path=[str(folder)]):
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            have = dists.get(canonicalize_name(requirement.name))
            if have is None or not requirement.specifier.contains(have.version, prereleases=True):
                out.append(f"{dist.metadata['Name']} requires {requirement} (installed: "
                           f"{have.version if have else 'none'})")
    return out


def install(result: Plan, target: Path, after: Sequence[str]) -> None:
    """Make ``target`` afresh with ``result.install`` in it and a record of ``result`` (:data:`VERSIONS`).

    Raises:
        NewestSiteError: pip could not download or install a resolved release.
    """
    fresh = target.with_name(target.name + ".new")
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    if result.install:
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                   "--target", str(fresh), *result.install]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT)
        except subprocess.TimeoutExpired:
            shutil.rmtree(fresh, ignore_errors=True)
            raise NewestSiteError(f"pip took more than {PIP_TIMEOUT:.0f} s to install "
                                  f"{' '.join(result.install)}") from None
        if done.returncode != 0:
            shutil.rmtree(fresh, ignore_errors=True)
            raise NewestSiteError(f"pip could not install {' '.join(result.install)}: {conflict(done.stderr)}")
    for name in shadowing(fresh):  # torchao's wheel ships its tests as a top-level ``test`` package
        shutil.rmtree(fresh / name)
    (fresh / VERSIONS).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "tested": result.tested,
                                              "newest": result.newest, "notes": result.notes}, indent=1) + "\n")
    shutil.rmtree(target, ignore_errors=True)
    fresh.rename(target)
    result.notes.extend(f"unmet: {line}" for line in unmet(target, [str(target), *after, *sys.path]))


def summary(result: Plan, after: Sequence[str]) -> str:
    """The versions tested, each with the pinned one, and the notes: printed before and after the tests."""
    pinned = visible([*after, *sys.path])
    lines = [f"torch {metadata.version('torch')} (pinned); newest releases tested:"]
    for name, version in result.tested.items():
        before = pinned.get(name)
        lines.append(f"  {name} {version}  (pinned: {before.version if before else '-'}; newest on the index: "
                     f"{result.newest.get(name, '?')})")
    lines.extend(f"  {note}" for note in result.notes)
    return "\n".join(lines)


#: run with the tests' environment: the version and file of each package as the tests import it (torchvision's
#: schemas first, as the tests define them: transformers imports torchvision when it is installed)
_PROBE = """
import importlib, json, sys
from tests.ecosystems.load import torchvision, zoo_site
torchvision()
found = {}
for name in sys.argv[1:]:
    zoo_site(name)
    module = importlib.import_module(name)
    found[name] = [getattr(module, "__version__", "?"), module.__file__]
print(json.dumps(found))
"""


def tests_env(target: Path, after: Sequence[str]) -> dict[str, str]:
    """The environment the tests run in: ``target`` first on ``PYTHONPATH``, the first ``after`` folder as the zoo
    folder (``tests/ecosystems/load.py``), no download from the Hugging Face hub."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target.resolve()), *filter(None, [
        os.environ.get("PYTHONPATH")])]), HF_HUB_OFFLINE="1")
    if after:
        env["TORCH2IR_ZOO_SITE"] = str(Path(after[0]).resolve())
    return env


def imported(result: Plan, target: Path, after: Sequence[str]) -> str:
    """One line per package: the version the tests import and the folder it comes from, checked against ``result``.

    Raises:
        NewestImportError: a package does not import, or imports at another version than the one planned.
    """
    names = [name.replace("-", "_") for name in result.tested]
    done = subprocess.run([sys.executable, "-c", _PROBE, *names], cwd=ROOT, env=tests_env(target, after),
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise NewestImportError(f"importing {', '.join(names)} as the tests do fails: {done.stderr.strip()[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    lines = []
    for (name, version), module in zip(result.tested.items(), names, strict=True):
        got, where = found[module]
        if got.split("+")[0] != version.split("+")[0]:
            raise NewestImportError(f"the tests would import {name} {got} from {where}, not {version}")
        lines.append(f"  {name} {got} from {Path(where).parent.parent}")
    return "\n".join(lines)


def run_tests(target: Path, after: Sequence[str], pytest_args: Sequence[str], timeout: float) -> int:
    """pytest over :data:`SELECTION` with ``target`` first on ``sys.path``: its exit code (1 past ``timeout``)."""
    env = tests_env(target, after)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--durations=10", *SELECTION,
               *pytest_args]
    print(f"+ pytest: {len(SELECTION)} test ids of SELECTION", " ".join(pytest_args), flush=True)
    process = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)  # its own process group
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # pytest and its xdist workers
        process.wait()
        print(f"newest_site: the tests took more than {timeout:.0f} s: stopped (a failure)", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("packages", nargs="*", default=list(PACKAGES), help="default: " + " ".join(PACKAGES))
    parser.add_argument("--target", type=Path, required=True, help="the folder the newest releases go into")
    parser.add_argument("--after", action="append", default=[],
                        help="a folder the tests put on sys.path after --target (the zoo folder); repeatable")
    parser.add_argument("--strict", action="store_true", help="fail when the newest releases cannot be installed")
    parser.add_argument("--install-only", action="store_true", help="install and print the versions, no tests")
    parser.add_argument("--budget", type=float, default=570.0,
                        help="seconds the whole check may take (default 570): the tests get what installing left")
    parser.add_argument("--record", help="results file to add the run's row to (benchmarks/results-newest.md)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        result = plan(args.packages, args.after)
        install(result, args.target, args.after)
    except NewestSiteError as error:
        print(f"newest_site: NOT TESTED: {error}", file=sys.stderr)
        return 1 if args.strict else 0
    if args.strict and any("NOT TESTED" in note or note.startswith("no release") for note in result.notes):
        print(summary(result, args.after), file=sys.stderr)
        return 1
    installed = time.monotonic() - started
    print(f"installed in {installed:.0f} s into {args.target}: "
          f"{' '.join(result.install) or 'nothing (every newest release is the pinned one)'}")
    print(summary(result, args.after), flush=True)
    try:
        print("as the tests import them:\n" + imported(result, args.target, args.after), flush=True)
    except NewestImportError as error:
        print(f"newest_site: {error}", file=sys.stderr)
        return 1  # a release that installs but does not import fails like a failing test
    if args.install_only:
        return 0
    left = args.budget - (time.monotonic() - started)
    if left < 120:  # the index was that slow: not the project's failure
        print(f"newest_site: NOT TESTED: installing took {time.monotonic() - started:.0f} s of the "
              f"{args.budget:.0f} s budget", file=sys.stderr)
        return 1 if args.strict else 0
    code = run_tests(args.target, args.after, pytest_args, left)
    print(summary(result, args.after))
    outcome, took = "passed" if code == 0 else f"FAILED (pytest exit code {code})", time.monotonic() - started
    print(f"make test-newest: {outcome} in {took:.0f} s")
    if args.record:  # a row of benchmarks/results-newest.md: when and where, what it ran with, how long it took
        from benchmarks import results_file
        results_file.append_row(args.record, "How long make test-newest takes", "One row per `--record` run.", RECORD,
                                [f"{len(SELECTION)} test ids", results_file.machine(os.getloadavg()[0]),
                                 f"`{' '.join(pytest_args)}`", outcome, f"{took:.0f} s", f"{installed:.0f} s"])
    return code


if __name__ == "__main__":
    sys.exit(main())
