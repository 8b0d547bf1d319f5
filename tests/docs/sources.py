"""Where the figures the pages quote come from: the code's registries and tables, the pin files, and the benchmark
results kept in ``benchmarks/`` (each read as the page would say it: a string, formatted as the page writes it).

Every function returns a tuple of strings, one per figure of a pattern of :mod:`tests.docs.figures`. Results
files are read as Markdown tables; nothing of them is executed.
"""

from __future__ import annotations

import json
import re
import statistics
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# -- counts from the code -----------------------------------------------------------------------------------------


def handled_classes() -> tuple[str]:
    """How many module classes torch2ir converts to typed implementations (by class and by name)."""
    import torch2ir

    converter = torch2ir.get_default_converter()
    return (str(len(converter.types()) + len(converter.named_types())),)


def surface_size() -> tuple[str]:
    """The default operator surface's size (``common/default_ops.txt``)."""
    from common import surface

    return (str(len(surface.parse(_read(surface.TABLE)))),)


@cache
def _surface_origins() -> dict[str, int]:
    """How many surface lines come from the corpus, the reviewed extras and the sweeps (the table's second column)."""
    out = {"corpus": 0, "extra": 0, "sweep": 0}
    for line in _read(ROOT / "common" / "default_ops.txt").splitlines():
        if line and not line.startswith("#"):
            seen = line.split("\t", 1)[1]
            out["extra" if seen.startswith("extra:") else "sweep" if seen.startswith("sweep:") else "corpus"] += 1
    return out


def surface_origin(kind: str) -> tuple[str]:
    """Surface overloads first seen in the corpus / added as reviewed extras / needed by a registry sweep."""
    return (str(_surface_origins()[kind]),)


def surface_corpus_entries() -> tuple[str]:
    """How many corpus entries the surface was measured on (the table's header, written by the script)."""
    match = re.search(r"(\d+) corpus entries", _read(ROOT / "common" / "default_ops.txt"))
    assert match, "common/default_ops.txt no longer names its corpus size"
    return (match.group(1),)


@cache
def _op_table(minor: str) -> dict:
    return json.loads(_read(ROOT / "common" / "op_tables" / f"torch-{minor}.json"))


def op_classes(minor: str, *classes: str) -> tuple[str, ...]:
    """Overload counts of the operator table of torch ``minor`` per class; ``"all"`` and ``"allowed"`` too."""
    counts = _op_table(minor)["counts"]
    derived = {**counts, "all": sum(counts.values()), "allowed": counts["pure"] + counts["allocating"]}
    return tuple(str(derived[c]) for c in classes)


def op_table_changes(old: str, new: str) -> tuple[str, str]:
    """Overloads new in ``new``'s table and gone from it, against ``old``'s."""
    a, b = set(_op_table(old)["aten"]), set(_op_table(new)["aten"])
    return str(len(b - a)), str(len(a - b))


def corpus_size() -> tuple[str]:
    """Architectures of the real-model corpus (``tests/real/corpus.py``)."""
    from tests.real.corpus import CORPUS

    return (str(len(CORPUS)),)


def zoo_sizes() -> tuple[str, str]:
    """Hand-written models (``tests/models/zoo.py``) and config-built transformers/torchvision ones (``real.py``)."""
    from tests.models.real import REAL
    from tests.models.zoo import ZOO

    return str(len(ZOO)), str(len(REAL))


def zoo_total() -> tuple[str]:
    """The zoo's hand-written and config-built models together."""
    return (str(sum(int(n) for n in zoo_sizes())),)


def timm_sample() -> tuple[str, str]:
    """timm families of the ecosystem sample, and the slow ones ``TORCH2IR_TIMM_SLOW=1`` adds."""
    from tests.ecosystems.timm_sample import CASES, SLOW

    return str(len(CASES)), str(len(SLOW))


def newest_selection() -> tuple[str]:
    """Test ids ``make test-newest`` runs (``scripts/newest_site.py``)."""
    from scripts.newest_site import SELECTION

    return (str(len(SELECTION)),)


def pin(*names: str) -> tuple[str, ...]:
    """The pinned versions (``constraints.txt``, ``tests/ecosystems/requirements.txt``)."""
    pins = {}
    for path in (ROOT / "constraints.txt", ROOT / "tests" / "ecosystems" / "requirements.txt"):
        for match in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)", _read(path), flags=re.M):
            pins[match.group(1).lower()] = match.group(2)
    return tuple(pins[n] for n in names)


def minor(name: str) -> tuple[str]:
    """``major.minor`` of a pinned version."""
    return (".".join(pin(name)[0].split(".")[:2]),)


def requires_python() -> tuple[str]:
    """``requires-python``'s lower bound (``pyproject.toml``)."""
    match = re.search(r'^requires-python = ">=([\d.]+)"', _read(ROOT / "pyproject.toml"), flags=re.M)
    assert match
    return (match.group(1),)


# -- benchmark results -------------------------------------------------------------------------------------------


def table(path: str, section: str | None = None) -> list[dict[str, str]]:
    """The rows of the first Markdown table of ``benchmarks/<path>`` (or of ``ROOT/<path>`` for a path with a
    folder), below the heading ``section`` if given (a heading of any level, or a line starting with it)."""
    text = _read(ROOT / path if "/" in path else BENCH / path)
    if section is not None:
        start = re.search(rf"^(#+ )?{re.escape(section)}", text, flags=re.M)
        assert start, (path, section)
        text = text[start.start():]
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("| ") and lines[i + 1].startswith("|--"))
    cells = [c.strip() for c in lines[head].strip("|").split("|")]
    rows = []
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(cells, [c.strip() for c in line.strip("|").split("|")])))
    return rows


def cell(path: str, section: str | None, key: str, column: str) -> str:
    """The cell of ``column`` in the row whose first cell is (or, for a key ending in ``...``, starts with) ``key``."""
    rows = table(path, section)
    first = next(iter(rows[0]))
    found = [row[column] for row in rows
             if (row[first].startswith(key[:-3]) if key.endswith("...") else row[first] == key)]
    assert len(found) == 1, (path, section, key, found)
    return found[0]


def target(path: str, *names: str) -> tuple[str, ...]:
    """The measured value of targets of a ``benchmarks/run.py`` results file (its "Targets" table)."""
    return tuple(cell(path, "Targets", name, "measured") for name in names)


def trace_once_corpus() -> tuple[str, str, str]:
    """Entries of ``results-trace-once-corpus.md`` and the max and median of their once/export ratio."""
    rows = table("results-trace-once-corpus.md")
    ratios = [float(row["once/export"]) for row in rows]
    return str(len(rows)), f"{max(ratios):.2f}x", f"{statistics.median(ratios):.2f}x"


@cache
def _sweeps() -> list[tuple[str, int, dict[str, int]]]:
    """``(title, models, {status: count})`` of each section of ``results-sweep.md``."""
    out = []
    for part in re.split(r"^### ", _read(BENCH / "results-sweep.md"), flags=re.M)[1:]:
        head = re.match(r"(.+): (\d+) models", part)
        assert head, part[:80]
        counts = {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| ([a-z ]+) \| (\d+) \|$", part, flags=re.M)}
        out.append((head.group(1), int(head.group(2)), counts))
    return out


def sweeps() -> list[tuple[str, int, dict[str, int]]]:
    """Every section of the last registry sweeps (``benchmarks/results-sweep.md``)."""
    return _sweeps()


def sweep(title: str, *statuses: str) -> tuple[str, ...]:
    """The model count (``"models"``) or a status count of the sweep section ``title``."""
    found = [(models, counts) for t, models, counts in _sweeps() if t == title]
    assert len(found) == 1, (title, [t for t, _, _ in _sweeps()])
    models, counts = found[0]
    return tuple(str(models if s == "models" else counts.get(s, 0)) for s in statuses)


def literal(path: str, name: str) -> object:
    """The value of the module-level assignment ``name = <literal>`` in ``path`` (read with ``ast``, not run)."""
    import ast

    tree = ast.parse(_read(ROOT / path))
    for node in tree.body:
        targets = (node.targets if isinstance(node, ast.Assign)
                   else [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{path} has no literal {name}")


def in_source(path: str, pattern: str) -> tuple[str, ...]:
    """The groups of the matches of ``pattern`` in the file ``path``, which must all read the same (a test's bound
    or input, read as text)."""
    found = {m.groups() for m in re.finditer(pattern, _read(ROOT / path))}
    assert len(found) == 1, (path, pattern, found)
    return found.pop()


def option_default(path: str, option: str) -> str:
    """The ``default=`` of ``parser.add_argument("--option", ...)`` in the script ``path`` (read, not run)."""
    match = re.search(rf'add_argument\("{re.escape(option)}"[^\n]*?default=([^,)\s]+)', _read(ROOT / path))
    assert match, (path, option)
    return match.group(1)


def js_constant(name: str) -> str:
    """A numeric ``var``/constant of the interactive view's script (``common/htmlview/view.js``), as written."""
    match = re.search(rf"\b{re.escape(name)} = ([\d.]+)\b", _read(ROOT / "common" / "htmlview" / "view.js"))
    assert match, name
    return match.group(1)


@cache
def _view() -> dict[str, str]:
    """``benchmarks/results-view.md`` (``python benchmarks/view_load.py``): sizes, counts and load times."""
    text = _read(BENCH / "results-view.md")
    out = {"runs": re.search(r"view_load\.py --runs (\d+)", text).group(1),
           "cores": re.search(r"(\d+) cores", text).group(1)}
    explorer = re.search(r"Model Explorer graph .*?: (\d+) nodes in (\d+) layers, ([\d.]+ MB) as JSON, built in "
                         r"([\d.]+ s)", text)
    out.update(zip(("explorer nodes", "explorer layers", "explorer MB", "explorer s"), explorer.groups()))
    for label in ("", " + overlay", " + compare (QKV fused)"):
        line = re.search(rf"^- Llama, 70B dims, \d+ layers on meta{re.escape(label)}: (\d+) implementations, .*?, "
                         r"([\d.]+ MB)(?:, (\d+) overlay entries)?$", text, flags=re.M)
        out["implementations"] = line.group(1)
        out[f"MB{label}"] = line.group(2)
        if line.group(3):
            out["overlay entries"] = line.group(3)
        for fragment in ("open", "block 41 + graph of model"):
            out[f"{fragment}{label}"] = cell("results-view.md", "| page |", f"{fragment}{label}",
                                             "load (page's own, median ms)") + " ms"
    return out


def view(*keys: str) -> tuple[str, ...]:
    """Figures of ``benchmarks/results-view.md`` by key (see :func:`_view`)."""
    return tuple(_view()[k] for k in keys)


def refused_by_reason(minor_version: str, *reasons: str) -> tuple[str, ...]:
    """Refused overloads of torch ``minor_version``'s table whose reason starts with each of ``reasons``."""
    refused = [v.split(":", 2)[1:] for v in _op_table(minor_version)["aten"].values() if v.startswith("refused:")]
    out = []
    for reason in reasons:
        head, _, detail = reason.partition(": ")
        out.append(str(sum(1 for r in refused if r[0].startswith(head) and (len(r) > 1 and detail in r[1]
                                                                             if detail else True))))
    return tuple(out)


def swept_surface_models() -> dict[str, int]:
    """Models per zoo that need an overload of ``tests/security/surface_sweeps.json`` (exact with it)."""
    found = json.loads(_read(ROOT / "tests" / "security" / "surface_sweeps.json"))
    models = {m for names in found.values() for m in names}
    out: dict[str, int] = {}
    for model in models:
        out[model.split()[0]] = out.get(model.split()[0], 0) + 1
    return out
