"""Every function name the project's models produce, checked against the operator classes of ``common.safety``.

:func:`names_of` converts a model with ``torch2ir`` (module-level IR, eval and train mode) and lowers it
(``torch2ir.lower``, plain and ``decompose=True``), and returns every function ``implementation`` and FlatIR
``op_type``. Conversion runs with :func:`permissive` so that a refused operator shows up in the result instead of
stopping the conversion. ``python -m tests.security.op_corpus`` runs the whole corpus (tests/real, the zoo, the
quantized models, a few common layers) and prints the names that are not allowed (exit status 1 when there are
any), then the private ATen ops (``aten._*``) the corpus emits, which is where the table ``EXPORTED_PRIVATE`` of
``scripts/classify_ops.py`` comes from (a full run also names the entries of that table no model emits any more).

``--write-surface`` (a whole run) writes the default operator surface, ``common/default_ops.txt``
(:mod:`common.surface`): every ATen overload the corpus emits whose class is allowed, with the models that emit it,
plus the reviewed :data:`tests.security.surface_extras.EXTRA_SURFACE`; ``--check-surface`` exits 1 when the
checked-in table differs from what the run derives.
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from collections.abc import Callable, Iterator

import torch
from torch import nn

import torch2ir
from common import safety
from common.errors import IRError
from common.required_ops import function_names


@contextlib.contextmanager
def permissive() -> Iterator[None]:
    """Allow every registered ATen overload while converting, outside the default surface too (the names are
    checked afterwards)."""
    saved, surface = safety._aten_allowed, safety._in_default_surface
    safety._aten_allowed = lambda op, overload: safety._aten_overload(op, overload) is not None
    safety._in_default_surface = lambda name: True
    try:
        yield
    finally:
        safety._aten_allowed, safety._in_default_surface = saved, surface


def names_of(build: Callable[[], nn.Module], inputs: Callable[[], tuple[tuple, dict]], allow: tuple[str, ...] = (),
             *, train: bool = True, lower: bool = True, decompositions: tuple[bool, ...] = (False, True),
             set_mode: bool = True) -> set[str]:
    """Every function name of ``build()``'s IRs (eval and, with ``train``, train mode) and FlatIRs; without
    ``set_mode`` the model is converted in the mode it was built in (exported PT2E models refuse ``.train()``)."""
    converter = torch2ir.get_default_converter()
    for pattern in allow:
        converter.allowlist.allow(pattern)
    names: set[str] = set()
    with permissive(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        modes = (False, True) if train else (False,)
        for training in modes:
            model = build()
            if set_mode:
                model.train(training)
            args, kwargs = inputs()
            try:
                names |= function_names(converter.convert(model, args, kwargs))
            except IRError:  # a model that does not convert in this mode (see the corpus' notes)
                if not training:
                    raise
        if lower:
            model = build().eval() if set_mode else build()
            args, kwargs = inputs()
            for decompose in decompositions:
                try:
                    flat = torch2ir.lower(model, args, kwargs, decompose=decompose, converter=converter)
                except IRError:  # a model that is a whole-model leaf cannot be lowered by the conversion's capture
                    continue
                names |= {node.op_type for node in flat.nodes}
    return names


def refused(names: set[str]) -> dict[str, str]:
    """The names of ``names`` the default allow-list refuses, with the reason (opted-in namespaces excluded)."""
    out = {}
    for name in sorted(names):
        if name.startswith("aten.") or name in safety.PYTHON_FUNCTIONS or name.startswith("higher_order."):
            cls, reason = safety.op_class(name)
            if cls == "refused":
                out[name] = reason or ""
    return out


def private_ops(names: set[str]) -> dict[str, list[str]]:
    """The private ATen ops (a name starting with ``_``) among ``names``: op -> its overloads seen."""
    out: dict[str, list[str]] = {}
    for name in sorted(names):
        if name.startswith("aten._"):
            _, op, overload = name.split(".")
            out.setdefault(op, []).append(overload)
    return out


def _exported_private() -> dict[str, str]:
    """``scripts/classify_ops.py``'s table of the private ops export emits (op -> where)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "scripts" / "classify_ops.py"
    spec = importlib.util.spec_from_file_location("classify_ops", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.EXPORTED_PRIVATE


def _quant_models() -> list[tuple[str, Callable[[], nn.Module], Callable[[], tuple[tuple, dict]], tuple[str, ...]]]:
    """The quantized models of tests/quant: eager QAT/PTQ, PT2E (torchao), brevitas, when installed."""
    out = []
    from tests.quant import eager_models

    qconfig = torch.ao.quantization.get_default_qat_qconfig("x86")
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out.append(("eager_qat", lambda: eager_models.qat_model(qconfig), lambda: ((x,), {}), ()))
    with contextlib.suppress(Exception):
        out.append(("eager_ptq", lambda: eager_models.ptq_model(qconfig), lambda: ((x,), {}), ()))
    with contextlib.suppress(ImportError):
        from tests.quant import test_pt2e

        for qat, convert in ((False, True), (True, False), (True, True)):
            out.append((f"pt2e_{qat}_{convert}", lambda q=qat, c=convert: test_pt2e._quantized(q, c),
                        lambda: ((test_pt2e.X,), {}), tuple(test_pt2e.ALLOW)))
    with contextlib.suppress(ImportError):
        from tests.quant import test_brevitas

        out.append(("brevitas", test_brevitas._model, lambda: ((test_brevitas.X,), {}), ()))
    return out


class _Call(nn.Module):
    """A layer that is a function call (``torch.fft.rfft``, ``torch.cdist``, ``.item()``...)."""

    def __init__(self, fn: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.fn(*args)


def _randn(*shape: int) -> Callable[[], tuple[tuple, dict]]:
    return lambda: ((torch.randn(*shape, generator=torch.Generator().manual_seed(0)),), {})


def _bit_operators(x: torch.Tensor) -> torch.Tensor:
    """Python's operators on bool and int tensors: export writes ``aten.__and__``, ``aten.__ilshift__``..."""
    mask = x > 0
    mask = (mask ^ (x < 1)) | mask & mask
    i = x.long()
    i = (i << 2) >> 1
    i |= x.long()
    i &= 3
    i ^= x.long()
    i <<= 1
    i >>= 1
    return mask.float() + i


def _layers() -> list[tuple[str, Callable[[], nn.Module], Callable[[], tuple[tuple, dict]], tuple[str, ...]]]:
    """Common layers real models use that the model corpus lacks and whose export, or core-ATen decomposition,
    calls a private kernel (``log_softmax`` -> ``_log_softmax``, ``rfft`` -> ``_fft_r2c``...): without them the
    private ops they need would be refused."""
    import torch.nn.functional as F

    ids = lambda: ((torch.tensor([[1, 2, 3], [4, 5, 6]]),), {})  # noqa: E731
    return [
        ("layer_bit_operators", lambda: _Call(_bit_operators), _randn(3, 4), ()),
        ("layer_log_softmax", lambda: _Call(lambda x: F.log_softmax(x, -1)), _randn(4, 6), ()),
        ("layer_cross_entropy", lambda: _Call(lambda x: F.cross_entropy(x, torch.tensor([0, 1, 2, 3]))),
         _randn(4, 6), ()),
        ("layer_instance_norm", lambda: nn.InstanceNorm2d(3), _randn(2, 3, 8, 8), ()),
        ("layer_adaptive_avg_pool", lambda: nn.AdaptiveAvgPool2d(3), _randn(2, 3, 8, 8), ()),
        ("layer_rfft", lambda: _Call(lambda x: torch.fft.irfft(torch.fft.rfft(x), n=6)), _randn(4, 6), ()),
        ("layer_stft", lambda: _Call(lambda x: torch.stft(x, 16, window=torch.hann_window(16),
                                                          return_complex=True).abs()), _randn(2, 64), ()),
        ("layer_embedding_bag", lambda: nn.EmbeddingBag(10, 3), ids, ()),
        ("layer_cdist", lambda: _Call(lambda x: torch.cdist(x, x)), _randn(2, 5, 6), ()),
        ("layer_item", lambda: _Call(lambda x: x * x.amax().item()), _randn(4, 6), ()),
        ("layer_complex_conj",
         lambda: _Call(lambda x: torch.view_as_real(torch.polar(x.abs(), x).conj().resolve_conj())), _randn(4, 6), ()),
        ("layer_antialias", lambda: _Call(lambda x: F.interpolate(x, size=(4, 4), mode="bilinear", antialias=True)),
         _randn(2, 3, 8, 8), ()),
        ("layer_antialias_bicubic",  # timm's naflexvit / samvit position-embedding resize
         lambda: _Call(lambda x: F.interpolate(x, size=(6, 6), mode="bicubic", antialias=True)),
         _randn(2, 3, 8, 8), ()),
        ("layer_nearest_exact",  # diffusers' AutoencoderKLWan upsampler; 1-D, 2-D and 3-D
         lambda: _Call(lambda x: (F.interpolate(x, scale_factor=2.0, mode="nearest-exact"),
                                  F.interpolate(x.flatten(2), size=5, mode="nearest-exact"),
                                  F.interpolate(x[:, :, None], scale_factor=(1.0, 1.5, 1.5), mode="nearest-exact"))),
         _randn(2, 3, 8, 8), ()),
    ]


def corpus() -> list[tuple[str, Callable[[], nn.Module], Callable[[], tuple[tuple, dict]], tuple[str, ...]]]:
    """``(name, build, inputs, allow)`` of every model of the corpus: tests/real, the zoo (and REAL), quantized,
    and the common layers of :func:`_layers`."""
    from tests.models.real import REAL
    from tests.models.zoo import ZOO
    from tests.real.corpus import CORPUS

    out = [(a.name, a.build, a.inputs, tuple(a.allow)) for a in CORPUS]
    out += [(c.name, c.build, c.inputs, ()) for c in (*ZOO, *REAL)]
    return out + _quant_models() + _layers()


def main(argv: list[str] | None = None) -> int:
    """Convert the whole corpus and report the refused names (exit 1 if any).

    ``--skip N`` starts at the N-th model; ``--light`` converts in eval mode only and lowers with
    ``decompose=True`` only (about half the work).
    """
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--skip", type=int, default=0)
    parser.add_argument("--light", action="store_true")
    parser.add_argument("--write-surface", action="store_true", help="write common/default_ops.txt")
    parser.add_argument("--check-surface", action="store_true", help="exit 1 when common/default_ops.txt is stale")
    parser.add_argument("--from-log", help="derive the surface from the printed output of an earlier whole run")
    options = parser.parse_args(argv)
    if options.from_log:
        from pathlib import Path

        seen, models = seen_in_log(Path(options.from_log).read_text(encoding="utf-8"))
        stale = surface_table(seen, models, write=options.write_surface)
        print(f"{models} models, {len(surface_entries(seen))} overloads:", "stale" if stale else "up to date")
        return int(stale and options.check_surface)
    if (options.write_surface or options.check_surface) and (options.skip or options.light):
        parser.error("the surface is derived from a whole run (no --skip, no --light)")
    everything: set[str] = set()
    seen: dict[str, set[str]] = {}
    failures = []
    models = corpus()[options.skip:]
    for name, build, inputs, allow in models:
        try:
            found = names_of(build, inputs, allow, train=not name.startswith("pt2e") and not options.light,
                             decompositions=(True,) if options.light else (False, True),
                             set_mode=not name.startswith("pt2e"))
        except Exception as exc:  # noqa: BLE001 - report and go on
            failures.append(f"{name}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        bad = refused(found)
        print(f"{name}: {len(found)} names{'; REFUSED ' + str(bad) if bad else ''}: {sorted(found)}", flush=True)
        everything |= found
        for op in found:
            seen.setdefault(op, set()).add(name)
    bad = refused(everything)
    aten = sorted(n for n in everything if n.startswith("aten."))
    print(f"\nnames: {sorted(everything)}")
    print(f"\n{len(models)} models, {len(failures)} failed to convert, {len(everything)} distinct names "
          f"({len(aten)} aten overloads), {len(bad)} refused")
    for line in failures:
        print("  failed:", line)
    for name, reason in bad.items():
        print("  refused:", name, reason)
    print("allocating among them:", sorted(n for n in everything if n in safety.ALLOCATING_OPS))
    private = private_ops(everything)
    print("private ops among them (scripts/classify_ops.py's EXPORTED_PRIVATE must list those not argued safe):")
    for op, overloads in private.items():
        print(f"  {op}: {', '.join(overloads)}")
    if not options.skip and not options.light:  # the whole corpus: entries of the table no model emits any more
        stale = sorted(set(_exported_private()) - set(private))
        print("EXPORTED_PRIVATE entries the corpus did not emit:", stale or "none")
    if options.write_surface or options.check_surface:
        stale = surface_table(seen, len(models), write=options.write_surface)
        print("common/default_ops.txt is", "stale" if stale and options.check_surface else "written"
              if options.write_surface else "up to date")
        if options.check_surface and stale:
            return 1
    return 1 if bad else 0


def seen_in_log(text: str) -> tuple[dict[str, set[str]], int]:
    """``(name -> models that emit it, number of models)`` from the printed output of a whole run of :func:`main`
    (its lines ``<model>: <n> names: [...]``)."""
    import ast
    import re

    seen: dict[str, set[str]] = {}
    models = 0
    for line in text.splitlines():
        match = re.match(r"^(\S+): \d+ names(?:; REFUSED .*?)?: (\[.*\])$", line.strip())
        if match:
            models += 1
            for name in ast.literal_eval(match.group(2)):
                seen.setdefault(name, set()).add(match.group(1))
    return seen, models


def surface_entries(seen: dict[str, set[str]]) -> dict[str, set[str]]:
    """The default surface derived from ``seen`` (name -> corpus models that emit it): the ATen overloads whose
    class is allowed, and the reviewed :data:`~tests.security.surface_extras.EXTRA_SURFACE`."""
    from tests.security.surface_extras import EXTRA_SURFACE

    out = {n: set(where) for n, where in seen.items()
           if n.startswith("aten.") and safety.op_class(n)[0] in ("pure", "allocating")}
    for name, reason in EXTRA_SURFACE.items():
        out.setdefault(name, set()).add(f"extra: {reason}")
    return out


def surface_table(seen: dict[str, set[str]], models: int, *, write: bool) -> bool:
    """Derive the table from ``seen``; True when it differs from the checked-in one (written with ``write``).
    Only the overload names are compared (the places listed follow the corpus' order of models)."""
    from common import surface

    entries = surface_entries(seen)
    old = surface.parse(surface.TABLE.read_text(encoding="utf-8")) if surface.TABLE.exists() else {}
    stale = set(entries) != set(old)
    if stale:
        print("not in the table:", sorted(set(entries) - set(old)), "; in the table only:",
              sorted(set(old) - set(entries)))
    if write:
        surface.TABLE.write_text(surface.render(entries, torch.__version__, models=models), encoding="utf-8")
    return stale


if __name__ == "__main__":
    sys.exit(main())
