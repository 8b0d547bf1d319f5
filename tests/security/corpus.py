"""Valid documents to attack, and one function that runs a document the way a user would.

:func:`documents` converts a few zoo models chosen to cover every field the writers emit
(keyword inputs and a pytree calling convention, aliases and ties, non-persistent buffers saved
as a tensors file, a higher-order op body, stock ``torch.nn`` leaves with constructor attributes)
and lowers one to a FlatIR. :func:`attempt` loads a document, rebuilds it on ``meta`` and on the
CPU and calls the CPU rebuild once, and reports what came out of each step.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR, FlatIR
from common.errors import IRError
from tests.models.zoo import by_name

#: Zoo cases (and :data:`EXTRA` ones) whose IRs together carry every field of the module-level schema.
IR_CASES = ("kwargs", "shared_sequential", "tied_embedding", "buffers", "no_grad_inside", "conv_net",
            "dict_output", "transformer", "per_call", "signed", "repeated")


class _Gate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, flag: bool) -> torch.Tensor:
        return torch.relu(self.lin(x)) if flag else torch.sigmoid(self.lin(x))


class _PerCall(nn.Module):
    """A module called twice with different graphs: its IR has ``variants`` and a call node ``variant``."""

    def __init__(self) -> None:
        super().__init__()
        self.n = _Gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.n(x, True) + self.n(x, False)


def _per_call() -> tuple[nn.Module, tuple, dict]:
    torch.manual_seed(0)
    return _PerCall().eval(), (torch.randn(2, 4),), {}


class _Signed(nn.Module):
    """A submodule whose rebuilt forward keeps its signature: ``meta.parameters`` with every kind and defaults."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, /, y: torch.Tensor, mode: str = "sum", *, scale: float = 1.0,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        out = self.lin(x) * scale + y
        return out if mask is None else out * mask


class _SignedParent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _Signed()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x, x, scale=2.0)


def _signed() -> tuple[nn.Module, tuple, dict]:
    torch.manual_seed(0)
    return _SignedParent().eval(), (torch.randn(2, 4),), {}


class _SameTwice(nn.Module):
    """Called with one tensor for both arguments: the FlatIR lists ``same_inputs``."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * y


def _same_twice() -> tuple[nn.Module, tuple, dict]:
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    return _SameTwice().eval(), (x, x), {}


class _Repeated(nn.Module):
    """Three alike blocks of two layers each: saved with shared bodies (format 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x) + x
        return x


def _repeated() -> tuple[nn.Module, tuple, dict]:
    torch.manual_seed(0)
    return _Repeated().eval(), (torch.randn(2, 4),), {}


#: Cases that are not in the zoo: name -> () -> (model, args, kwargs).
EXTRA = {"per_call": _per_call, "signed": _signed, "same_twice": _same_twice, "repeated": _repeated}
#: Cases lowered to the FlatIRs attacked.
FLAT_CASES = ("kwargs", "same_twice")


@dataclass(frozen=True)
class Document:
    """A saved document (parsed JSON), the tensors file beside it, and the inputs to call it with."""

    name: str
    kind: str  # "ir" or "flat"
    doc: dict[str, Any]
    sidecar: bytes | None
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@cache
def documents(tmp: str) -> tuple[Document, ...]:
    """The attacked documents, written once per session under ``tmp``."""
    out = []
    for i, name in enumerate((*IR_CASES, *FLAT_CASES)):
        if name in EXTRA:
            model, args, kwargs = EXTRA[name]()
        else:
            case = by_name(name)
            model = case.build()
            args, kwargs = case.inputs()
        kind = "flat" if i >= len(IR_CASES) else "ir"
        obj = torch2ir.lower(model, args, kwargs) if kind == "flat" else torch2ir.convert(model, args, kwargs)
        path = Path(tmp) / f"{name}.{kind}.json"
        obj.save(path)
        sidecars = sorted(Path(tmp).glob(f"{name}.{kind}.tensors*.safetensors"))
        out.append(Document(name, kind, json.loads(path.read_text()), sidecars[0].read_bytes() if sidecars else None,
                            args, kwargs))
    return tuple(out)


def write(document: Document, doc: Any, folder: Path) -> Path:
    """Write ``doc`` (a mutated copy of ``document.doc``) and the original tensors file into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{document.name}.{document.kind}.json"
    path.write_text(json.dumps(doc))
    if document.sidecar is not None and isinstance(document.doc.get("tensors"), dict):
        name = document.doc["tensors"].get("file")
        if isinstance(name, str):
            (folder / name).write_bytes(document.sidecar)
    return path


def attempt(path: Path, document: Document) -> str:
    """Load, rebuild on meta and on the CPU, call once: ``"ok"`` or the name of the IRError that stopped it.

    Any exception that is not an :class:`IRError` propagates (the test fails on it).
    """
    try:
        loaded = IR.load(path) if document.kind == "ir" else FlatIR.load(path)
        ir2torch.convert(copy.deepcopy(loaded), device="meta")
        model = ir2torch.convert(loaded)
        with torch.no_grad():
            model(*document.args, **document.kwargs)
    except IRError as exc:
        return type(exc).__name__
    return "ok"
