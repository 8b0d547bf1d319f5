"""An interactive view of an IR: one self-contained HTML file (``ir2torch view``, ``ir.view(path)``).

The file holds its script, its style and the IR's data (JSON in a ``<script type="application/json">``); it
opens from ``file://`` and makes no network request (its Content-Security-Policy forbids any). It shows the
module tree as collapsible groups, a run of identical blocks as one entry (``layers.0-79 x80``) whose blocks
open one by one, the root's graph on open and any implementation's on demand (drawn in SVG, tensor shapes and dtypes
on the edges, laid out by the vendored dagre library with edges routed around nodes and ending in arrowheads; the
calls of a run of identical blocks drawn as one stack box; export's plumbing hidden until asked; opened centred,
fitted to the pane when its text stays at least 9 px, else with a minimap; wheel zoom, drag pan; a call drawn in
place fitted and scrolled into view),
attributes, state records and meta in a side panel, a search over modules and graph nodes (path, class,
type; node name, op, output shape), and optionally an overlay: a number per module or node drawn as a colour
and a value (:mod:`common.htmlview.overlay`). Only what is expanded is in the page, so a model of thousands of
modules opens at once.

Everything read from the IR is data: the page shows it with ``textContent`` and never builds markup or code
from it; the embedded JSON has ``<``, ``>`` and ``&`` escaped, so no IR string can end its script element.

The page reads its URL fragment on load: ``view.html#expand=model.layers.1&select=model.layers.1.self_attn``
expands blocks (comma-separated), ``select`` shows one in the side panel, ``graph`` draws one's graph and
``search`` fills the search box, ``node=PATH:NAME`` draws a graph with that node selected,
``inplace=attention,attention/self`` draws those calls of the ``graph`` in place (callee graphs in boxes, nested
with ``/``), ``stack=0`` draws every call of a run on its own and ``plumbing=1`` draws export's plumbing (other values
are ignored). A path may be given by its unique suffix (``layers.1``). With a second IR to compare, the fragment
applies to the left side and the right one follows.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..ir import IR

__all__ = ["Overlay", "view_html", "write_view"]

#: An overlay: ``{module path or "path:node": number or None}``, or a JSON file holding one.
Overlay = Mapping[str, float | None] | str | os.PathLike


def _overlay(overlay: Overlay | None) -> Mapping[str, float | None] | None:
    from .overlay import check_overlay, read_overlay

    if overlay is None:
        return None
    if isinstance(overlay, (str, os.PathLike)):
        return read_overlay(overlay)
    return check_overlay(overlay)


def view_html(ir: IR, overlay: Overlay | None = None, overlay_name: str = "overlay", *, compare: IR | None = None,
              names: tuple[str, str] = ("A", "B")) -> str:
    """The interactive view of ``ir`` as one HTML document (see the module docstring); with ``compare``, both IRs side
    by side, synced and marked (:mod:`common.htmlview.compare`), named ``names`` in the page.

    Raises:
        IRFormatError: ``overlay`` is not a valid overlay (:mod:`common.htmlview.overlay`).
    """
    from .page import page

    return page(ir, _overlay(overlay), overlay_name, compare, names)


def write_view(ir: IR, path: str | os.PathLike, overlay: Overlay | None = None, overlay_name: str = "overlay", *,
               compare: IR | None = None, names: tuple[str, str] = ("A", "B")) -> Path:
    """Write the interactive view of ``ir`` (with ``compare``: of both, side by side) to ``path`` (atomically) and
    return the path.

    Raises:
        IRFormatError: ``overlay`` is not a valid overlay (nothing is written).
        OSError: the file cannot be written.
    """
    from ..atomic_files import write_text_atomic

    return write_text_atomic(path, view_html(ir, overlay, overlay_name, compare=compare, names=names))
