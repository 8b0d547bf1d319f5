"""torch2ir: convert PyTorch models into the torch2ir IR."""


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

from .capture import lower  # noqa: E402
from .converter import Torch2Ir, convert, get_default_converter  # noqa: E402

__all__ = ["__version__", "Torch2Ir", "convert", "get_default_converter", "lower"]
