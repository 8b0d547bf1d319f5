"""The default operator surface (issue 50, :mod:`common.surface`): a file may name by default only the ATen
overloads real models' conversions emit (``common/default_ops.txt``); any other classified overload is refused
with an ``OperatorSurfaceError`` naming it and the ``allow=`` that opts in, which then works as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR, FlatIR, safety, surface
from common.errors import ConversionError, OperatorSurfaceError, UnsafeTargetError
from tests.security import op_corpus
from tests.security.surface_extras import EXTRA_SURFACE


class Take(nn.Module):
    """A layer calling ``aten.take`` (classified pure, outside the default surface: no corpus model calls it)."""

    def forward(self, x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
        return torch.take(x, i) * 2


ARGS = (torch.arange(12.0).reshape(3, 4), torch.tensor([0, 11, -1]))


def test_the_table_is_sorted_classified_and_known_to_torch() -> None:
    text = surface.TABLE.read_text(encoding="utf-8")
    entries = surface.parse(text)
    names = [line.partition("\t")[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert names == sorted(set(names)) and len(names) == len(entries) > 150
    for name in names:
        assert safety.op_class(name)[0] in ("pure", "allocating"), name
        assert safety.DEFAULT_ALLOWLIST.is_allowed(name), name
    assert f"# {len(names)} overloads." in text
    assert set(EXTRA_SURFACE) <= set(names)


def test_every_entry_names_the_models_or_the_reviewed_reason_it_comes_from() -> None:
    """Each overload lists the corpus models that emit it or a reviewed extra, and deriving the table from those
    models (:func:`~tests.security.op_corpus.surface_entries`) gives the table back (the whole corpus run is the
    zoo test below)."""
    entries = surface.parse(surface.TABLE.read_text(encoding="utf-8"))
    assert all(where for where in entries.values())
    assert {n for n, where in entries.items() if where.startswith("extra:")} <= set(EXTRA_SURFACE)
    seen = {n: {w for w in where.split(", ") if not w.startswith("(+")} for n, where in entries.items()
            if not where.startswith("extra:")}  # models are listed first, extras after them
    derived = op_corpus.surface_entries({n: w for n, w in seen.items() if w})
    assert set(derived) == set(entries)


def test_common_layers_are_in_the_default_surface() -> None:
    """The corpus' common layers (log_softmax, cross_entropy, embedding_bag, stft...) convert and lower with
    nothing outside the table."""
    names: set[str] = set()
    for _, build, inputs, allow in op_corpus._layers():
        names |= op_corpus.names_of(build, inputs, allow, train=False)
    aten = {n for n in names if n.startswith("aten.")}
    assert aten and aten <= surface.default_surface()


@pytest.mark.slow
def test_the_whole_corpus_derives_the_checked_in_table() -> None:
    """The whole corpus (tests/real, the zoo, quantized models, layers) emits exactly the table's overloads
    besides the reviewed extras (``--check-surface``)."""
    assert op_corpus.main(["--check-surface"]) == 0


def test_an_operator_outside_the_surface_is_refused_with_the_opt_in(tmp_path: Path) -> None:
    assert safety.op_class("aten.take.default")[0] == "pure"
    assert not surface.in_default_surface("aten.take.default")
    with pytest.raises(ConversionError, match=r"(?s)aten\.take\.default.*allow=\['aten::take\.default'\]"):
        torch2ir.convert(Take(), ARGS)
    ir = torch2ir.convert(Take(), ARGS, allow=["aten::take"])
    ir.save(tmp_path / "take.ir.json")
    with pytest.raises(OperatorSurfaceError) as caught:
        ir2torch.convert(IR.load(tmp_path / "take.ir.json"))
    assert "aten.take.default" in str(caught.value) and "allow=['aten::take.default']" in str(caught.value)
    for allow in (["aten::take"], ["aten::take.default"], ["aten::*"]):
        rebuilt = ir2torch.convert(tmp_path / "take.ir.json", allow=allow)
        assert torch.equal(rebuilt(*ARGS), Take()(*ARGS))
    with pytest.raises(OperatorSurfaceError):  # another overload's opt-in does not cover it
        ir2torch.convert(tmp_path / "take.ir.json", allow=["aten::take.out"])


def test_a_flat_file_outside_the_surface_is_refused_on_load(tmp_path: Path) -> None:
    flat = torch2ir.lower(Take(), ARGS, allow=["aten::take"])
    path = tmp_path / "take.flat.json"
    flat.save(path)
    with pytest.raises(OperatorSurfaceError, match=r"aten\.take\.default.*\n.*allow=\['aten::take\.default'\]"):
        FlatIR.load(path)
    with pytest.raises(OperatorSurfaceError, match="aten::take"):
        ir2torch.convert(path)
    rebuilt = ir2torch.convert(FlatIR.load(path, allow=["aten::take"]), allow=["aten::take"])
    assert torch.equal(rebuilt(*ARGS), Take()(*ARGS))


def test_refused_operators_stay_refused_whatever_the_opt_in() -> None:
    """``allow=`` widens the surface among the classified operators only: file I/O and unchecked memory stay
    refused (``aten::*`` included)."""
    wide = safety.Allowlist().extended(["aten::*"])
    assert wide.is_allowed("aten.take.default")
    for name in ("aten.from_file.default", "aten.save.default", "aten.set_.source_Storage"):
        assert not wide.is_allowed(name)
        with pytest.raises(UnsafeTargetError) as caught:
            wide.check(name)
        assert not isinstance(caught.value, OperatorSurfaceError)
