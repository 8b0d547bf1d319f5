"""Pictures of IRs: the module hierarchy, or the graph of one implementation (or of a module's ATen ops).

DOT and Mermaid text need nothing beyond networkx; PNG and SVG need matplotlib (the ``viz`` extra)::

    from common.render import render
    render(ir, "model.png", depth=3)                  # module tree, folded below depth 3, repeated blocks once
    render(ir, "layer0.svg", impl="encoder.layer.0")  # the graph of one implementation
    render(flat, "ops.mmd", impl="encoder.layer.0")   # the ATen ops that ran in a module
"""

from __future__ import annotations

import os
from pathlib import Path

import networkx as nx

from ..atomic_files import write_text_atomic
from ..flat import FlatIR
from ..ir import IR
from .graphs import RenderError, flat_hierarchy_graph, flat_ops_graph, hierarchy_graph, implementation_graph
from .text import to_dot, to_mermaid

__all__ = ["FORMATS", "RenderError", "drawing_graph", "flat_hierarchy_graph", "flat_ops_graph", "format_of",
           "hierarchy_graph", "implementation_graph", "render", "to_dot", "to_mermaid"]

#: file suffix -> format name
FORMATS = {".png": "png", ".svg": "svg", ".dot": "dot", ".gv": "dot", ".mmd": "mermaid", ".mermaid": "mermaid"}


def format_of(path: str | os.PathLike, fmt: str | None = None) -> str:
    """The picture format of ``path`` (from its suffix) unless ``fmt`` names one.

    Raises:
        RenderError: the suffix or ``fmt`` is not a supported format.
    """
    names = sorted(set(FORMATS.values()))
    if fmt is not None:
        if fmt not in names:
            raise RenderError(f"unknown picture format {fmt!r}", hint=f"use one of {', '.join(names)}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise RenderError(f"cannot tell the picture format of {os.fspath(path)!r} from its suffix {suffix!r}",
                          hint=f"end the file name with {', '.join(FORMATS)} (or pass --format)")
    return FORMATS[suffix]


def drawing_graph(source: IR | FlatIR, *, impl: str | None = None, depth: int | None = None,
                  collapse: bool = True) -> nx.DiGraph:
    """The graph to draw: the module tree of ``source``, or one implementation's graph with ``impl``.

    Args:
        source: an IR or a FlatIR.
        impl: an implementation key (IR) or module path (FlatIR: the ops that ran in it); ``None``
            draws the hierarchy.
        depth: fold modules deeper than this into their ancestor (hierarchy only).
        collapse: draw a run of identical blocks (``layers.0`` .. ``layers.31``) once, as ``0-31 x32``
            (hierarchy only).

    Raises:
        MissingImplementationError: the IR has no implementation ``impl``.
        RenderError: no op of the FlatIR ran in ``impl``, or ``depth`` is negative.
    """
    if isinstance(source, FlatIR):
        return flat_hierarchy_graph(source, depth, collapse=collapse) if impl is None else flat_ops_graph(source, impl)
    return hierarchy_graph(source, depth, collapse=collapse) if impl is None else implementation_graph(source, impl)


def render(
    source: IR | FlatIR,
    path: str | os.PathLike,
    *,
    fmt: str | None = None,
    impl: str | None = None,
    depth: int | None = None,
    collapse: bool = True,
) -> Path:
    """Draw ``source`` (see :func:`drawing_graph`) into ``path``, atomically.

    Args:
        source: an IR or a FlatIR.
        path: output file; its suffix picks the format unless ``fmt`` is given.
        fmt: ``"png"``, ``"svg"``, ``"dot"`` or ``"mermaid"``.
        impl: draw this implementation's graph instead of the hierarchy.
        depth: fold the hierarchy below this depth.
        collapse: draw each run of identical blocks once (``0-31 x32``); ``False`` draws every block.

    Returns:
        ``path``.

    Raises:
        RenderError: unknown format, matplotlib missing for PNG/SVG, or an unreadably large picture.
        MissingImplementationError: ``impl`` is not a key of the IR.
    """
    fmt = format_of(path, fmt)
    graph = drawing_graph(source, impl=impl, depth=depth, collapse=collapse)
    if fmt == "dot":
        return write_text_atomic(path, to_dot(graph))
    if fmt == "mermaid":
        return write_text_atomic(path, to_mermaid(graph))
    from .image import save_image

    return save_image(graph, path, fmt)
