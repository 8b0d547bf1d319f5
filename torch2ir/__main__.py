"""``python -m torch2ir``: the same as the ``torch2ir`` command (see :mod:`torch2ir.cli`)."""

from torch2ir.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
