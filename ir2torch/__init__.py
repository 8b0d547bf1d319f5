"""ir2torch: rebuild real ``nn.Module``s from a torch2ir IR."""


def _keep_cwd_out() -> None:
    """Under ``python -m ir2torch``, take the current folder off ``sys.path`` before anything but the standard
    library is imported.

    ``python -m`` puts the current folder first on ``sys.path`` and imports this package (this file runs) before
    its ``__main__``; a ``networkx.py`` or ``torch.py`` lying in that folder would otherwise be imported by the
    imports below. Only while ``python -m`` locates a module of this project (``sys.argv[0]`` is ``"-m"``, the
    module ``sys.orig_argv`` names is under ``ir2torch``) is anything changed: the entry Python added (not under
    ``python -P``; a ``PYTHONPATH`` entry stays) is removed, and if this project's packages (``common``,
    ``torch2ir``, ``ir2torch``) were found there, a finder keeps importing those, and only those, from it.
    """
    import os
    import sys

    if sys.argv[:1] != ["-m"] or getattr(sys.flags, "safe_path", False) or not sys.path:
        return
    args, name = list(getattr(sys, "orig_argv", []))[1:], None
    while args and name is None:
        arg = args.pop(0)
        if not arg.startswith("-") or arg == "-" or arg.startswith("--"):
            return  # a script, stdin, or a long option: not ``-m`` as far as can be told
        for i, flag in enumerate(arg[1:], start=1):
            if flag in "cmWX":
                value = arg[i + 1:] or (args.pop(0) if args else "")
                if flag == "c":
                    return
                if flag == "m":
                    name = value
                break
    folder = os.getcwd()
    if name is None or name.split(".")[0] != __name__ or sys.path[0] != folder:
        return
    del sys.path[0]
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if here == folder:
        import importlib.machinery

        class _ProjectOnly:
            """Finds this project's top-level packages, and nothing else, in the folder ``python -m`` added."""

            @staticmethod
            def find_spec(fullname: str, path: object = None, target: object = None) -> object:
                if path is None and fullname in ("common", "torch2ir", "ir2torch"):
                    return importlib.machinery.PathFinder.find_spec(fullname, [folder])
                return None

        sys.meta_path.insert(0, _ProjectOnly())  # type: ignore[arg-type]


_keep_cwd_out()


def _check_common() -> None:
    """Refuse a top-level ``common`` package that is not this project's (another distribution may ship one).

    Raises:
        ImportError: the ``common`` found on ``sys.path`` lacks the project's marker.
    """
    import importlib

    try:
        found = importlib.import_module("common")
    except ImportError as exc:
        raise ImportError(f"{__name__} needs its 'common' package, which cannot be imported ({exc}); "
                          "reinstall torch2ir (pip install --force-reinstall torch2ir)") from exc
    if getattr(found, "__torch2ir_common__", None) is not True:
        where = getattr(found, "__file__", None) or list(getattr(found, "__path__", []))
        raise ImportError(f"{__name__}: the package 'common' imported from {where} is not torch2ir's: another "
                          "distribution ships a top-level 'common' package and shadows or overwrote it. Install "
                          "torch2ir in its own virtual environment (or reinstall it with pip install "
                          "--force-reinstall torch2ir after removing the other distribution)")


_check_common()

from common import __version__  # noqa: E402 - after the check
from ir2torch.converter import Ir2Torch, convert, get_default_converter  # noqa: E402

__all__ = ["__version__", "Ir2Torch", "convert", "get_default_converter"]
