"""``ir2torch view``: the interactive HTML view of an IR file, alone or beside another (``--compare``)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from common.cli.app import EXIT_OK, CommandError, add_allow_op, add_common_options
from common.progress import Progress
from ir2torch.cli.commands import _reading


def add_view_command(commands: Any) -> None:
    """Add the ``view`` subcommand to ``commands`` (the ``ir2torch`` subparsers)."""
    view = commands.add_parser("view", help="write an interactive HTML view of an IR (one self-contained file)",
                               description="Write one HTML file (script, style and data inline; no network access "
                               "when opened, works from file://) showing the module tree with repeated blocks folded, "
                               "each implementation's graph on demand with tensor shapes on its edges, attributes and "
                               "state records, and a search by path or type. Reads module-level IR files.")
    view.add_argument("file", type=Path, metavar="FILE", help="an IR JSON file (read as data)")
    view.add_argument("-o", "--output", required=True, type=Path, metavar="OUT.html", help="the HTML file to write")
    view.add_argument("--overlay", type=Path, metavar="DATA.json", help="a number per module or 'path:node' to draw "
                      "as colours (e.g. verify --report's max abs diffs)")
    view.add_argument("--overlay-name", dest="overlay_name", default=None, metavar="NAME",
                      help="what the overlay's numbers are (default: the file's name)")
    view.add_argument("--compare", type=Path, metavar="OTHER.ir.json", help="show OTHER beside FILE, synced by "
                      "module path (a rewritten module by its provenance) and node name, with what was added, removed "
                      "or changed marked")
    add_allow_op(view)
    add_common_options(view)
    view.set_defaults(func=_view)


def _view(options: argparse.Namespace) -> int:
    from common.cli.summary import load_any
    from common.flat import FlatIR
    from common.htmlview import write_view
    from ir2torch.run_safety.budget import human

    if options.output.suffix.lower() not in (".html", ".htm"):
        raise CommandError(f"the view is an HTML file, not {options.output.name!r}",
                           hint="name the output OUT.html (for pictures use ir2torch render)")
    def module_level(path: Path, what: str, hint: str) -> Any:
        with _reading(f"read {path}"):
            loaded = load_any(path, allow=options.allow_op)
        if isinstance(loaded, FlatIR):
            raise CommandError(f"{path} is a FlatIR; the view {what} module-level IRs", hint=hint)
        return loaded

    with Progress(2, "view", enabled=not options.quiet) as bar:
        with bar.stage("load"):
            source = module_level(options.file, "shows", "view the IR written by torch2ir convert, or draw the "
                                  "FlatIR with ir2torch render")
        other = None if options.compare is None else \
            module_level(options.compare, "compares", "compare the IRs written by torch2ir convert")
        overlay = None
        if options.overlay is not None:
            from common.htmlview.overlay import read_overlay

            with _reading(f"read {options.overlay}"):
                overlay = read_overlay(options.overlay)
        with bar.stage("write"), _reading(f"write the view of {options.file}"):
            options.output.parent.mkdir(parents=True, exist_ok=True)
            write_view(source, options.output, overlay, options.overlay_name or
                       (options.overlay.stem if options.overlay is not None else "overlay"), compare=other,
                       names=(options.file.name, options.compare.name if options.compare is not None else ""))
    print(f"wrote {options.output} ({human(options.output.stat().st_size)})")
    if overlay is not None:
        from common.htmlview.data import overlay_keys

        unmatched = [k for k in overlay if k not in overlay_keys(source)]
        if unmatched:
            print(f"overlay: {len(unmatched)} of {len(overlay)} keys name no module or node of {options.file.name} "
                  f"(first: {unmatched[0][:80]!r})")
    return EXIT_OK
