"""Shared plumbing of the ``torch2ir`` and ``ir2torch`` command lines.

- :mod:`common.cli.app`: parsers whose errors are one line, exit codes (0 ok, 1 check failed, 2 usage or
  input error), ``--debug`` / ``--quiet``;
- :mod:`common.cli.inputs`: ``--input [NAME=]SHAPE[:DTYPE[:LOW..HIGH]]`` and JSON options;
- :mod:`common.cli.model`: ``package.module:factory`` and ``--hf`` models;
- :mod:`common.cli.summary`: the text of ``ir2torch show`` and ``ir2torch diff``;
- :mod:`common.cli.demo`: ``torch2ir demo``, the one orchestration point that uses both ``torch2ir`` and
  ``ir2torch`` (imported inside the function, never at module level).

The command parsers themselves live in ``torch2ir/cli.py`` and ``ir2torch/cli/main.py``; see ``docs/cli.md``.
"""
