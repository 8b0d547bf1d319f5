"""The model a command works on: ``package.module:factory`` or a ``transformers`` config name (``--hf``).

- ``MODEL`` is ``package.module:factory`` (or ``path/to/file.py:factory``); ``factory`` is any
  callable returning an ``nn.Module`` (a class, a function, ``module:Outer.build``). ``--config JSON``
  passes keyword arguments to it. ``MODEL`` imports and runs Python code, so it must be code you trust,
  unlike an IR file, which is only read as data.
- Modules are found on the installed import path only: the current folder is *not* searched, so a
  ``json.py`` or ``torch.py`` lying in it cannot shadow a real module. ``--import-path DIR``
  (repeatable) puts ``DIR`` first on ``sys.path`` for the rest of the command, e.g. ``--import-path .``
  to reach ``tests.models.zoo`` from a source checkout.
- With ``--hf``, ``MODEL`` is a ``transformers`` model type (``bert``, ``gpt2``, ``llama``): the model
  is ``AutoModel.from_config(AutoConfig.for_model(MODEL, **config))`` with random weights, built
  offline. ``--config JSON`` overrides config fields (``{"num_hidden_layers": 2}``); ``use_cache`` is
  off and attention is ``eager`` unless the config says otherwise.

Models are built under ``torch.manual_seed(--seed)``, in eval mode, and with ``--meta`` on the
``meta`` device (no weight is allocated).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import importlib.util
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .app import CommandError
from .inputs import make_inputs, parse_input, parse_json_option

__all__ = ["TRUST_NOTE", "add_import_path", "add_model_arguments", "build_model", "load_factory",
           "model_and_inputs"]

_SPEC_HINT = "write MODEL as package.module:factory (a callable returning an nn.Module), or a config name with --hf"

#: One sentence on trust, shared by the ``--help`` of every option that takes a ``MODEL``.
TRUST_NOTE = ("MODEL imports and runs Python code, so use only code you trust; an IR file, by contrast, "
              "is only read as data")


def add_model_arguments(parser: argparse.ArgumentParser, *, positional: bool, meta: bool,
                        model_required: bool = True) -> None:
    """Add the options that choose a model and its example inputs.

    Args:
        parser: a command's parser.
        positional: ``MODEL`` is a positional argument (``convert``) rather than ``--model`` (``verify``).
        meta: offer ``--meta``.
        model_required: ``--model`` must be given (else the command checks when it needs one).
    """
    help_model = ("package.module:factory returning an nn.Module, or a transformers model type with --hf. "
                  f"{TRUST_NOTE}.")
    if positional:
        parser.add_argument("model", metavar="MODEL", help=help_model)
    else:
        parser.add_argument("--model", required=model_required, metavar="MODEL", help=help_model)
    parser.add_argument("--import-path", dest="import_path", action="append", default=[], metavar="DIR",
                        help="search DIR first for MODEL's modules (repeatable; e.g. --import-path . for the "
                        "current folder, which is not searched otherwise). Only for folders you trust.")
    parser.add_argument("--hf", action="store_true", help="MODEL is a transformers model type (bert, gpt2, ...)")
    parser.add_argument("--config", metavar="JSON",
                        help="factory keyword arguments, or with --hf config overrides (JSON object or @file.json)")
    parser.add_argument("-i", "--input", dest="inputs", action="append", default=[], metavar="[NAME=]SHAPE[:DTYPE]",
                        help="an example input, e.g. 2x3x32x32, 2x8:int64, mask=2x8:int64:0..2 (repeat for more)")
    parser.add_argument("--kwargs", metavar="JSON", help="keyword inputs that are not tensors (JSON object)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the model's weights and the inputs (default 0)")
    parser.add_argument("--vocab", type=int, default=100, metavar="N",
                        help="integer inputs without a range are drawn from [0, N) (default 100)")
    if meta:
        parser.add_argument("--meta", action="store_true", help="build the model and inputs on the meta device")


def add_import_path(folders: Sequence[str | os.PathLike[str]]) -> None:
    """Put ``folders`` first on ``sys.path``, in the order given (``--import-path``), as absolute paths.

    This is the only way the command line adds a folder to the import path; the current folder is
    not added unless it is one of ``folders``.

    Args:
        folders: folders the user asked to import from (relative ones are resolved against the current folder).

    Raises:
        CommandError: a folder does not exist.
    """
    paths = [os.path.abspath(folder) for folder in folders]
    for given, path in zip(folders, paths):
        if not os.path.isdir(path):
            raise CommandError(f"--import-path {os.fspath(given)!r} is not a folder",
                               hint="pass the folder that holds MODEL's top-level package")
    for path in reversed(paths):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)


def load_factory(spec: str, *, import_path: Sequence[str | os.PathLike[str]] = ()) -> Callable[..., Any]:
    """The callable named by ``package.module:attr`` or ``path/file.py:attr``.

    The module is imported from ``sys.path`` as it is, after ``import_path`` is put first (see
    :func:`add_import_path`); the current folder is never added on its own.

    Args:
        spec: ``package.module:attr`` or ``path/file.py:attr``; it imports and runs code, so it must be trusted.
        import_path: folders to search first (``--import-path``).

    Raises:
        CommandError: the spec is malformed, a folder of ``import_path`` is missing, the module cannot be
            imported or has no such attribute, or the attribute is not callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise CommandError(f"model {spec!r} is not of the form package.module:factory", hint=_SPEC_HINT)
    add_import_path(import_path)
    module = _import(module_name, spec)
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            names = [n for n in dir(target) if not n.startswith("_")]
            near = difflib.get_close_matches(part, names, n=3)
            raise CommandError(f"model factory {spec!r}: {module_name} has no attribute {attr!r}",
                               hint=f"did you mean {', '.join(near)}?" if near else "check the name after ':'")
        target = getattr(target, part)
    if not callable(target):
        raise CommandError(f"model factory {spec!r} is a {type(target).__name__}, not a callable", hint=_SPEC_HINT)
    return target


def _import(name: str, spec: str) -> Any:
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise CommandError(f"model factory {spec!r}: no such file {name!r}", hint=_SPEC_HINT)
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        if module_spec is None or module_spec.loader is None:
            raise CommandError(f"model factory {spec!r}: cannot load {name!r} as Python", hint=_SPEC_HINT)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise CommandError(f"model factory {spec!r}: no module named {exc.name!r}",
                               hint=_not_found_hint(exc.name)) from None
        raise CommandError(f"model factory {spec!r}: importing {name} failed: {exc}") from exc


def _not_found_hint(name: str) -> str:
    top = name.split(".")[0]
    here = Path.cwd()
    if (here / top).is_dir() or (here / f"{top}.py").is_file():
        return (f"{top!r} is in the current folder, which is not searched: pass --import-path . "
                "if you trust the code there")
    return "check the module path, or pass --import-path DIR with the folder that holds the package"


def build_model(spec: str, *, hf: bool = False, config: dict[str, Any] | None = None, seed: int = 0,
                meta: bool = False, import_path: Sequence[str | os.PathLike[str]] = ()) -> nn.Module:
    """Build the model of ``spec`` (see the module docstring), seeded, in eval mode.

    Raises:
        CommandError: the factory cannot be found, raises, or returns something other than an
            ``nn.Module``; or ``--hf`` names an unknown model type; or a folder of ``import_path`` is missing.
    """
    config = dict(config or {})
    torch.manual_seed(seed)
    with torch.device("meta") if meta else contextlib.nullcontext():
        if hf:
            add_import_path(import_path)
            model = _build_hf(spec, config)
        else:
            model = _call_factory(spec, config, import_path)
    if not isinstance(model, nn.Module):
        raise CommandError(f"model factory {spec!r} returned a {type(model).__name__}, not an nn.Module",
                           hint=_SPEC_HINT)
    return model.eval()


def _call_factory(spec: str, config: dict[str, Any], import_path: Sequence[str | os.PathLike[str]]) -> Any:
    factory = load_factory(spec, import_path=import_path)
    try:
        return factory(**config)
    except Exception as exc:  # a user's factory may fail in any way; say which one failed
        raise CommandError(f"model factory {spec!r} raised {type(exc).__name__}: {exc}",
                           hint="check --config against the factory's arguments") from exc


#: Loggers that warn while transformers is imported and a model built, about nothing a command's user can act on:
#: torchao's optional CUDA kernels that a CPU build cannot load, and torch's deprecation of ``register_constant``
#: for the enums torchao registers.
_IMPORT_NOISE = ("torchao", "torch.utils._pytree")


@contextlib.contextmanager
def _quiet_import_noise() -> Any:
    """Raise the loggers of :data:`_IMPORT_NOISE` to ``ERROR`` for the block (errors still show)."""
    loggers = [logging.getLogger(name) for name in _IMPORT_NOISE]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _build_hf(name: str, overrides: dict[str, Any]) -> nn.Module:
    with _quiet_import_noise():
        return _build_hf_model(name, overrides)


def _build_hf_model(name: str, overrides: dict[str, Any]) -> nn.Module:
    try:
        from transformers import AutoConfig, AutoModel
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    except ImportError:
        raise CommandError("--hf needs the transformers package", hint="pip install transformers") from None
    if name not in CONFIG_MAPPING:
        types = list(CONFIG_MAPPING.keys())
        stem = re.split(r"[-_/.]", name.rsplit("/", 1)[-1].lower())[0]  # google-bert/bert-base-uncased -> bert
        near = list(dict.fromkeys([*([stem] if stem in CONFIG_MAPPING else []),
                                   *difflib.get_close_matches(name, types, n=3)]))[:3]
        raise CommandError(f"unknown transformers model type {name!r}: --hf takes a model type (bert, gpt2, llama, "
                           "...), not a checkpoint name, and builds the model from its config with random weights; "
                           "it never downloads or loads weights",
                           hint=(f"did you mean {', '.join(near)}? " if near else "")
                           + "set sizes with --config, e.g. '{\"num_hidden_layers\": 2}'")
    attn = overrides.pop("attn_implementation", "eager")
    try:
        config = AutoConfig.for_model(name, **overrides)
        _check_config_fields(name, config, overrides)
        if "use_cache" not in overrides and hasattr(config, "use_cache"):
            config.use_cache = False  # cache objects are not exportable
        return AutoModel.from_config(config, attn_implementation=attn)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise CommandError(f"cannot build transformers model {name!r}: {exc}",
                           hint="check the --config fields against the model's config class") from exc


def _check_config_fields(name: str, config: Any, overrides: dict[str, Any]) -> None:
    """Refuse ``--config`` fields the model type's config class does not know.

    transformers keeps an unknown keyword as a plain attribute that nothing reads, so a typo
    (``num_hiden_layers``) would silently build the full-size model. A field is refused when the built
    ``config`` kept it as such an attribute: not a field of the default config nor an alias of one
    (``attribute_map``). Keywords the config class consumes (``rope_theta`` into ``rope_parameters``,
    ``torch_dtype`` into ``dtype``) are not kept and pass.

    Raises:
        CommandError: naming the unknown fields and the nearest known ones.
    """
    cls = type(config)
    try:
        default = set(cls().to_dict())
    except Exception:  # noqa: BLE001 - a config class that cannot be built by default: nothing to compare with
        return
    known = default | set(getattr(cls, "attribute_map", {}))
    kept = set(config.to_dict())
    unknown = [field for field in overrides if field in kept and field not in known]
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(known), n=3)
        raise CommandError(f"--config field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                           f"{'are' if len(unknown) > 1 else 'is'} not known to {cls.__name__} (model type {name!r})",
                           hint=f"did you mean {', '.join(near)}?" if near else
                           f"see the fields of transformers' {cls.__name__}")


def model_and_inputs(options: argparse.Namespace) -> tuple[nn.Module, tuple[Any, ...], dict[str, Any]]:
    """Build the model and its example inputs from the options of :func:`add_model_arguments`.

    Inputs are parsed first, so a typo in a shape fails before a large model is built.

    Raises:
        CommandError: any option is invalid (see :func:`build_model` and :mod:`common.cli.inputs`).
    """
    specs = [parse_input(text) for text in options.inputs]
    if not specs:
        raise CommandError("no example input given",
                           hint="pass --input SHAPE[:DTYPE] once per input, e.g. -i 2x8:int64")
    extra = parse_json_option(options.kwargs, "--kwargs")
    config = parse_json_option(options.config, "--config")
    meta = bool(getattr(options, "meta", False))
    if options.vocab < 1:
        raise CommandError(f"--vocab must be at least 1, got {options.vocab}")
    args, kwargs = make_inputs(specs, seed=options.seed, vocab=options.vocab, meta=meta, extra=extra)
    model = build_model(options.model, hf=options.hf, config=config, seed=options.seed, meta=meta,
                        import_path=getattr(options, "import_path", ()))
    return model, args, kwargs
