"""The drawn graph's geometry, read back from the page's DOM after its script ran: node boxes, edge polylines and
edge-label boxes, and the checks a readable drawing must pass (no edge through a node that is not its end, no label
over another label or a node, nothing outside the canvas)."""

from __future__ import annotations

import dataclasses
import itertools
import re

from tests.view.browser import Elements

Box = tuple[float, float, float, float]  # x0, y0, x1, y1


@dataclasses.dataclass
class Drawing:
    width: float
    height: float
    nodes: list[Box]
    edges: list[tuple[int, int, list[tuple[float, float]]]]
    labels: list[Box]
    count: int = 0  #: graph nodes (the boxes after them are reference boxes of values read far away)
    names: list[str] = dataclasses.field(default_factory=list)  #: the text of each box
    clusters: int = 0  #: calls drawn in place


def shown_count(ir, key: str, variant: int = 0) -> int:
    """The nodes of ``key``'s graph the page draws by default: all but the export plumbing it hides
    (:func:`common.htmlview.data.plumbing`)."""
    from common.htmlview.data import plumbing

    graph = ir[key].graphs()[variant]
    return graph.node_count - len(plumbing(graph))


def graph_tags(dom: str) -> list[tuple[str, dict]]:
    """The elements of the first graph drawn (its ``<svg>`` and what it holds; not a minimap's)."""
    tags = Elements(dom).tags
    start = next(i for i, (t, a) in enumerate(tags) if t == "svg" and a.get("class") == "graph-svg")
    end = next((i for i in range(start + 1, len(tags)) if tags[i][0] == "svg"), len(tags))
    return tags[start:end]


def drawing(dom: str) -> Drawing:
    """The first graph of the page (the left side's, in a comparison)."""
    tags = Elements(dom).tags
    start = next(i for i, (t, _) in enumerate(tags) if t == "svg")
    view = [float(v) for v in tags[start][1]["viewbox" if "viewbox" in tags[start][1] else "viewBox"].split()]
    nodes, edges, labels, count = [], [], [], 0
    for tag, attrs in tags[start + 1:]:
        if tag == "svg":
            break
        cls = attrs.get("class") or ""
        if tag == "g" and (cls.startswith("node") or cls == "proxy"):  # a reference box is an obstacle too
            count += cls.startswith("node")
            x, y = (float(v) for v in re.match(r"translate\(([-\d.e]+),([-\d.e]+)\)", attrs["transform"]).groups())
            nodes.append([x, y])
        elif tag == "rect" and nodes and len(nodes[-1]) == 2:
            x, y = nodes[-1]
            nodes[-1] = (x, y, x + float(attrs["width"]), y + float(attrs["height"]))
        elif tag == "path" and cls == "edge":
            assert attrs.get("data-routed") == "1", "an edge of the fallback layering (not routed)"
            edges.append((int(attrs["data-a"]), int(attrs["data-b"]), _polyline(attrs["d"])))
        elif tag == "text" and cls == "el":
            cx, y, w, h = float(attrs["x"]), float(attrs["y"]) - 4, float(attrs["data-w"]), float(attrs["data-h"])
            labels.append((cx - w / 2, y - h / 2, cx + w / 2, y + h / 2))
    names = re.findall(r'<g class="(?:node|proxy)[^"]*"[^>]*><rect[^>]*>(?:</rect>)?<text[^>]*>([^<]*)</text>', dom)
    return Drawing(view[2], view[3], [tuple(n) for n in nodes], edges, labels, count, names[:len(nodes)],
                   sum(1 for t, a in tags[start + 1:] if t == "g" and a.get("class") == "cluster"))


def _polyline(d: str) -> list[tuple[float, float]]:
    """The points of an SVG path of ``M``, ``L`` and ``C`` commands, each cubic sampled at 24 points."""
    out: list[tuple[float, float]] = []
    for command, numbers in re.findall(r"([MLC])\s*([-\d.e,\s]+)", d):
        xy = [float(v) for v in re.findall(r"[-\d.e]+", numbers)]
        pts = list(zip(xy[::2], xy[1::2], strict=True))
        if command != "C":
            out.extend(pts)
            continue
        (x0, y0), (c1, c2, c3) = out[-1], pts
        for i in range(1, 25):
            t = i / 24
            u = 1 - t
            out.append((u**3 * x0 + 3 * u * u * t * c1[0] + 3 * u * t * t * c2[0] + t**3 * c3[0],
                        u**3 * y0 + 3 * u * u * t * c1[1] + 3 * u * t * t * c2[1] + t**3 * c3[1]))
    return out


def _crosses(p: tuple[float, float], q: tuple[float, float], box: Box, inset: float = 0.5) -> bool:
    """Whether segment ``p``-``q`` runs through the interior of ``box`` (shrunk by ``inset``): Liang-Barsky."""
    x0, y0, x1, y1 = box[0] + inset, box[1] + inset, box[2] - inset, box[3] - inset
    dx, dy = q[0] - p[0], q[1] - p[1]
    lo, hi = 0.0, 1.0
    for step, dist in ((-dx, p[0] - x0), (dx, x1 - p[0]), (-dy, p[1] - y0), (dy, y1 - p[1])):
        if step == 0:
            if dist < 0:
                return False
            continue
        t = dist / step
        if step < 0:
            lo = max(lo, t)
        else:
            hi = min(hi, t)
        if lo > hi:
            return False
    return hi - lo > 1e-9


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] - 0.5 and b[0] < a[2] - 0.5 and a[1] < b[3] - 0.5 and b[1] < a[3] - 0.5


def problems(d: Drawing) -> list[str]:
    """Everything that makes the drawing hard to read (an empty list for a clean one)."""
    out = []
    for a, b, points in d.edges:
        for p, q in itertools.pairwise(points):
            out += [f"edge {a}->{b} crosses node {k}" for k, box in enumerate(d.nodes)
                    if k not in (a, b) and _crosses(p, q, box)]
    for i, label in enumerate(d.labels):
        out += [f"label {i} overlaps label {j}" for j in range(i) if _overlap(label, d.labels[j])]
        out += [f"label {i} overlaps node {k}" for k, box in enumerate(d.nodes) if _overlap(label, box)]
        if label[0] < 0 or label[1] < 0 or label[2] > d.width or label[3] > d.height:
            out.append(f"label {i} leaves the canvas")
    out += [f"node {k} leaves the canvas" for k, box in enumerate(d.nodes)
            if box[0] < 0 or box[1] < 0 or box[2] > d.width or box[3] > d.height]
    return out
