"""Module paths of a rebuilt tree: a child's path relative to its parent, the module that owns a dotted path, and
attaching a child at a path."""

from __future__ import annotations

from torch import nn

from common.errors import BuildError


def relative_path(parent: str, key: str) -> str:
    """Path of implementation ``key`` as an attribute path below ``parent``."""
    return key if parent == "root" else key[len(parent) + 1 :]


def owner_of(root: nn.Module, path: str) -> tuple[nn.Module, str]:
    """The module holding attribute ``path`` of ``root`` and the attribute's own name,
    creating plain ``nn.Module`` containers for missing levels."""
    *prefix, last = path.split(".")
    module = root
    for part in prefix:
        nxt = module._modules.get(part)
        if nxt is None:
            nxt = nn.Module()
            module.add_module(part, nxt)
        module = nxt
    return module, last


def set_submodule(root: nn.Module, path: str, child: nn.Module) -> None:
    """``root.<path> = child`` (see :func:`owner_of`)."""
    module, last = owner_of(root, path)
    try:
        module.add_module(last, child)
    except (KeyError, TypeError) as exc:  # an attribute of that name is already there (an opaque leaf's)
        raise BuildError(f"cannot attach the module {path!r}: {exc}", key=path,
                         hint="an implementation's attribute and a child share a name: the file is corrupt or "
                              "hostile") from None
