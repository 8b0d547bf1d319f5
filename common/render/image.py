"""PNG and SVG pictures of a drawing graph through matplotlib (the ``viz`` extra).

Two layered layouts, both computed with networkx:

- ``layout="tree"`` (module hierarchies): depth is the column, leaves are stacked one row each in
  depth-first order and a parent sits beside the middle of its children; parents and children are
  joined by elbow connectors. Every label gets its own row, so nothing overlaps however many
  modules there are; the picture grows downwards instead (fold with ``depth``).
- ``layout="layers"`` (graphs of one implementation or of ops): ``networkx.topological_generations``
  gives the rows, state reads sit just above their first reader, and each row is ordered by the mean
  position of its predecessors to keep edges short.

Boxes are all as wide as the widest label (measured, not guessed), so labels never spill out.
"""

from __future__ import annotations

import os
from pathlib import Path

import networkx as nx

from ..atomic_files import atomic_path
from .graphs import RenderError
from .text import COLORS

__all__ = ["layer_positions", "save_image", "tree_positions"]

FONT_SIZE = 8.0  # points
MAX_CHARS = 40  # longer label lines are cut with an ellipsis
MAX_PIXELS = 32000  # largest PNG side; beyond it the resolution is lowered
MIN_DPI = 25  # below this a PNG is unreadable: refuse and suggest --depth / --impl / a text format
_TOP = 0.75  # inches above the drawing for the title and the legend
_MARGIN = 0.25
_LEGEND = {
    "root": "model", "graph": "module (graph)", "module": "module", "leaf": "layer (handled)",
    "container": "container", "alias": "alias (same module)", "collapsed": "folded subtree", "input": "input / output",
    "output": "input / output", "function": "function", "get_attr": "state read", "call": "module call",
    "op": "ATen op", "weight": "weight", "external": "value from outside",
}  # fmt: skip


def tree_positions(tree: nx.DiGraph) -> dict[str, tuple[float, float]]:
    """``{node: (column, row)}``: column = depth, leaves on consecutive rows, parents centred on their children."""
    pos: dict[str, tuple[float, float]] = {}
    row = 0
    roots = [n for n in tree if tree.in_degree(n) == 0]
    for root in roots:
        stack: list[tuple[str, int, bool]] = [(root, 0, False)]
        while stack:  # iterative post-order, so deep trees cannot hit the recursion limit
            node, depth, expanded = stack.pop()
            children = list(tree.successors(node))
            if not children:
                pos[node] = (depth, row)
                row += 1
            elif expanded:
                pos[node] = (depth, (pos[children[0]][1] + pos[children[-1]][1]) / 2)
            else:
                stack.append((node, depth, True))
                stack.extend((c, depth + 1, False) for c in reversed(children))
    return pos


def layer_positions(graph: nx.DiGraph) -> tuple[dict[str, tuple[float, float]], dict[tuple, list[tuple[float, float]]]]:
    """Positions ``{node: (column, row)}`` of a DAG and the bend points of its long edges.

    Rows come from ``networkx.topological_generations``; a node without inputs that is not a graph
    input (a state read, a weight) moves down to just above its first reader. An edge spanning several
    rows gets a virtual node on each row it crosses, which takes a column like a real node, so the edge
    runs between boxes instead of through them. Rows are ordered by barycentre sweeps (down, up, down).

    Returns:
        ``(positions, routes)``: ``routes[(u, v)]`` lists the bend points of a long edge, top to bottom.

    Raises:
        RenderError: the graph has a cycle.
    """
    if not nx.is_directed_acyclic_graph(graph):
        raise RenderError("the graph has a cycle and cannot be drawn in layers", hint="write .dot and use Graphviz")
    layer = {n: i for i, gen in enumerate(nx.topological_generations(graph)) for n in gen}
    for node in graph:
        if graph.in_degree(node) == 0 and graph.nodes[node].get("kind") != "input" and graph.out_degree(node):
            layer[node] = max(min(layer[s] for s in graph.successors(node)) - 1, 0)
    work = nx.DiGraph()
    work.add_nodes_from(graph)
    chains: dict[tuple, list[tuple[str, int]]] = {}
    for u, v in graph.edges():
        prev = u
        chain = []
        for row in range(layer[u] + 1, layer[v]):
            dummy = (u, v, row)
            layer[dummy] = row
            work.add_edge(prev, dummy)
            chain.append(dummy)
            prev = dummy
        work.add_edge(prev, v)
        chains[(u, v)] = chain
    rows: dict[int, list] = {}
    for node in work:
        rows.setdefault(layer[node], []).append(node)
    order = {node: float(i) for members in rows.values() for i, node in enumerate(members)}
    for down in (True, False, True):
        for index in sorted(rows, reverse=not down):
            members = rows[index]

            def barycenter(node: object, down: bool = down) -> float:
                near = list(work.predecessors(node) if down else work.successors(node))
                return sum(order[n] for n in near) / len(near) if near else order[node]

            members.sort(key=barycenter)
            order.update({node: float(i) for i, node in enumerate(members)})
    pos = {node: (order[node] - (len(rows[layer[node]]) - 1) / 2, float(layer[node])) for node in work}
    for chain in chains.values():  # straighten a long edge where its rows leave room for a vertical run
        if len(chain) < 2:
            continue
        median = sorted(pos[d][0] for d in chain)[len(chain) // 2]
        for column in sorted({median + k / 2 for k in range(-4, 5)}, key=lambda c: abs(c - median)):
            if all(abs(pos[o][0] - column) >= 0.5 for d in chain for o in rows[layer[d]] if o != d):
                pos.update({d: (column, pos[d][1]) for d in chain})
                break
    routes = {edge: [pos[d] for d in chain] for edge, chain in chains.items() if chain}
    return {n: pos[n] for n in graph}, routes


def _fit(line: str) -> str:
    return line if len(line) <= MAX_CHARS else line[: MAX_CHARS - 1] + "\u2026"


def save_image(graph: nx.DiGraph, path: str | os.PathLike, fmt: str, *, dpi: float = 100.0) -> Path:
    """Draw ``graph`` and write it to ``path`` as ``fmt`` (``"png"`` or ``"svg"``), atomically.

    Args:
        graph: a drawing graph (see :mod:`common.render.graphs`).
        path: the output file.
        fmt: ``"png"`` or ``"svg"``.
        dpi: resolution of a PNG (lowered for very large pictures).

    Returns:
        ``path``.

    Raises:
        RenderError: matplotlib is not installed, or the picture would be too large to read.
    """
    try:
        import matplotlib
        from matplotlib.collections import LineCollection
        from matplotlib.figure import Figure
        from matplotlib.patches import FancyArrowPatch, FancyBboxPatch
        from matplotlib.textpath import TextPath
    except ImportError:
        raise RenderError("PNG and SVG pictures need matplotlib, which is not installed",
                          hint="pip install 'torch2ir[viz]', or write a .dot or .mmd file instead") from None
    tree = graph.graph.get("layout") == "tree"
    labels = {n: "\n".join(_fit(x) for x in str(a.get("label", n)).split("\n")) for n, a in graph.nodes(data=True)}
    longest = sorted({line for text in labels.values() for line in text.split("\n") if line.strip()}, key=len)[-40:]
    widest = max((TextPath((0, 0), line, size=FONT_SIZE).get_extents().width for line in longest), default=20.0) / 72
    lines = max((t.count("\n") + 1 for t in labels.values()), default=1)
    box_w, box_h = widest + 0.22, lines * FONT_SIZE * 1.3 / 72 + 0.14
    if tree:
        grid, routes, col_step, row_step = tree_positions(graph), {}, box_w + 0.45, box_h + 0.12
    else:
        grid, routes = layer_positions(graph)
        col_step, row_step = box_w + 0.3, box_h + 0.42
    points = [*grid.values(), *(p for route in routes.values() for p in route)] or [(0.0, 0.0)]
    min_col, min_row = min(c for c, _ in points), min(r for _, r in points)
    width = max((max(c for c, _ in points) - min_col) * col_step + box_w + 2 * _MARGIN, 6.0)
    height = (max(r for _, r in points) - min_row) * row_step + box_h + _TOP + _MARGIN

    def place(col: float, row: float) -> tuple[float, float]:
        return _MARGIN + box_w / 2 + (col - min_col) * col_step, _TOP + box_h / 2 + (row - min_row) * row_step

    xy = {n: place(c, r) for n, (c, r) in grid.items()}
    if fmt == "png":
        dpi = min(dpi, MAX_PIXELS / max(width, height))
        if dpi < MIN_DPI:
            raise RenderError(f"a picture of {graph.number_of_nodes()} boxes would be {width:.0f}x{height:.0f} "
                              "inches: too large to read as PNG",
                              hint="fold modules with --depth N, pick one graph with --impl, or write .svg/.dot")

    fig = Figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(height, 0)
    ax.axis("off")
    if tree:
        segments = []
        for parent in graph:
            children = list(graph.successors(parent))
            if not children:
                continue
            (px, py), mid = xy[parent], xy[children[0]][0] - box_w / 2 - 0.2
            ys = [xy[c][1] for c in children]
            segments.append([(px + box_w / 2, py), (mid, py)])
            segments.append([(mid, min([*ys, py])), (mid, max([*ys, py]))])
            segments += [[(mid, xy[c][1]), (xy[c][0] - box_w / 2, xy[c][1])] for c in children]
        ax.add_collection(LineCollection(segments, colors="#777777", linewidths=0.7, zorder=1))
    else:
        segments = []
        for u, v in graph.edges():
            (ux, uy), (vx, vy) = xy[u], xy[v]
            bends = [place(c, r) for c, r in routes.get((u, v), [])]
            line = [(ux, uy + box_h / 2), *((x, y - box_h / 2) for x, y in bends[:1])]
            for (x, y), nxt in zip(bends, [*bends[1:], None]):  # through each virtual box, then on
                line += [(x, y + box_h / 2)] + ([(nxt[0], nxt[1] - box_h / 2)] if nxt else [])
            segments.append(line)
            ax.add_patch(FancyArrowPatch(line[-1], (vx, vy - box_h / 2), arrowstyle="-|>", mutation_scale=7,
                                         lw=0.6, color="#666666", zorder=1, shrinkA=0, shrinkB=0))
        ax.add_collection(LineCollection([p for p in segments if len(p) > 1], colors="#666666",
                                         linewidths=0.6, zorder=1))
    for node, (x, y) in xy.items():
        kind = graph.nodes[node].get("kind", "graph")
        ax.add_patch(FancyBboxPatch((x - box_w / 2, y - box_h / 2), box_w, box_h,
                                    boxstyle="round,pad=0,rounding_size=0.05", fc=COLORS.get(kind, "#ffffff"),
                                    ec="#555555", lw=0.7, ls="--" if kind == "alias" else "-", zorder=2))
        ax.text(x, y, labels[node], ha="center", va="center", fontsize=FONT_SIZE, linespacing=1.15, zorder=3)
    ax.text(_MARGIN, 0.28, graph.graph.get("title", ""), fontsize=FONT_SIZE + 3, weight="bold", va="center")
    x = _MARGIN
    order = list(_LEGEND)
    present = sorted({a.get("kind", "graph") for _, a in graph.nodes(data=True)},
                     key=lambda k: (order.index(k) if k in order else len(order), k))
    kinds: dict[str, str] = {}
    for kind in present:  # input and output share one entry
        kinds.setdefault(_LEGEND.get(kind, kind), kind)
    for text, kind in kinds.items():
        ax.add_patch(FancyBboxPatch((x, 0.5), 0.18, 0.14, boxstyle="round,pad=0,rounding_size=0.03",
                                    fc=COLORS.get(kind, "#ffffff"), ec="#555555", lw=0.6,
                                    ls="--" if kind == "alias" else "-"))
        ax.text(x + 0.25, 0.57, text, fontsize=FONT_SIZE, va="center")
        x += 0.25 + TextPath((0, 0), text, size=FONT_SIZE).get_extents().width / 72 + 0.3
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "torch2ir"}), atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=dpi, facecolor="white", metadata=_metadata(fmt))
    return Path(path)


def _metadata(fmt: str) -> dict[str, str | None]:
    """File metadata without a creation date, so the same graph gives the same file."""
    return {"Date": None} if fmt == "svg" else {"Software": "torch2ir"}
