"""``python -m ir2torch``: the same as the ``ir2torch`` command (see :mod:`ir2torch.cli`).

Like the installed command, it imports nothing from the current folder: the entry ``python -m`` puts first
on ``sys.path`` is removed by the package itself (``ir2torch/__init__.py``), before anything but the standard
library is imported; :func:`common.cli.app.drop_script_folder` removes it still if it is there.
"""

from common.cli.app import drop_script_folder
from ir2torch.cli import main

if __name__ == "__main__":
    drop_script_folder()
    raise SystemExit(main())
