"""``torch2ir demo``: the main job, end to end, on the built-in model of :mod:`torch2ir.demo`.

Convert -> save the IR JSON -> lower to ATen on ``meta`` and save the FlatIR -> save the weights ->
draw the hierarchy -> rebuild from the saved files -> verify against the original, each stage timed.

This module is the one place that uses both ``torch2ir`` and ``ir2torch``: the two packages never
import each other, and ``common`` imports neither at module level. The imports below are inside
:func:`run_demo` (as in :mod:`common.testing.roundtrip`), so importing ``common.cli`` stays free of
both packages; ``torch2ir``'s command line reaches the demo only through this function.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, TypeVar

import torch
from torch.utils import _pytree as pytree

from ..progress import Progress
from ..render import RenderError, render
from ..render.graphs import compact_count
from ..state_dict import save_safetensors
from ..verify import verify
from .app import one_line

T = TypeVar("T")

__all__ = ["run_demo"]

_STAGES = ("build model", "convert", "lower on meta", "save weights", "draw", "view", "rebuild", "verify", "run FlatIR")


def _size(path: Path) -> str:
    return f"{compact_count(path.stat().st_size)}B"


def run_demo(out: Path | None = None, *, quiet: bool = False, stdout: TextIO | None = None) -> int:
    """Run the demo and print its report.

    Args:
        out: folder for the files (created if needed); ``None`` uses a temporary folder removed afterwards.
        quiet: never draw the progress bar (it is drawn only on a terminal anyway).
        stdout: where the report goes (default ``sys.stdout``).

    Returns:
        0 when the rebuilt model reproduces the original outputs exactly with the same module paths and
        the executed FlatIR within 1e-5, else 1.

    Raises:
        IRError: a stage failed (it names the stage's object and what to do).
    """
    import ir2torch  # the one place that uses both packages: see the module docstring
    import torch2ir
    from torch2ir.demo import DemoModel, example_inputs

    stdout = stdout if stdout is not None else sys.stdout
    rows: list[tuple[str, float, str]] = []
    folder_cm = contextlib.nullcontext(out) if out is not None else tempfile.TemporaryDirectory(prefix="torch2ir-demo-")
    with folder_cm as folder_name, Progress(len(_STAGES), "demo", enabled=not quiet) as bar:
        folder = Path(folder_name)
        folder.mkdir(parents=True, exist_ok=True)

        def stage(name: str, fn: Callable[[], T]) -> tuple[T, float]:  # one timed stage under the bar
            with bar.stage(name):
                start = time.perf_counter()
                result = fn()
                return result, time.perf_counter() - start

        def build() -> tuple[torch.nn.Module, tuple[Any, ...]]:
            torch.manual_seed(0)
            return DemoModel().eval(), example_inputs()

        (model, args), _ = stage("build model", build)
        ir, t_convert = stage("convert", lambda: torch2ir.convert(model, args))
        ir_path = ir.save(folder / "demo.ir.json")
        types = Counter(impl.type for impl in ir.values())
        common = ", ".join(f"{n} {t}" for t, n in types.most_common(4))
        rows.append(("convert", t_convert, f"{len(ir)} implementations ({common}, ...) -> {ir_path.name} "
                     f"({_size(ir_path)})"))

        def lower() -> Any:
            with torch.device("meta"):
                meta_model = DemoModel().eval()
            return torch2ir.lower(meta_model, example_inputs("meta"))

        flat, t_lower = stage("lower on meta", lower)
        flat_path = flat.save(folder / "demo.flat.json")
        rows.append(("lower", t_lower, f"{len(flat.nodes)} ATen ops, {len(flat.weights)} weights, traced on meta "
                     f"without allocating a weight -> {flat_path.name} ({_size(flat_path)})"))

        state_path, t_state = stage("save weights",
                                    lambda: save_safetensors(model.state_dict(), folder / "demo.safetensors"))
        rows.append(("save weights", t_state, f"{state_path.name} ({_size(state_path)})"))

        def draw() -> list[str]:
            written = [render(ir, folder / f"demo.hierarchy.{ext}").name for ext in ("dot", "mmd")]
            try:
                written.insert(0, render(ir, folder / "demo.hierarchy.png").name)
            except RenderError as exc:  # matplotlib missing: the text forms are still there
                written.append(f"no PNG: {one_line(exc)}")
            return written

        pictures, t_draw = stage("draw", draw)
        rows.append(("draw", t_draw, ", ".join(pictures)))

        def view() -> Path:
            from ..htmlview import write_view

            path = folder / "demo.html"
            write_view(ir, path)
            return path

        view_path, t_view = stage("view", view)
        rows.append(("view", t_view, f"{view_path.name} ({_size(view_path)}): the interactive view, one offline "
                     "HTML file to open in a browser (ir2torch view FILE -o OUT.html)"))

        rebuilt, t_rebuild = stage("rebuild", lambda: ir2torch.convert(ir_path, str(state_path)))
        same_paths = [n for n, _ in rebuilt.named_modules()] == [n for n, _ in model.named_modules()]
        rows.append(("rebuild", t_rebuild, f"from {ir_path.name} + {state_path.name} (memory-mapped): "
                     f"{type(rebuilt.blocks[0].attn).__name__} at blocks.0.attn, {type(rebuilt.head).__name__} "
                     f"at head; same module paths: {same_paths}"))

        report, t_verify = stage("verify", lambda: verify(model, rebuilt, args))
        rows.append(("verify", t_verify, f"{'OK' if report.ok else 'FAILED'}: max |original - rebuilt| = "
                     f"{report.max_abs_diff:.3g} over {len(report.outputs)} outputs, "
                     f"{report.calls_compared} module calls compared"))

        def run_flat() -> float:
            executed = ir2torch.convert(flat_path, model.state_dict())
            with torch.no_grad():
                expected, got = model(*args), executed(*args)
            return max((a - b).abs().max().item()
                       for a, b in zip(pytree.tree_leaves(expected), pytree.tree_leaves(got)))

        flat_diff, t_flat = stage("run FlatIR", run_flat)
        rows.append(("run FlatIR", t_flat, f"{flat_path.name} executed with the weights: "
                     f"max |original - FlatIR| = {flat_diff:.3g}"))
        bar.close()

        params = sum(p.numel() for p in model.parameters())
        print(f"torch2ir demo: DemoModel (conv stem + 2 transformer blocks), {compact_count(params)} parameters",
              file=stdout)
        for name, seconds, text in rows:
            print(f"  {name:<13}{seconds:6.2f}s  {text}", file=stdout)
        print("  " + str(report).replace("\n", "\n  "), file=stdout)
        kept = f"files in {folder}" if out is not None else "files were in a temporary folder: --out DIR keeps them"
        print(kept, file=stdout)
    # the rebuild runs the same modules, so it must be exact; the FlatIR runs ATen ops where the original
    # may take a fused path (MultiheadAttention), so it gets the usual float32 tolerance
    ok = report.ok and report.max_abs_diff == 0 and flat_diff <= 1e-5 and same_paths
    return 0 if ok else 1
