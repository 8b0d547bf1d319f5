"""The ``torch2ir`` command line: ``demo``, ``convert`` and ``lower`` (reference: ``docs/cli.md``).

::

    torch2ir demo --out demo-out
    torch2ir convert tests.models.zoo:ConvNet --import-path . -i 2x3x16x16 -o convnet.ir.json \
        --state convnet.safetensors
    torch2ir convert bert --hf --config '{"num_hidden_layers": 2}' -i 2x8:int64 -o bert.ir.json --dynamic 0=batch,1=seq
    torch2ir lower bert --hf --meta -i 1x128:int64 -o bert.flat.json

``MODEL`` imports and runs Python code and must be trusted (an IR file is only read as data); the
current folder is searched for it only with ``--import-path .``.
Exit codes: 0 done, 2 usage or input error (one line on stderr; ``--debug`` shows the traceback).
This module imports nothing of ``ir2torch``; ``demo`` runs :func:`common.cli.demo.run_demo`.
"""

from __future__ import annotations

import argparse
import contextlib
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from common.cli.app import EXIT_OK, CommandError, Parser, add_allow_op, add_common_options, first_line, run
from common.cli.dynamic import DYNAMIC_HELP, dynamic_shapes, parse_dynamic
from common.cli.model import add_model_arguments, model_and_inputs
from common.errors import IRError
from common.progress import Progress

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``torch2ir`` parser with its commands (each sets ``func``)."""
    parser = Parser(prog="torch2ir", description="Convert PyTorch models to the torch2ir IR (module level) "
                    "or to a flat ATen graph (FlatIR).",
                    epilog="Run 'torch2ir COMMAND --help' for a command's options.")
    add_common_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="convert, lower, draw, rebuild and verify a built-in model",
                               description="The main job on a built-in conv + transformer model: convert, save the "
                               "IR JSON, lower to ATen on meta and save the FlatIR, draw the module hierarchy, rebuild "
                               "from the files, load the weights, verify, and print a report with timings.")
    demo.add_argument("--out", type=Path, metavar="DIR", help="folder for the files (default: a temporary folder)")
    add_common_options(demo)
    demo.set_defaults(func=_demo)

    convert = commands.add_parser("convert", help="convert a model to the module-level IR (JSON)",
                                  description="Build MODEL, trace it on the example inputs with torch.export and "
                                  "write the module-level IR as JSON.")
    add_model_arguments(convert, positional=True, meta=True)
    convert.add_argument("-o", "--output", required=True, type=Path, metavar="FILE", help="the IR JSON file to write")
    convert.add_argument("--state", type=Path, metavar="FILE.safetensors", help="also write the model's weights")
    convert.add_argument("--trace-every-block", action="store_true",
                         help="trace every block in full (default: alike blocks are traced once, the others are "
                         "instances of it; same IR)")
    convert.add_argument("--opaque", action="append", default=[], metavar="auto|PKG.MOD.CLASS",
                         help="keep modules torch.export cannot trace as opaque leaves: 'auto' (each failing "
                         "module's class, and each module calling a custom autograd.Function) and/or qualified "
                         "class names (repeatable); see docs/opaque.md")
    convert.add_argument("--dynamic", action="append", default=[], metavar="[INPUT.]DIM=NAME,...", help=DYNAMIC_HELP)
    add_allow_op(convert)
    add_common_options(convert)
    convert.set_defaults(func=_convert)

    lower = commands.add_parser("lower", help="lower a model to the flat ATen-level IR (FlatIR JSON)",
                                description="Build MODEL (best with --meta: weight-free) and write its flat graph of "
                                "ATen ops with tensor and weight metadata as JSON.")
    add_model_arguments(lower, positional=True, meta=True)
    lower.add_argument("-o", "--output", required=True, type=Path, metavar="FILE", help="the FlatIR JSON file to write")
    lower.add_argument("--decompose", action="store_true", help="decompose to the core ATen op set")
    lower.add_argument("--state", type=Path, metavar="FILE.safetensors", help="also write the model's weights")
    lower.add_argument("--dynamic", action="append", default=[], metavar="[INPUT.]DIM=NAME,...", help=DYNAMIC_HELP)
    add_allow_op(lower)
    add_common_options(lower)
    lower.set_defaults(func=_lower)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``torch2ir`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code."""
    return run("torch2ir", build_parser(), argv)


def _demo(options: argparse.Namespace) -> int:
    from common.cli.demo import run_demo

    return run_demo(options.out, quiet=options.quiet)


def _prepare(options: argparse.Namespace) -> None:
    """Refuse option combinations that cannot work before building anything; create output folders."""
    if options.state is not None and getattr(options, "meta", False):
        raise CommandError("--state needs real weights, but --meta builds the model without any",
                           hint="drop --meta to write the weights, or drop --state")
    for path in (options.output, options.state):
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)


def _convert(options: argparse.Namespace) -> int:
    from common.state_dict import save_safetensors
    from torch2ir.converter import convert

    _prepare(options)
    with Progress(3 + (options.state is not None), "convert", enabled=not options.quiet) as bar:
        with bar.stage("build model"):
            model, args, kwargs = model_and_inputs(options)
            dynamic = dynamic_shapes(model, args, kwargs, parse_dynamic(options.dynamic))
        with bar.stage("export + convert"):
            # "auto" alone, classes, or both ("auto" and TensorNorm: torch2ir.opaque.driver)
            opaque = "auto" if set(options.opaque) == {"auto"} else options.opaque or None
            with _dynamic_refused(dynamic):
                ir = convert(model, args, kwargs, allow=options.allow_op, trace_once=not options.trace_every_block,
                             opaque=opaque, dynamic_shapes=dynamic)
        with bar.stage("save IR"):
            ir.save(options.output)
        if options.state is not None:
            with bar.stage("save weights"):
                save_safetensors(model.state_dict(), options.state)
    types = Counter(impl.type for impl in ir.values())
    print(f"wrote {options.output}: {len(ir)} implementations "
          f"({', '.join(f'{n} {t}' for t, n in types.most_common(5))}{', ...' if len(types) > 5 else ''})"
          + (f"; weights in {options.state}" if options.state is not None else ""))
    return EXIT_OK


#: What torch.export says when a dimension marked dynamic cannot stay symbolic.
_DYNAMIC_CONFLICT = ("Constraints violated", "conflicts between user-specified ranges", "specialized", "specialize")


@contextlib.contextmanager
def _dynamic_refused(dynamic: Any) -> Iterator[None]:
    """Turn export's refusal of a ``--dynamic`` dimension into a command error that says what to change."""
    try:
        yield
    except IRError as exc:
        text = f"{exc} {exc.__cause__ or ''}"
        if dynamic is None or not any(marker in text for marker in _DYNAMIC_CONFLICT):
            raise
        raise CommandError(f"a --dynamic dimension cannot stay symbolic: {first_line(exc)}",
                           hint="torch.export specialises a dimension whose example size is 1 (give it a size of 2 "
                           "or more) or that the model fixes (leave it out of --dynamic); TORCH_LOGS=+dynamic "
                           "shows why") from exc


def _lower(options: argparse.Namespace) -> int:
    from common.state_dict import save_safetensors
    from torch2ir.lowering.capture import lower

    _prepare(options)
    with Progress(3 + (options.state is not None), "lower", enabled=not options.quiet) as bar:
        with bar.stage("build model"):
            model, args, kwargs = model_and_inputs(options)
            dynamic = dynamic_shapes(model, args, kwargs, parse_dynamic(options.dynamic))
        with bar.stage("export + lower"), _dynamic_refused(dynamic):
            flat = lower(model, args, kwargs, decompose=options.decompose, allow=options.allow_op,
                         dynamic_shapes=dynamic)
        with bar.stage("save FlatIR"):
            flat.save(options.output)
        if options.state is not None:
            with bar.stage("save weights"):
                save_safetensors(model.state_dict(), options.state)
    print(f"wrote {options.output}: {len(flat.nodes)} ATen ops, {len(flat.weights)} weights"
          + (f"; weights in {options.state}" if options.state is not None else ""))
    return EXIT_OK
