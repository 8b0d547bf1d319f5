"""DOT (Graphviz) and Mermaid text of a drawing graph (see :mod:`common.render.graphs`); no dependency.

DOT node ids are the full module paths (or node names), so ``grep`` finds a module in the file; the
Mermaid writer numbers its nodes (Mermaid ids cannot hold dots) and lists ``%% n3: encoder.layer.0``
beside each one.
"""

from __future__ import annotations

import networkx as nx

__all__ = ["COLORS", "to_dot", "to_mermaid"]

#: Fill colour of each node ``kind``.
COLORS: dict[str, str] = {
    "root": "#f6c28b",
    "graph": "#cfe2f3",
    "module": "#cfe2f3",
    "leaf": "#d9ead3",
    "container": "#eeeeee",
    "alias": "#ffffff",
    "collapsed": "#d5c8e8",
    "input": "#fff2cc",
    "output": "#fff2cc",
    "function": "#d9ead3",
    "op": "#d9ead3",
    "get_attr": "#fce5cd",
    "weight": "#fce5cd",
    "call": "#cfe2f3",
    "external": "#eeeeee",
}


def _dot_quote(text: str) -> str:
    """A DOT double-quoted string (backslashes and quotes escaped, newlines as ``\\n``)."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(graph: nx.DiGraph) -> str:
    """The graph as Graphviz DOT text (``dot -Tsvg file.dot`` renders it).

    Args:
        graph: a drawing graph with ``label``/``kind`` node attributes.

    Returns:
        The DOT source, ending with a newline.
    """
    rankdir = "LR" if graph.graph.get("layout") == "tree" else "TB"
    lines = [
        f"digraph {_dot_quote(graph.graph.get('title', 'graph'))} {{",
        f"  rankdir={rankdir};",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];',
        '  edge [color="#555555", arrowsize=0.6];',
    ]
    for node, attrs in graph.nodes(data=True):
        style = ', style="rounded,dashed"' if attrs.get("kind") == "alias" else ""
        fill = COLORS.get(attrs.get("kind", ""), "#ffffff")
        lines.append(f"  {_dot_quote(str(node))} [label={_dot_quote(attrs.get('label', str(node)))}, "
                     f'fillcolor="{fill}"{style}];')
    lines += [f"  {_dot_quote(str(u))} -> {_dot_quote(str(v))};" for u, v in graph.edges()]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_label(text: str) -> str:
    """Mermaid label text: entities for the characters its parser reserves, ``<br/>`` for newlines."""
    for char, entity in (("#", "#35;"), ('"', "#quot;"), ("<", "#lt;"), (">", "#gt;")):
        text = text.replace(char, entity)
    return text.replace("\n", "<br/>")


def to_mermaid(graph: nx.DiGraph) -> str:
    """The graph as a Mermaid ``flowchart`` (paste it into Markdown as a ```` ```mermaid ```` block).

    Args:
        graph: a drawing graph with ``label``/``kind``/``path`` node attributes.

    Returns:
        The Mermaid source, ending with a newline.
    """
    direction = "LR" if graph.graph.get("layout") == "tree" else "TB"
    ids = {node: f"n{i}" for i, node in enumerate(graph)}
    lines = [f"flowchart {direction}"]
    if graph.graph.get("title"):
        lines.append(f"  %% {graph.graph['title']}")
    by_kind: dict[str, list[str]] = {}
    for node, attrs in graph.nodes(data=True):
        lines.append(f"  %% {ids[node]}: {attrs.get('path', node)}")
        lines.append(f'  {ids[node]}["{_mermaid_label(attrs.get("label", str(node)))}"]')
        by_kind.setdefault(attrs.get("kind", "graph"), []).append(ids[node])
    lines += [f"  {ids[u]} --> {ids[v]}" for u, v in graph.edges()]
    for kind, members in by_kind.items():
        dash = ",stroke-dasharray: 4 3" if kind == "alias" else ""
        lines.append(f"  classDef k_{kind} fill:{COLORS.get(kind, '#ffffff')},stroke:#555555{dash}")
        lines.append(f"  class {','.join(members)} k_{kind}")
    return "\n".join(lines) + "\n"
