"""Rows of :data:`tests.docs.figures.FIGURES` for the pages' records of past runs, read from the results files that
keep them: the long op-level fuzz (``benchmarks/results-op-fuzz.md``, a row per run of ``scripts/op_fuzz.py``) and
``make test-newest``'s duration (``benchmarks/results-newest.md``, a row per ``scripts/newest_site.py --record``),
the suites' run on torch 2.14.1 (``benchmarks/results-torch-2.14.md``)."""

from __future__ import annotations

import re

from tests.docs import derived as d
from tests.docs import sources as s
from tests.docs.row import Figure

_SPEC = "docs/ir-spec.md"
_FUZZ = "results-op-fuzz.md"


def spaced(n: str) -> str:
    """A count as the pages write it: ``12 550``, but ``2012`` (a space from five digits on)."""
    return d.thousands(n) if len(n) > 4 else n


def fuzz(run: str, *columns: str) -> tuple[str, ...]:
    """Cells of the run of ``results-op-fuzz.md`` whose name starts with ``run``, as the pages write them (counts
    spaced, seconds with their unit); the run must have found nothing unless its findings are asked for."""
    def cell(column: str) -> str:
        return s.cell(_FUZZ, None, run + "...", column)

    assert "findings" in columns or cell("findings") == "0", (run, cell("findings"))
    return tuple(cell(c) + " s" if c == "seconds" else spaced(cell(c)) for c in columns)


def _when(run: str, pattern: str) -> tuple[str, ...]:
    found = re.search(pattern, s.cell(_FUZZ, None, run + "...", "when and where"))
    assert found, (run, pattern)
    return found.groups()


def _command(run: str, option: str) -> str:
    found = re.search(rf"{option} (\d+)", s.cell(_FUZZ, None, run + "...", "command"))
    assert found, (run, option)
    return found.group(1)


def before_surface() -> tuple[str, ...]:
    """The last long run over the allowed operators before the default surface."""
    run = "the allowed operators"
    return (*_when(run, r"torch (\S+)"), *_when(run, r"(\d+) cores"), *fuzz(run, "documents", "operators", "seconds"))


def surface_50() -> tuple[str, ...]:
    """The first run over the default surface."""
    run = "the default surface but"
    return (_command(run, "--per-op"), _command(run, "--shards"),
            *fuzz(run, "documents", "documents per operator", "operators", "seconds"))


def long_run() -> tuple[str, ...]:
    """The long run: its shards, the one finding's shard, and the others' documents, time and outcomes."""
    run = "the long run, its"
    shards = _command(run, "--shards")
    assert fuzz("the long run, the shard", "findings") == ("1",)
    others, = re.match(r"the long run, its (\d+) other shards", s.cell(_FUZZ, None, run + "...", "run")).groups()
    assert int(others) == int(shards) - 1
    per_op = re.fullmatch(r"(\d+) \((\d+) for the (\d+) operators added while it ran\)",
                          s.cell(_FUZZ, None, run + "...", "documents per operator"))
    assert per_op, run
    most, fewer, added = per_op.groups()
    operators, = fuzz(run, "operators")
    return (_command(run, "--per-op"), shards, others, *fuzz(run, "documents", "seconds"), *_when(run, r"(\d+) cores"),
            most, str(int(operators) - int(added)), fewer, added,
            *fuzz(run, "ExecutionError", "ArgumentMismatchError", "UnsafeTargetError", "ResourceBudgetError", "ran"))


def _minutes(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60} s"


def _newest_left() -> tuple[str]:
    """The least time installing must leave the tests, in minutes."""
    seconds, = s.in_source("scripts/newest_site.py", r"if left < (\d+):")
    return (f"{int(seconds) / 60:g}",)


def newest_runs() -> tuple[str, ...]:
    """The first row of ``results-newest.md`` (three runs as ranges): about how many minutes, the whole check's
    range, how many runs, the cores and load, and the range of the part installing."""
    row = s.table("results-newest.md")[0]
    low, high = map(int, re.fullmatch(r"(\d+)-(\d+) s", row["whole check"]).groups())
    assert "-n 1" in row["pytest arguments"] and row["run"] == "three runs"
    return (str(round((low + high) / 2 / 60)), _minutes(low), _minutes(high),
            *re.fullmatch(r"\S+; (\d+) cores, load average about (\d+) \(other work\)", row["when and where"]).groups(),
            *re.fullmatch(r"(\d+)-(\d+ s)", row["of it installing"]).groups())


def torch_214() -> tuple[str, ...]:
    """README's record of the suites on torch 2.14.1 (``results-torch-2.14.md``): the tests of ``make test``, its
    CUDA build, passed, failed and the failures by cause; ``make test-zoo``'s two parts; ``make test-newest``."""
    text = (s.BENCH / "results-torch-2.14.md").read_text(encoding="utf-8")
    version, cuda = re.search(r"on torch (\S+) \(its CUDA (\d+) build", text).groups()
    row = {r["run"]: r for r in s.table("results-torch-2.14.md")}
    test, first = row["`make test`"], row["`make test-zoo`, first part"]
    second, = (r for k, r in row.items() if k.startswith("`make test-zoo`, the other"))
    rest, again = re.search(r"the other (\d+) and the first (\d+) again", second["run"]).groups()
    assert int(rest) + int(again) == int(second["tests"]) and int(test["passed"]) + int(test["failed"]) == int(
        test["tests"])
    causes = re.findall(r"(\d+) (?:the|fixed)", test["the failures"])
    assert sum(map(int, causes)) == int(test["failed"])
    return (test["tests"], version, cuda, test["passed"], test["failed"], *causes, str(int(first["tests"]) + int(rest)),
            first["tests"], first["failed"], rest, again, second["passed"], row["`make test-newest`"]["passed"])


FIGURES: list[Figure] = [
    Figure(_SPEC, "op fuzz before the default surface",
           r"the last long run \(torch (\S+), (\d+) cores shared with other jobs\) ran (\d[\d ]*) examples over the "
           r"(\d+) allowed operators in (\d+ s) without a finding", before_surface),
    Figure(_SPEC, "op fuzz over the default surface",
           r"`scripts/op_fuzz\.py --per-op (\d+) --shards (\d+)` ran (\d[\d ]*) documents, (\d+) starting with each "
           r"of (\d+) operators, in (\d+ s) without a finding", surface_50),
    Figure(_SPEC, "the long op fuzz",
           r"`scripts/op_fuzz\.py --per-op (\d+) --shards (\d+)` then found one: .*? Its (\d+) other shards ran "
           r"(\d[\d ]*) documents in (\d+ s) \((\d+) cores shared with other jobs\) without a finding: (\d+) starting "
           r"with each of the (\d+) operators of the surface then, (\d+) with each of the (\d+) added while it ran "
           r"\(the ecosystem tests' models\); (\d[\d ]*) `ExecutionError`, (\d[\d ]*) `ArgumentMismatchError`, "
           r"(\d[\d ]*) `UnsafeTargetError`, (\d[\d ]*) `ResourceBudgetError`, (\d[\d ]*) ran\.", long_run),
    Figure(_SPEC, "op fuzz of the operators added after the long run",
           r"this library's (\d+) straight-through estimators\) then had (\d+) documents each: (\d+) operators, "
           r"(\d[\d ]*) documents in (\d+ s) without a finding \((\d[\d ]*) `ExecutionError`, (\d[\d ]*) "
           r"`UnsafeTargetError`, (\d[\d ]*) `ArgumentMismatchError`, (\d[\d ]*) `ResourceBudgetError`, (\d[\d ]*) "
           r"ran\)",
           lambda: (*fuzz("the straight-through", "operators"),
                    *fuzz("the operators added", "documents per operator", "operators", "documents", "seconds",
                          "ExecutionError", "UnsafeTargetError", "ArgumentMismatchError", "ResourceBudgetError",
                          "ran"))),
    Figure(_SPEC, "op fuzz of the newest extras", r"comparison extras (\d+) each in two more runs \((\d[\d ]*) "
           r"documents, none\)", lambda: fuzz("the timm sweep's", "documents per operator", "documents")),
    Figure(_SPEC, "op fuzz of the long run's operators again",
           r"and the (\d+) of the long run (\d+) more each \((\d[\d ]*) in (\d+ s), none\)",
           lambda: fuzz("the operators of the long run", "operators", "documents per operator", "documents",
                        "seconds")),
    Figure(_SPEC, "op fuzz of devices and generators", r"leaves the generator out: (\d[\d ]*) documents, none\.",
           lambda: fuzz("`aten.to.device`", "documents")),
    Figure("docs/opaque.md", "op fuzz of the straight-through estimators",
           r"a few documents each in the CI sample; (\d+) each, (\d[\d ]*) documents: (\d[\d ]*) run, (\d[\d ]*) "
           r"`ExecutionError`, no finding\)",
           lambda: fuzz("the straight-through", "documents per operator", "documents", "ran", "ExecutionError")),
    Figure("docs/opaque.md", "op fuzz of brevitas' extras",
           r"`clamp_max\.Tensor` are reviewed extras, fuzzed: (\d[\d ]*) documents, (\d[\d ]*) run, (\d[\d ]*) "
           r"`ExecutionError`, no finding;", lambda: fuzz("brevitas' reviewed extras", "documents", "ran",
                                                            "ExecutionError")),
    Figure("docs/testing.md", "make test-newest's duration",
           r"it takes about (\d+) minutes: (\d+ min \d+ s) to (\d+ min \d+ s) in three runs with "
           r"`PYTEST_ARGS=\"-n 1\"` on (\d+) cores at a load average of (\d+) \(other work\), (\d+) to (\d+ s) of "
           r"which resolving and installing", newest_runs),
    Figure("docs/testing.md", "make test-newest's time left to test",
           r"an index so slow that installing left less than (\d+) minutes is `NOT TESTED`",
           _newest_left),
    Figure("docs/testing.md", "make test-newest skipped", r"skip the check with a message and exit code (\d+)\.",
           lambda: s.in_source("scripts/newest_site.py", r"NOT TESTED: \{error\}\", file=sys\.stderr\)\n +return 1 "
                               r"if args\.strict else (\d+)")),
    Figure("docs/testing.md", "gradients' tolerance", r"has the original's gradient \(name by name, within (\S+)\)\.",
           lambda: (str(s.literal("tests/real/test_gradients.py", "TOLERANCE")).replace("1e-05", "1e-5"),)),
    Figure("README.md", "the suites on torch 2.14.1",
           r"the whole everyday suite \(`make test`'s (\d+) tests\) ran on torch (\S+) \(its CUDA (\d+) build, on CPU, "
           r"in an environment of its own\): (\d+) passed; of the (\d+) failures, (\d+) were the environment .*?, "
           r"(\d+) its CUDA build .*?, and (\d+) were fixed: .*?`make test-zoo`'s (\d+) tests ran there in two parts: "
           r"the first (\d+) \((\d+) failed, .*?\), then the other (\d+) with the first (\d+) again \((\d+) passed\)\. "
           r"The (\d+) tests `make test-newest` selected then pass on it", torch_214),
]
