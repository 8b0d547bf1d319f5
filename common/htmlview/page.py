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


def _sha256(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def page(ir: IR, overlay: Mapping[str, float | None] | None = None, overlay_name: str = "overlay") -> str:
    """The whole HTML document of the view of ``ir`` (with ``overlay``: see :mod:`common.htmlview.overlay`)."""
    script, style = _asset("view.js"), _asset("view.css")
    policy = (f"default-src 'none'; script-src '{_sha256(script)}'; style-src '{_sha256(style)}'; "
              "img-src 'none'; connect-src 'none'; form-action 'none'; base-uri 'none'")
    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>IR view</title>",
        f"<style>{style}</style>",
        "</head><body>",
        '<header><span id="title"></span><input id="search" type="search" '
        'placeholder="search modules, nodes, ops, shapes" autocomplete="off" spellcheck="false">'
        '<button id="collapse" type="button">collapse all</button></header>',
        '<main><section id="left"><div id="summary"></div><div id="results"></div><div id="tree"></div></section>',
        '<section id="middle"><div id="graphbar"></div><div id="graph"></div></section>',
        '<section id="panel"></section></main>',
        f'<script id="ir-data" type="application/json">{embed_json(view_data(ir, overlay, overlay_name))}</script>',
        f"<script>{script}</script>",
        "</body></html>",
        "",
    ])
