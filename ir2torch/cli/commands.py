"""The ``ir2torch`` command line: ``show``, ``render``, ``view``, ``verify``, ``diff``, ``rewrite`` (``docs/cli.md``).

::

    ir2torch show convnet.ir.json
    ir2torch view convnet.ir.json -o convnet.html
    ir2torch render convnet.ir.json -o convnet.png --depth 2
    ir2torch render convnet.ir.json -o features.svg --impl features
    ir2torch verify convnet.ir.json --model tests.models.zoo:ConvNet --import-path . -i 2x3x16x16 \
        --state convnet.safetensors
    ir2torch diff a.ir.json b.ir.json

Every command reads both the module-level IR and the FlatIR (told apart by the file's header).
A file is data: reading, drawing or rebuilding it runs no code from it, and whatever goes wrong with
it (an ``IRError`` or any other exception) ends as one line on stderr. ``--model`` of ``verify``
imports and runs Python code and must be trusted.
Exit codes: 0 done (verify: outputs match; diff: files equal), 1 verify found a difference (or the
rebuilt model raised where the original ran) or diff found one, 2 usage or input error (one line on
stderr; ``--debug`` shows the traceback). This module imports nothing of ``torch2ir``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from common.cli.app import (
    EXIT_FAILED,
    EXIT_OK,
    CheckFailedError,
    CommandError,
    Parser,
    add_allow_op,
    add_common_options,
    first_line,
    run,
)
from common.cli.model import add_model_arguments, model_and_inputs
from common.errors import InputMismatchError, IRError, StateDictError
from common.progress import Progress

__all__ = ["build_parser", "main"]


def _depth(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--depth", type=int, metavar="N",
                        help="fold modules deeper than N into their ancestor (root is depth 0)")
    parser.add_argument("--no-collapse", dest="collapse", action="store_false",
                        help="show every block of a run of identical blocks (by default layers.0-31 are one "
                        "'0-31 x32' entry)")


def build_parser() -> argparse.ArgumentParser:
    """The ``ir2torch`` parser with its commands (each sets ``func``)."""
    parser = Parser(prog="ir2torch", description="Inspect, draw, compare and rebuild torch2ir IR files "
                    "(module-level IR or FlatIR).", epilog="Run 'ir2torch COMMAND --help' for a command's options.")
    add_common_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    show = commands.add_parser("show", help="summarise an IR or FlatIR file",
                               description="Print the model class, implementations (or ops) by type, node counts, "
                               "parameters, inputs and the module tree of an IR or FlatIR file.")
    show.add_argument("file", type=Path, metavar="FILE", help="an IR or FlatIR JSON file")
    _depth(show)
    add_allow_op(show)
    add_common_options(show)
    show.set_defaults(func=_show)

    render = commands.add_parser("render", help="draw the module hierarchy or one graph (png, svg, dot, mmd)",
                                 description="Draw the module hierarchy of FILE, or with --impl the graph of one "
                                 "implementation (FlatIR: the ops run in one module). The output's suffix picks the "
                                 "format: .png/.svg need matplotlib (the viz extra), .dot/.mmd need nothing.")
    render.add_argument("file", type=Path, metavar="FILE", help="an IR or FlatIR JSON file")
    render.add_argument("-o", "--output", required=True, type=Path, metavar="OUT",
                        help="the picture: .png, .svg, .dot/.gv (Graphviz) or .mmd (Mermaid)")
    render.add_argument("--impl", metavar="KEY", help="draw this implementation's graph (FlatIR: this module's ops)")
    render.add_argument("--format", choices=("png", "svg", "dot", "mermaid"), help="override the suffix")
    _depth(render)
    add_allow_op(render)
    add_common_options(render)
    render.set_defaults(func=_render)

    from ir2torch.cli.view import add_view_command

    add_view_command(commands)

    verify = commands.add_parser("verify", help="rebuild FILE, load weights and compare with the original model",
                                 description="Build the original with --model, rebuild FILE with ir2torch, load the "
                                 "weights (--state, else the original's) into both, run both on the example inputs "
                                 "and print the verify table. With --against ORIGINAL.ir.json instead of --model "
                                 "(a rewritten FILE against the IR it was rewritten from), both files are rebuilt, "
                                 "each with its own weights, and no code is imported. Exit code 1 when the outputs "
                                 "differ.")
    verify.add_argument("file", type=Path, metavar="FILE", help="an IR or FlatIR JSON file (read as data)")
    add_model_arguments(verify, positional=False, meta=False, model_required=False)
    verify.add_argument("--state", type=Path, metavar="FILE.safetensors", help="weights written by torch2ir --state "
                        "(or by ir2torch rewrite --state-out for a rewritten FILE)")
    verify.add_argument("--against", type=Path, metavar="ORIGINAL.ir.json", help="compare with the model rebuilt "
                        "from this IR instead of --model (FILE rewritten from it: the table names the first "
                        "diverging module through FILE's provenance)")
    verify.add_argument("--original-state", dest="original_state", type=Path, metavar="ORIGINAL.safetensors",
                        help="with --against: the weights of ORIGINAL")
    verify.add_argument("--report", type=Path, metavar="REPORT.json", help="also write each module's max abs diff "
                        "as JSON ({module path: number}; null where shapes differ), for ir2torch view --overlay")
    verify.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (default 1e-5; scaled by each "
                        "output's largest magnitude unless --tolerance absolute)")
    verify.add_argument("--tolerance", choices=("scaled", "absolute"), default="scaled",
                        help="scaled (default): atol x each tensor's largest magnitude (at least 1), so outputs of "
                        "1e7 from random weights are compared at their own scale; absolute: atol as given")
    verify.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance (default 1e-5)")
    add_allow_op(verify)
    add_common_options(verify)
    verify.set_defaults(func=_verify)

    diff = commands.add_parser("diff", help="list the implementations and attributes that differ between two files",
                               description="Compare two IR files (or two FlatIR files): implementations only in one, "
                               "and every attribute, node, edge, state or meta field that differs. Exit code 1 when "
                               "they differ, 0 when they are equal.")
    diff.add_argument("a", type=Path, metavar="A", help="the first file")
    diff.add_argument("b", type=Path, metavar="B", help="the second file")
    add_allow_op(diff)
    add_common_options(diff)
    diff.set_defaults(func=_diff)

    from ir2torch.cli.rewrite import add_rewrite_command

    add_rewrite_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``ir2torch`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    return run("ir2torch", build_parser(), argv)


@contextmanager
def _reading(what: str) -> Iterator[None]:
    """Turn any exception other than an :class:`IRError` raised while handling a file into a one-line error.

    A file may be damaged or crafted; whatever it makes a library raise names the file and the error's class.

    Raises:
        CommandError: the block raised an exception that is not an ``IRError`` (chained to it).
    """
    try:
        yield
    except IRError:
        raise
    except Exception as exc:  # a file is untrusted data: any failure of a library on it is a bad input
        raise CommandError(f"cannot {what}: {first_line(exc)}",
                           hint="the file may be damaged or edited; run with --debug for the traceback") from exc


def _show(options: argparse.Namespace) -> int:
    from common.cli.summary import describe

    with _reading(f"summarise {options.file}"):
        text = describe(options.file, depth=options.depth, allow=options.allow_op, collapse=options.collapse)
    print(text)
    return EXIT_OK


def _render(options: argparse.Namespace) -> int:
    from common.cli.summary import load_any
    from common.render import format_of, render

    fmt = format_of(options.output, options.format)  # fail on a bad suffix before loading anything
    with Progress(2, "render", enabled=not options.quiet) as bar:
        with bar.stage("load"), _reading(f"read {options.file}"):
            source = load_any(options.file, allow=options.allow_op)
        with bar.stage("draw"), _reading(f"draw {options.file}"):
            options.output.parent.mkdir(parents=True, exist_ok=True)
            render(source, options.output, fmt=fmt, impl=options.impl, depth=options.depth,
                   collapse=options.collapse)
    print(f"wrote {options.output}")
    return EXIT_OK


def _verify(options: argparse.Namespace) -> int:
    from common.state_dict import load_safetensors
    from common.verify import VerificationError, verify
    from ir2torch.converter import convert

    if not options.file.is_file():
        raise CommandError(f"no such file: {options.file}", hint="pass the IR written by torch2ir convert")
    if options.against is not None or options.original_state is not None:
        return _verify_against(options)
    if options.model is None:
        raise CommandError("verify needs --model (the original model) or --against (the original IR)",
                           hint="--model package.module:factory, or --against ORIGINAL.ir.json --original-state "
                           "ORIGINAL.safetensors for a rewritten FILE")
    with Progress(4, "verify", enabled=not options.quiet) as bar:
        with bar.stage("build original"):
            model, args, kwargs = model_and_inputs(options)
        with bar.stage("load weights"):
            if options.state is None:
                state = model.state_dict()
            else:
                with _reading(f"read {options.state}"):
                    state = load_safetensors(options.state)
                try:
                    model.load_state_dict(state, strict=True)
                except RuntimeError:
                    raise CommandError(f"{options.state} does not fit the model built by {options.model!r}: "
                                       f"{_key_differences(model.state_dict(), state)}",
                                       hint="pass the --model and --config used when the file was written") from None
        with bar.stage("rebuild"), _reading(f"rebuild {options.file}"):
            try:
                rebuilt = convert(options.file, state, allow=options.allow_op)
            except StateDictError as exc:
                source = options.state if options.state is not None else f"the model built by {options.model!r}"
                raise CommandError(f"the weights of {source} do not fit {options.file}: {_summary(exc.message)}",
                                   key=exc.key, hint="pass the --model and --config (or the --state) "
                                   f"{options.file.name} was converted from") from exc
        with bar.stage("verify"):
            try:
                report = verify(model, rebuilt, args, kwargs, atol=options.atol, rtol=options.rtol,
                                scale=options.tolerance == "scaled")
            except VerificationError as exc:
                raise _forward_failed(exc, options) from exc
    print(report)
    _write_report(report, options.report)
    return EXIT_OK if report.ok else EXIT_FAILED


def _verify_against(options: argparse.Namespace) -> int:
    """``verify FILE --against ORIGINAL``: rebuild both files with their own weights and compare (no code imported;
    the table names the first diverging module through FILE's ``meta.provenance``)."""
    from common.cli.inputs import make_inputs, parse_input, parse_json_option
    from common.ir import IR
    from common.state_dict import load_safetensors
    from common.verify import VerificationError, verify
    from ir2torch.converter import convert

    if options.model is not None or options.hf:
        raise CommandError("--against replaces --model", hint="give one original: a model or an IR file")
    if options.against is None or options.original_state is None or options.state is None:
        raise CommandError("--against, --original-state and --state go together",
                           hint="each model is rebuilt from its own file and weights: --against ORIGINAL.ir.json "
                           "--original-state ORIGINAL.safetensors --state FILE.safetensors")
    if not options.inputs:
        raise CommandError("verify --against needs example inputs", hint="add -i SHAPE[:DTYPE] for each input")
    for path in (options.against, options.original_state, options.state):
        if not path.is_file():
            raise CommandError(f"no such file: {path}")
    with Progress(4, "verify", enabled=not options.quiet) as bar:
        with bar.stage("load"), _reading(f"read {options.file}"):
            rewritten = IR.load(options.file, allow=options.allow_op)
        with bar.stage("rebuild original"), _reading(f"rebuild {options.against}"):
            original = convert(options.against, load_safetensors(options.original_state), allow=options.allow_op)
        with bar.stage("rebuild"), _reading(f"rebuild {options.file}"):
            rebuilt = convert(rewritten, load_safetensors(options.state), allow=options.allow_op)
        args, kwargs = make_inputs([parse_input(text) for text in options.inputs], seed=options.seed,
                                   vocab=options.vocab, extra=parse_json_option(options.kwargs, "--kwargs"))
        with bar.stage("verify"):
            try:
                report = verify(original, rebuilt, args, kwargs, atol=options.atol, rtol=options.rtol,
                                rewritten=rewritten, scale=options.tolerance == "scaled")
            except VerificationError as exc:
                cause = exc.__cause__ if exc.__cause__ is not None else exc
                if str(exc).startswith("the rebuilt model"):
                    raise CheckFailedError(f"the model rebuilt from {options.file} raised where the one rebuilt from "
                                           f"{options.against} ran: {first_line(cause)}") from exc
                raise CommandError(f"the model rebuilt from {options.against} raised on the example inputs: "
                                   f"{first_line(cause)}", hint="check --input and --kwargs") from exc
    print(report)
    _write_report(report, options.report)
    return EXIT_OK if report.ok else EXIT_FAILED


def _write_report(report: Any, path: Path | None) -> None:
    """``--report``: each module's max abs diff as one JSON object (an overlay ``ir2torch view`` reads)."""
    if path is None:
        return
    import json
    import math

    from common.atomic_files import write_text_atomic

    data = {key: (value if math.isfinite(value) else None) for key, value in report.module_diffs.items()}
    with _reading(f"write {path}"):
        write_text_atomic(path, json.dumps(data, indent=1) + "\n")
    print(f"wrote {path} ({len(data)} modules)")


def _first(keys: list[str], limit: int = 3) -> str:
    return ", ".join(keys[:limit]) + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")


def _key_differences(expected: dict, given: dict) -> str:
    """``3 missing (a, b, c, ... (13 more)); 2 unexpected (...)``: how ``given``'s keys differ from ``expected``'s."""
    missing = [k for k in expected if k not in given]
    unexpected = [k for k in given if k not in expected]
    shapes = [k for k in expected if k in given and tuple(expected[k].shape) != tuple(given[k].shape)]
    parts = [f"{len(keys)} {what} ({_first(keys)})" for keys, what in
             ((missing, "missing"), (unexpected, "unexpected"), (shapes, "of another shape")) if keys]
    return "; ".join(parts) or "the keys differ"


def _summary(message: str) -> str:
    """A :class:`StateDictError`'s counts and its first few keys, on one line (it lists every key)."""
    head, *listed = message.split("\n  ")
    return f"{head} {_first([line.split(':', 1)[0] for line in listed])}" if listed else head


def _forward_failed(exc: Exception, options: argparse.Namespace) -> CommandError:
    """The one-line error of a forward pass that raised in ``verify``.

    The original raising means the example inputs (or the model options) are wrong: exit code 2. The
    rebuilt model raising where the original ran means the file does not reproduce the model: the
    check failed, exit code 1.
    """
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    if str(exc).startswith("the rebuilt model") and isinstance(cause, InputMismatchError):
        return CommandError(f"the model rebuilt from {options.file} refuses these inputs: {first_line(cause)}",
                            hint="the file was converted for the input shapes it names: pass inputs of those shapes, "
                            "or convert the model again with the sizes that vary kept symbolic (torch2ir convert "
                            "--dynamic 0=batch,1=seq)")
    if str(exc).startswith("the rebuilt model"):  # common.verify names the side that raised first
        return CheckFailedError(f"the model rebuilt from {options.file} raised during its forward pass, where the "
                                f"original ran: {first_line(cause)}",
                                hint="the file does not reproduce the model: compare it with a fresh "
                                "torch2ir convert (ir2torch diff); --debug shows the traceback")
    return CommandError(f"the original model {options.model!r} raised on the example inputs: {first_line(cause)}",
                        hint="check --input (shapes, dtypes), --kwargs and --config against the model's forward")


def _diff(options: argparse.Namespace) -> int:
    from common.cli.summary import diff

    with _reading(f"compare {options.a} with {options.b}"):
        lines = diff(options.a, options.b, allow=options.allow_op)
    for line in lines:
        print(line)
    if not lines:
        print(f"{options.a} and {options.b} hold equal IRs")
        return EXIT_OK
    print(diff_summary(lines, options.a.name, options.b.name))
    return EXIT_FAILED


def diff_summary(lines: list[str], a: str, b: str) -> str:
    """The last line of ``ir2torch diff``: every count with its unit (``+``/``-`` lines name an entry found in one
    file only; ``~`` lines one changed field, ``~ WHERE: field``)."""
    def n(count: int, unit: str) -> str:
        return f"{count} {unit}{'s' if count != 1 else ''}"

    added = sum(line.startswith("+ ") for line in lines)
    removed = sum(line.startswith("- ") for line in lines)
    fields = [line[2:].split(":", 1)[0] for line in lines if line.startswith("~ ")]
    return (f"{n(len(lines), 'difference')}: {n(removed, 'entry')} only in {a}, {n(added, 'entry')} only in {b}, "
            f"{n(len(fields), 'changed field')} in {n(len(set(fields)), 'place')}").replace("entrys", "entries")
