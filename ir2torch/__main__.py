"""``python -m ir2torch``: the same as the ``ir2torch`` command (see :mod:`ir2torch.cli`)."""

from ir2torch.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
