"""``ir2torch rewrite``: run built-in rewrite passes on an IR file and its weights (reference: ``docs/cli.md``).

::

    ir2torch rewrite resnet.ir.json --pass fold-batchnorm --state resnet.safetensors \\
        -o folded.ir.json --state-out folded.safetensors --verify -i 1x3x224x224
    ir2torch rewrite model.ir.json --pass insert-after --type conv2d --new-type identity -o out.ir.json

Prints the count of changes per pass, and what each pass left alone and why (``--strict``: exit 1 and write
nothing when anything was left alone). With ``--verify``, the input IR (with its weights) and the result
are both rebuilt and run on the example inputs (``-i``); the files are written only when they agree.
Nothing is written unless every pass succeeded.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.cli.app import EXIT_FAILED, EXIT_OK, CommandError, add_allow_op, add_common_options

PASSES: dict[str, str] = {
    "fold-batchnorm": "fold every BatchNorm into the Conv/ConvTranspose/Linear it follows (eval semantics; needs "
                      "--state)",
    "fuse-qkv": "one Linear for the query/key/value projections of every attention block (needs --state)",
    "reparameterize": "merge parallel branches of one value summed (RepVGG/MobileOne: conv+BN, 1x1 conv+BN, "
                      "identity BN) into one conv (eval semantics; needs --state)",
    "remove-dropout": "remove dropout nodes (the identity in eval mode)",
    "remove-identity": "remove nn.Identity nodes",
    "replace-type": "replace every module of --type (and/or with a key matching --where) by one of --new-type, "
                    "attributes from --data (default: kept) and the same state",
    "insert-after": "insert a module of --new-type (attributes --data, no state) after every node of --type",
}


#: Lines of ``skipped`` printed per pass.
_LISTED = 20


def _pass(name: str, options: argparse.Namespace) -> Callable[..., Any]:
    """The pass ``name`` as ``fn(ir, state, allow=...)``, its options taken from ``options``.

    Raises:
        CommandError: an option the pass needs is missing.
    """
    from common.cli.inputs import parse_json_option
    from common.rewrite import fold_batchnorm, fuse_qkv, insert_after_type, remove_types, reparameterize, replace_type
    from common.rewrite.passes import DROPOUT_FUNCTIONS, DROPOUT_TYPES, IDENTITY_TYPES

    where = options.where
    data = parse_json_option(options.data, "--data") if options.data is not None else None
    if name == "replace-type" and (options.new_type is None or (options.type is None and where is None)):
        raise CommandError("replace-type needs --new-type and --type or --where",
                           hint="e.g. --pass replace-type --type relu --new-type relu6")
    if name == "insert-after" and (options.new_type is None or options.type is None):
        raise CommandError("insert-after needs --type (after what) and --new-type (what to insert)",
                           hint="e.g. --pass insert-after --type conv2d --new-type identity")
    return {
        "fold-batchnorm": lambda ir, state, allow: fold_batchnorm(ir, state, where=where, allow=allow,
                                                                  into_next=options.into_next),
        "fuse-qkv": lambda ir, state, allow: fuse_qkv(ir, state, where=where, allow=allow),
        "reparameterize": lambda ir, state, allow: reparameterize(ir, state, where=where, allow=allow),
        "remove-dropout": lambda ir, state, allow: remove_types(ir, state, DROPOUT_TYPES + DROPOUT_FUNCTIONS,
                                                                where=where, allow=allow),
        "remove-identity": lambda ir, state, allow: remove_types(ir, state, IDENTITY_TYPES, where=where,
                                                                 allow=allow),
        "replace-type": lambda ir, state, allow: replace_type(ir, state, new_type=options.new_type, type=options.type,
                                                              where=where, data=data, allow=allow),
        "insert-after": lambda ir, state, allow: insert_after_type(ir, state, options.type, type=options.new_type,
                                                                   data=data or {}, where=where, allow=allow),
    }[name]


def add_rewrite_command(commands: Any) -> None:
    """Add ``rewrite`` to the ``ir2torch`` subcommands."""
    listing = "; ".join(f"{k}: {v}" for k, v in PASSES.items())
    cmd = commands.add_parser("rewrite", help="run rewrite passes (fold-batchnorm, fuse-qkv, ...) on an IR and weights",
                              description=f"Apply the passes in order and write the rewritten IR and its weights. "
                              f"Passes: {listing}.")
    cmd.add_argument("file", type=Path, metavar="IN", help="an IR JSON file (read as data)")
    cmd.add_argument("--pass", dest="passes", action="append", required=True, choices=sorted(PASSES),
                     metavar="PASS", help=f"a pass to run (repeatable, in order): {', '.join(PASSES)}")
    cmd.add_argument("--type", metavar="TYPE", help="replace-type: the module type replaced; insert-after: the "
                     "node type (or function target) after which to insert")
    cmd.add_argument("--new-type", metavar="TYPE", help="replace-type / insert-after: the type of the new modules")
    cmd.add_argument("--data", metavar="JSON", help="replace-type / insert-after: the new modules' attributes "
                     "(a JSON object, or @file.json)")
    cmd.add_argument("--where", metavar="GLOB", help="only implementations whose key matches this glob "
                     "(every pass), e.g. 'encoder.*'")
    cmd.add_argument("--into-next", dest="into_next", action="store_true", help="fold-batchnorm: also fold a "
                     "BatchNorm that follows no layer into the Conv (no padding) or Linear reading it")
    cmd.add_argument("--state", type=Path, metavar="IN.safetensors", help="the weights of IN")
    cmd.add_argument("-o", "--output", required=True, type=Path, metavar="OUT.ir.json", help="the rewritten IR")
    cmd.add_argument("--state-out", type=Path, metavar="OUT.safetensors", help="the rewritten weights")
    cmd.add_argument("--strict", action="store_true", help="exit 1 and write nothing when a pass left anything "
                     "alone (the lines after its count say what and why)")
    cmd.add_argument("--verify", action="store_true", help="rebuild IN and OUT, run both on the -i inputs and "
                     "compare (exit code 1 and nothing written when they differ)")
    cmd.add_argument("-i", "--input", dest="inputs", action="append", default=[], metavar="[NAME=]SHAPE[:DTYPE]",
                     help="an example input for --verify, e.g. 1x3x32x32 or 2x8:int64 (repeat for more)")
    cmd.add_argument("--kwargs", metavar="JSON", help="keyword inputs of --verify that are not tensors (JSON)")
    cmd.add_argument("--seed", type=int, default=0, help="seed of the --verify inputs (default 0)")
    cmd.add_argument("--vocab", type=int, default=100, metavar="N", help="integer inputs drawn from [0, N)")
    cmd.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance of --verify (default 1e-5)")
    cmd.add_argument("--rtol", type=float, default=1e-5, help="relative tolerance of --verify (default 1e-5)")
    cmd.add_argument("--tolerance", choices=("scaled", "absolute"), default="scaled",
                     help="--verify's atol: scaled by each tensor's largest magnitude (default) or absolute")
    add_allow_op(cmd)
    add_common_options(cmd)
    cmd.set_defaults(func=rewrite_command)


def rewrite_command(options: argparse.Namespace) -> int:
    """Run ``ir2torch rewrite``; returns the exit code.

    Raises:
        CommandError: bad options or files (exit code 2); any IRError of a pass passes through (one line).
    """
    from common.ir import IR
    from common.state_dict import load_safetensors, save_safetensors

    if (options.state is None) != (options.state_out is None):
        raise CommandError("--state and --state-out go together", hint="give the weights of IN and where to "
                           "write the rewritten ones, or neither")
    if options.verify and not options.inputs:
        raise CommandError("--verify needs example inputs", hint="add -i SHAPE[:DTYPE] for each input")
    if options.verify and options.state is None:
        raise CommandError("--verify needs --state", hint="the models are compared with their weights")
    passes = [(name, _pass(name, options)) for name in options.passes]
    ir = IR.load(options.file, allow=options.allow_op)
    state = load_safetensors(options.state) if options.state is not None else None
    new_ir, new_state = ir, state
    left_alone = 0
    for name, run in passes:
        result = run(new_ir, new_state, allow=options.allow_op)
        new_ir, new_state = result
        skipped = f", {len(result.skipped)} left alone" if result.skipped else ""
        print(f"{name}: {result.count} change{'s' if result.count != 1 else ''}{skipped}")
        for line in result.skipped[:_LISTED]:
            print(f"  left alone: {line}")
        if len(result.skipped) > _LISTED:
            print(f"  ... and {len(result.skipped) - _LISTED} more")
        left_alone += len(result.skipped)
        for line in result.other_norms[:_LISTED]:
            print(f"  other norm: {line}")
        if len(result.other_norms) > _LISTED:
            print(f"  ... and {len(result.other_norms) - _LISTED} more other norms")
    if options.strict and left_alone:
        print(f"nothing written: --strict and {left_alone} left alone")
        return EXIT_FAILED
    if options.verify:
        report = _verify(options, ir, state, new_ir, new_state)
        print(report)
        if not report.ok:
            print("nothing written: the rewritten model differs from the input")
            return EXIT_FAILED
    if new_state is not None:
        save_safetensors(new_state, options.state_out)
    new_ir.save(options.output)
    print(f"wrote {options.output}" + (f" and {options.state_out}" if new_state is not None else ""))
    return EXIT_OK


def _verify(options: argparse.Namespace, ir: Any, state: Any, new_ir: Any, new_state: Any) -> Any:
    from common.cli.inputs import make_inputs, parse_input, parse_json_option
    from common.verify import verify
    from ir2torch.converter import convert

    args, kwargs = make_inputs([parse_input(text) for text in options.inputs], seed=options.seed,
                               vocab=options.vocab, extra=parse_json_option(options.kwargs, "--kwargs"))
    original = convert(ir, state, allow=options.allow_op)
    rebuilt = convert(new_ir, new_state, allow=options.allow_op)
    return verify(original, rebuilt, args, kwargs, atol=options.atol, rtol=options.rtol, rewritten=new_ir,
                  scale=options.tolerance == "scaled")


__all__ = ["PASSES", "add_rewrite_command", "rewrite_command"]
