"""``python -m torch2ir``: the same as the ``torch2ir`` command (see :mod:`torch2ir.cli`).

Like the installed command, it does not search the current folder for ``MODEL``'s modules: the entry
``python -m`` puts first on ``sys.path`` is removed (:func:`common.cli.app.drop_script_folder`).
"""

from common.cli.app import drop_script_folder
from torch2ir.cli import main

if __name__ == "__main__":
    drop_script_folder()
    raise SystemExit(main())
