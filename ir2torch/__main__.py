"""``python -m ir2torch``: the same as the ``ir2torch`` command (see :mod:`ir2torch.cli`).

Like the installed command, it does not search the current folder for ``MODEL``'s modules: the entry
``python -m`` puts first on ``sys.path`` is removed (:func:`common.cli.app.drop_script_folder`).
"""

from common.cli.app import drop_script_folder
from ir2torch.cli import main

if __name__ == "__main__":
    drop_script_folder()
    raise SystemExit(main())
