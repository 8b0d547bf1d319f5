"""What :func:`ir2torch.convert` accepts: an IR, its plain dict, a FlatIR, or the path of an IR or FlatIR file.

A path is told apart by its document's ``format`` (:func:`common.flat_files.document_format`); both kinds of file are
read through the converter's allow-list.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from common.flat import FlatIR
from common.ir import IR
from common.safety import Allowlist

__all__ = ["as_flat", "as_ir"]


def as_flat(ir: Any, allowlist: Allowlist, extra_ops: Iterable[str]) -> FlatIR | None:
    """``ir`` as a FlatIR when it is one or a FlatIR file's path (loaded with ``extra_ops`` allowed), else None."""
    if isinstance(ir, FlatIR):
        return ir
    if isinstance(ir, (str, os.PathLike)):
        from common.flat_files import document_format
        from common.flat_schema import FLAT_FORMAT

        if document_format(ir) == FLAT_FORMAT:
            return FlatIR.load(ir, allowlist=allowlist, extra_ops=extra_ops)
    return None


def as_ir(ir: Any, allowlist: Allowlist) -> IR:
    """``ir`` as an IR: itself, read from a file (not validated here: the caller validates), or from its dict.

    Raises:
        TypeError: ``ir`` is none of those.
    """
    if isinstance(ir, IR):
        return ir
    if isinstance(ir, (str, os.PathLike)):
        from common.serialize import load_ir

        return load_ir(ir, validate=False, allowlist=allowlist)
    if isinstance(ir, Mapping):
        return IR.from_dict(ir)
    raise TypeError(f"ir must be an IR, a dict or a file path, not {type(ir).__name__}")
