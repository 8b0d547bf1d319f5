"""The HTML document of the interactive view: the page's own script and style, and the IR's data as JSON.

The script and style are files of this package (``view.js``, ``view.css``), inlined so the page is one file.
A Content-Security-Policy allows only those two (by their SHA-256) and no network at all: even a string that
somehow became markup could not run a handler or load anything.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from .data import view_data

if TYPE_CHECKING:
    from ..ir import IR

__all__ = ["embed_json", "page"]

# characters that could end the data's script element or open a comment in it, written as JSON escapes
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def embed_json(data: Any) -> str:
    """``data`` as JSON that can sit inside ``<script type="application/json">``: ``<``, ``>``, ``&`` escaped.

    Raises:
        ValueError: ``data`` holds a NaN or infinity (not JSON).
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return text.translate(str.maketrans(_ESCAPES))


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text(encoding="utf-8")


def _layout_script() -> str:
    """The graph layout library the page draws with: dagre (https://github.com/dagrejs/dagre, MIT licence, its notice
    kept in the script), vendored unchanged as ``dagre.min.js`` but for its source-map comment (no file to fetch)."""
    code = _asset("dagre.min.js")
    code = "\n".join(line for line in code.splitlines() if not line.startswith("//# sourceMappingURL="))
    notice = _asset("dagre.LICENSE").replace("*/", "* /")
    return f"/*! @dagrejs/dagre {DAGRE_VERSION}\n{notice}*/\n{code}"


#: the vendored dagre release (``npm pack @dagrejs/dagre@3.1.3``: ``dist/dagre.min.js`` and ``LICENSE``)
DAGRE_VERSION = "3.1.3"


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def _pane(prefix: str) -> list[str]:
    """The elements of one side of a comparison (ids prefixed: view.js finds them through its prefix)."""
    p = prefix
    return [
        f'<div class="pane"><div class="bar"><span id="{p}title" class="title"></span><input id="{p}search" '
        'type="search" placeholder="search modules, nodes, ops, shapes" autocomplete="off" spellcheck="false">'
        f'<button id="{p}collapse" type="button">collapse</button></div>',
        f'<div class="pgrid"><section id="{p}left" class="left"><div id="{p}summary" class="summary"></div>'
        f'<div id="{p}results" class="results"></div><div id="{p}tree"></div></section>',
        f'<div class="mid"><section id="{p}middle" class="middle"><div id="{p}graphbar" class="graphbar"></div>'
        f'<div id="{p}graph" class="graph"></div></section><div id="{p}minimap" class="minimap" hidden></div></div>',
        f'<section id="{p}panel" class="panel"></section></div></div>',
    ]


def page(ir: IR, overlay: Mapping[str, float | None] | None = None, overlay_name: str = "overlay",
         compare: IR | None = None, names: tuple[str, str] = ("A", "B")) -> str:
    """The whole HTML document of the view of ``ir`` (with ``overlay``: see :mod:`common.htmlview.overlay`); with
    ``compare``, ``ir`` and ``compare`` side by side, marked (:mod:`common.htmlview.compare`), named ``names``."""
    script, style, layout = _asset("view.js"), _asset("view.css"), _layout_script()
    policy = (f"default-src 'none'; script-src '{_sha256(layout)}' '{_sha256(script)}'; style-src '{_sha256(style)}'; "
              "img-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'")
    data = view_data(ir, overlay, overlay_name)
    if compare is None:
        body = [
            '<header><span id="title" class="title"></span><input id="search" type="search" '
            'placeholder="search modules, nodes, ops, shapes" autocomplete="off" spellcheck="false">'
            '<button id="collapse" type="button">collapse all</button></header>',
            '<main><section id="left" class="left"><div id="summary" class="summary"></div>'
            '<div id="results" class="results"></div><div id="tree"></div></section>',
            '<div class="mid"><section id="middle" class="middle"><div id="graphbar" class="graphbar"></div>'
            '<div id="graph" class="graph"></div></section><div id="minimap" class="minimap" hidden></div></div>',
            '<section id="panel" class="panel"></section></main>',
            f'<script id="ir-data" type="application/json">{embed_json(data)}</script>',
        ]
    else:
        from .compare import compare_data

        other = view_data(compare, overlay, overlay_name)
        body = [
            '<header><span id="cmpsum"></span></header>',
            '<main class="cmp">', *_pane(""), *_pane("b-"), "</main>",
            f'<script id="ir-data" type="application/json">{embed_json(data)}</script>',
            f'<script id="ir-data-b" type="application/json">{embed_json(other)}</script>',
            f'<script id="ir-cmp" type="application/json">{embed_json(compare_data(ir, compare, data, other, names))}'
            "</script>",
        ]
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>IR view</title>",
        f"<style>{style}</style>",
        "</head><body>",
        *body,
        f"<script>{layout}</script>",
        f"<script>{script}</script>",
        "</body></html>",
        "",
    ])
