"""torch2ir and ir2torch never import each other; common imports neither at module level; ir2torch.run_safety
imports only torch, common and itself.

The demo needs both: it lives in ``common/cli/demo.py`` and imports them inside ``run_demo`` only.
"""

from __future__ import annotations

import ast
import sys

import pytest

from tests.cli.helpers import BIN, REPO, explain, run


def _imports(tree: ast.AST) -> list[tuple[str, int]]:
    """``(top-level package, line)`` of every import in ``tree``."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name.split(".")[0], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module.split(".")[0], node.lineno))
    return out


def _module_level(tree: ast.Module) -> ast.Module:
    """The statements run at import time (functions' and classes' bodies left out)."""
    keep = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    return ast.Module(body=keep, type_ignores=[])


@pytest.mark.parametrize(("package", "forbidden"), [("torch2ir", "ir2torch"), ("ir2torch", "torch2ir")])
def test_the_two_packages_never_import_each_other(package, forbidden):
    files = sorted((REPO / package).rglob("*.py"))
    assert any(f.name == "cli.py" or f.parent.name == "cli" for f in files)  # the files were found
    bad = [f"{f.relative_to(REPO)}:{line}" for f in files
           for name, line in _imports(ast.parse(f.read_text(encoding="utf-8"))) if name == forbidden]
    assert not bad, f"{package} imports {forbidden} at {bad}"


def test_common_imports_neither_package_at_module_level():
    files = sorted((REPO / "common").rglob("*.py"))
    bad = [f"{f.relative_to(REPO)}:{line}" for f in files
           for name, line in _imports(_module_level(ast.parse(f.read_text(encoding="utf-8"))))
           if name in ("torch2ir", "ir2torch")]
    assert not bad, f"common imports torch2ir/ir2torch at import time: {bad}"
    demo = ast.parse((REPO / "common" / "cli" / "demo.py").read_text(encoding="utf-8"))
    assert {"torch2ir", "ir2torch"} <= {name for name, _ in _imports(demo)}  # inside run_demo


def test_importing_torch2ir_cli_and_the_demo_does_not_load_ir2torch():
    code = ("import sys, torch2ir.cli, common.cli.demo, common.render; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch2ir', 'ir2torch'}))")
    result = run([sys.executable, "-c", code])
    assert result.returncode == 0, explain(result)
    assert result.stdout.strip() == "['torch2ir']", explain(result)


def test_console_scripts_are_installed():
    for tool in ("torch2ir", "ir2torch"):
        script = BIN / tool
        assert script.is_file(), f"{script} missing: pip install -e . declares it in [project.scripts]"
        assert f"from {tool}.cli import main" in script.read_text(encoding="utf-8")


def test_the_layer_contract_lists_every_core_module():
    """Every module of ``common/`` is a tool or is in the core contract's source list: a new module is checked."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    core = next(c for c in contracts if c["name"].startswith("The IR core"))
    tools = {m for m in core["forbidden_modules"] if m.startswith("common.")}
    modules = {f"common.{p.stem}" for p in (REPO / "common").glob("*.py") if p.stem != "__init__"}
    packages = {f"common.{p.parent.name}" for p in (REPO / "common").glob("*/__init__.py")}
    assert packages <= tools, f"packages of common that are neither tools nor core: {sorted(packages - tools)}"
    assert modules - tools == set(core["source_modules"]), (
        f"not in the core contract: {sorted(modules - tools - set(core['source_modules']))}; "
        f"listed but gone: {sorted(set(core['source_modules']) - modules)}")


def test_architecture_doc_names_every_package():
    """docs/architecture.md names every subpackage of the three packages, so a new one is placed there too."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    packages = sorted(f"{p.parent.name}/" for top in ("common", "torch2ir", "ir2torch")
                      for p in (REPO / top).glob("*/__init__.py"))
    missing = [p for p in packages if f"`{p}`" not in text]
    assert not missing, f"docs/architecture.md does not name: {missing}"
def test_run_safety_imports_only_torch_common_and_itself():
    """``ir2torch.run_safety`` bounds what a file's code may do when run; the rest of ir2torch builds on it, so it
    imports only the standard library, torch, :mod:`common` and its own modules (its package docstring)."""
    files = sorted((REPO / "ir2torch" / "run_safety").glob("*.py"))
    assert {"forward_budget.py", "budget.py", "op_preconditions.py", "fast_ops.py"} <= {f.name for f in files}
    allowed = {"torch", "common", *sys.stdlib_module_names}
    bad = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level > 1:
                bad.append(f"{f.name}:{node.lineno} (from {'.' * node.level}{node.module or ''})")
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] not in allowed \
                    and not node.module.startswith("ir2torch.run_safety"):
                bad.append(f"{f.name}:{node.lineno} ({node.module})")
            elif isinstance(node, ast.Import):
                bad += [f"{f.name}:{node.lineno} ({a.name})" for a in node.names
                        if a.name.split(".")[0] not in allowed and not a.name.startswith("ir2torch.run_safety")]
    assert not bad, f"ir2torch/run_safety imports outside torch, common and itself: {bad}"
