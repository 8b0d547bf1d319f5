"""What an opaque leaf's code reads of a child traced on its own, set on the rebuilt child (:mod:`common.opaque_reads`).

The child is rebuilt from its graph; its recorded plain attributes are set in its ``__dict__`` and each recorded
method becomes a :class:`~common.opaque_reads.SubmoduleAccessor` returning the submodule at its path. A name the
rebuilt module already has (a method, a submodule, fx's own attributes) or a path to no submodule refuses the file.
Deep copies of the module keep them (a deep-copy hook sets them again on the copy).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from torch import fx, nn

from common.errors import IRFormatError
from common.ir import IR
from common.opaque_reads import READS_KEY, SubmoduleAccessor, reads_record


def _set(module: nn.Module, record: Mapping[str, Any]) -> None:
    for name, value in record.get("attributes", {}).items():
        vars(module)[name] = value
    for name, path in record.get("modules", {}).items():
        vars(module)[name] = SubmoduleAccessor(module, path)


def apply_reads(ir: IR, modules: Mapping[str, nn.Module]) -> None:
    """Set what ``meta["opaque_reads"]`` of each implementation records on its rebuilt module (after the modules
    are attached: a path is checked against the module's own submodules).

    Raises:
        IRFormatError: a malformed record, one on a module not rebuilt from its graph, a name the module already
            has, or a path to no submodule of it.
    """
    for key, impl in ir.items():
        record = reads_record(impl.meta, key)
        if record is None:
            continue
        module = modules.get(key)
        if not isinstance(module, fx.GraphModule):
            raise IRFormatError(f"meta.{READS_KEY} on a module not rebuilt from its graph", implementation=key,
                                hint="only a child traced on its own below an opaque leaf carries what it reads")
        for name in [*record.get("attributes", {}), *record.get("modules", {})]:
            if hasattr(module, name):
                raise IRFormatError(f"meta.{READS_KEY} names {name!r}, which the rebuilt module already has",
                                    implementation=key, hint="a carried read may not shadow anything of the module")
        for name, path in record.get("modules", {}).items():
            try:
                found = module.get_submodule(path)
            except AttributeError:
                found = None
            if not isinstance(found, nn.Module):
                raise IRFormatError(f"meta.{READS_KEY}.modules.{name}: {path!r} is no submodule of the module",
                                    implementation=key, hint="the path of a module inside it")
        _set(module, record)
        # fx's deep copy rebuilds the module from its graph, dropping its other attributes: set them again
        module._register_deepcopy_hook(functools.partial(_set, record=record))  # type: ignore[operator]


__all__ = ["apply_reads"]
