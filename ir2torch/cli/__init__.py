"""The ``ir2torch`` command line (reference: ``docs/cli.md``).

- :mod:`ir2torch.cli.commands`: the parser and :func:`main` (``show``, ``render``, ``view``, ``verify``, ``diff``,
  ``rewrite``), the console script's entry point ``ir2torch.cli:main``;
- :mod:`ir2torch.cli.rewrite`: ``ir2torch rewrite``, the built-in rewrite passes on a file and its weights;
- :mod:`ir2torch.cli.view`: ``ir2torch view``, the interactive HTML view of a file, alone or beside another.

May import: ``common`` (its core, views, rewrites and command-line plumbing ``common.cli``) and the rest of
``ir2torch``; never ``torch2ir``.
"""

from ir2torch.cli.commands import main

__all__ = ["main"]
