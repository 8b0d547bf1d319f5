"""An interactive view of an IR: one self-contained HTML file (``ir2torch view``, ``ir.view(path)``).

The file holds its script, its style and the IR's data (JSON in a ``<script type="application/json">``); it
opens from ``file://`` and makes no network request (its Content-Security-Policy forbids any). It shows the
module tree as collapsible groups, a run of identical blocks as one entry (``layers.0-79 x80``) whose blocks
open one by one, an implementation's graph on demand (drawn in SVG, tensor shapes and dtypes on the edges),
attributes, state records and meta in a side panel, and a search by path, class or type. Only what is
expanded is in the page, so a model of thousands of modules opens at once.

Everything read from the IR is data: the page shows it with ``textContent`` and never builds markup or code
from it; the embedded JSON has ``<``, ``>`` and ``&`` escaped, so no IR string can end its script element.

The page reads its URL fragment on load: ``view.html#expand=model.layers.1&select=model.layers.1.self_attn``
expands blocks (comma-separated), ``select`` shows one in the side panel, ``graph`` draws one's graph and
``search`` fills the search box. A path may be given by its unique suffix (``layers.1``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ir import IR

__all__ = ["IRHtmlView", "view_html", "write_view"]


def view_html(ir: IR) -> str:
    """The interactive view of ``ir`` as one HTML document (see the module docstring)."""
    from .page import page

    return page(ir)


def write_view(ir: IR, path: str | os.PathLike) -> Path:
    """Write the interactive view of ``ir`` to ``path`` (atomically) and return the path.

    Raises:
        OSError: the file cannot be written.
    """
    from ..atomic_files import write_text_atomic

    return write_text_atomic(path, view_html(ir))


class IRHtmlView:
    """``view(path)`` of :class:`~common.ir.IR` (mixed in, so ``ir.py`` stays small)."""

    def view(self, path: str | os.PathLike) -> Path:
        """Write this IR's interactive view (one self-contained HTML file, see :mod:`common.htmlview`) to ``path``.

        Raises:
            OSError: the file cannot be written.
        """
        return write_view(self, path)  # type: ignore[arg-type]
