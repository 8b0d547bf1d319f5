"""How fast the interactive view of a 70B-dims Llama opens in headless Chromium (issue #17).

Usage::

    python benchmarks/view_load.py                 # Llama-2-70B dimensions, 80 layers, on meta
    python benchmarks/view_load.py --layers 32 --runs 5
    python benchmarks/view_load.py --runs 3 > benchmarks/results-view.md   # the figures docs/cli.md quotes

Converts ``LlamaForCausalLM`` with Llama-2-70B's dimensions on the ``meta`` device (no weight is allocated),
writes its view with ``ir.view``, and opens it in ``/usr/bin/chromium --headless`` several times. The page
measures its own load (``performance.now()`` at the end of its script: reading the 1.8 MB file, parsing the
JSON, drawing the tree) and writes it into ``document.title``, read here from ``--dump-dom``; the browser's
start-up is reported apart, as the wall time of the whole process. The same page is measured again with an
overlay on every module and graph node (``ir.view(..., overlay=...)``), and side by side with the same model
with its attention projections fused (``ir.view(..., compare=fused)``); and the size of the one graph Model
Explorer's adapter gives for it (:mod:`common.explorer`). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

#: Llama-2-70B's dimensions (80 layers, grouped-query attention with 8 key/value heads)
LLAMA_70B = {"hidden": 8192, "intermediate": 28672, "heads": 64, "kv_heads": 8, "vocab": 32000, "positions": 4096}
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
FRAGMENTS = {"open": "", "block 41 + graph of model": "#expand=layers.41&select=layers.41.self_attn&graph=model"}


def _load(page: Path, fragment: str, profile: Path) -> tuple[int, float]:
    """The page's own load time (ms) and the browser process's wall time (s) for one ``--dump-dom``."""
    start = time.perf_counter()
    done = subprocess.run(["/usr/bin/chromium", *FLAGS, f"--user-data-dir={profile}", "--dump-dom",
                           page.as_uri() + fragment], capture_output=True, text=True, timeout=300, check=True)
    wall = time.perf_counter() - start
    found = re.search(r"loaded in (\d+) ms</title>", done.stdout)
    if found is None:
        raise SystemExit(f"the page did not report its load time:\n{done.stderr[-2000:]}")
    return int(found.group(1)), wall


def main() -> None:
    """Convert, write the view, open it ``--runs`` times per fragment and print a Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=80)
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    import torch

    import torch2ir
    from benchmarks.models import _seeded, llama

    model = _seeded(lambda: llama(layers=options.layers, **LLAMA_70B), "meta")
    start = time.perf_counter()
    ir = torch2ir.convert(model, (torch.zeros((1, 16), dtype=torch.long, device="meta"),))
    convert = time.perf_counter() - start
    # an overlay on every module (its parameter count) and every graph node (its position): the largest one
    overlay: dict[str, float] = {}
    for key, impl in ir.items():
        overlay[key] = float(sum(math.prod(int(d) for d in rec["shape"]) for rec in impl.state.values()))
        for g in impl.graphs():
            overlay.update({f"{key}:{n}": float(i) for i, n in enumerate(g.nodes)})
    from common.explorer import explorer_graph

    start = time.perf_counter()
    graph = explorer_graph(ir)  # what Model Explorer's adapter gives (common.explorer)
    built = time.perf_counter() - start
    print(f"# The interactive view of a Llama with 70B dimensions ({options.layers} layers, on meta)\n\n"
          f"`python benchmarks/view_load.py --runs {options.runs}` ({time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start); read by tests/docs "
          "(docs/cli.md quotes these figures).\n")
    print(f"- Model Explorer graph (common.explorer): {len(graph['nodes'])} nodes in "
          f"{len({n['namespace'] for n in graph['nodes']})} layers, {len(json.dumps(graph)) / 1e6:.1f} MB as JSON, "
          f"built in {built:.2f} s")
    with tempfile.TemporaryDirectory() as tmp:
        pages = {}
        from common.rewrite import fuse_qkv

        fused, _ = fuse_qkv(ir, model.state_dict())  # the same model with its attention projections fused (meta)
        for label, extra in (("", {}), (" + overlay", {"overlay": overlay, "overlay_name": "parameters"}),
                             (" + compare (QKV fused)", {"compare": fused})):
            start = time.perf_counter()
            pages[label] = page = ir.view(Path(tmp) / f"llama70b{len(pages)}.html", **extra)
            write = time.perf_counter() - start
            print(f"- Llama, 70B dims, {options.layers} layers on meta{label}: {len(ir)} implementations, convert "
                  f"{convert:.1f} s, view written in {write:.1f} s, {page.stat().st_size / 1e6:.2f} MB"
                  + (f", {len(overlay)} overlay entries" if "overlay" in extra else ""))
        print("\n| page | load (page's own, median ms) | min..max ms | chromium process (median s) |")
        print("|---|---|---|---|")
        for label, page in pages.items():
            for name, fragment in FRAGMENTS.items():
                runs = [_load(page, fragment, Path(tmp) / "profile") for _ in range(options.runs)]
                ms = [r[0] for r in runs]
                print(f"| {name}{label} | {statistics.median(ms):.0f} | {min(ms)}..{max(ms)} | "
                      f"{statistics.median(r[1] for r in runs):.2f} |")


if __name__ == "__main__":
    main()
