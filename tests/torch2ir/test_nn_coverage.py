"""Every public ``torch.nn`` module class has a handler pair or a documented exclusion (#15 point 4)."""

from __future__ import annotations

from torch import nn

import ir2torch
import torch2ir
from torch2ir.handlers import EXCLUDED


def _public_module_classes() -> dict[str, type[nn.Module]]:
    return {name: obj for name in dir(nn) if isinstance(obj := getattr(nn, name), type) and issubclass(obj, nn.Module)}


def test_every_public_nn_module_is_handled_or_excluded() -> None:
    types = torch2ir.get_default_converter().types()
    built = set(ir2torch.get_default_converter().builders.keys())
    classes = _public_module_classes()
    assert len(classes) > 150
    missing = sorted(name for name, cls in classes.items() if not (cls in types and types[cls] in built)
                     and cls not in EXCLUDED)
    assert not missing, f"torch.nn classes with neither a handler pair nor an EXCLUDED entry: {missing}"


def test_exclusions_are_real_unhandled_classes_with_reasons() -> None:
    types = torch2ir.get_default_converter().types()
    public = set(_public_module_classes().values())
    for cls, reason in EXCLUDED.items():
        assert cls in public, f"{cls.__name__} is no public torch.nn module class: drop its exclusion"
        assert cls not in types, f"{cls.__name__} has a handler: drop its exclusion"
        assert isinstance(reason, str) and len(reason) > 20


def test_lazy_modules_become_handled_classes_once_initialised() -> None:
    import torch

    lazy = nn.LazyLinear(3)
    lazy(torch.randn(2, 4))
    assert type(lazy) is nn.Linear and torch2ir.get_default_converter().has_handler(lazy)
