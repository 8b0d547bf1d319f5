"""``torch.compile(rebuilt, fullgraph=True)`` over the whole real corpus (issue 30): does every rebuilt model compile
as one graph, and does the compiled model compute what the rebuilt one does?

Usage::

    python benchmarks/compile_corpus.py                      # every corpus architecture, backend aot_eager
    python benchmarks/compile_corpus.py --backend inductor --only resnet,bert
    python benchmarks/compile_corpus.py --output /tmp/compile.md

Per architecture (built as ``tests/real/corpus.py`` builds it: small config, random weights, eval mode): convert,
rebuild with the original state, then ``torch.compile(rebuilt, backend=..., fullgraph=True)`` on the corpus
inputs. A row says ``ok`` with the max abs difference from the rebuilt model's eager output, or the first line of
the error (a graph break under ``fullgraph=True`` raises). Times are the first compiled call (tracing and
compiling). Nothing is asserted here; ``tests/real/test_compile.py`` checks a sample.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _max_diff(a, b) -> float:
    import torch
    from torch.utils._pytree import tree_leaves

    diffs = [float((x.float() - y.float()).abs().max()) if x.numel() else 0.0
             for x, y in zip(tree_leaves(a), tree_leaves(b)) if isinstance(x, torch.Tensor)]
    return max(diffs, default=0.0)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="aot_eager")
    parser.add_argument("--only", help="comma-separated architecture names (default: the whole corpus)")
    parser.add_argument("--output", help="also write the table to this file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from tests.real.corpus import CORPUS
    from tests.real.shared import converters
    from torch2ir.train.dropout import TrainModeWarning

    wanted = set(args.only.split(",")) if args.only else None
    rows, ok = [], 0
    for arch in CORPUS:
        if wanted is not None and arch.name not in wanted:
            continue
        torch._dynamo.reset()
        model = arch.build().eval()
        inputs, kwargs = arch.inputs()
        conv = converters(arch)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TrainModeWarning)
            ir = conv["converter"].convert(model, inputs, kwargs)
        rebuilt = conv["rebuilder"].convert(ir, model.state_dict())
        with torch.no_grad():
            want = rebuilt(*inputs, **kwargs)
            t0 = time.perf_counter()
            try:
                got = torch.compile(rebuilt, backend=args.backend, fullgraph=True)(*inputs, **kwargs)
                status = f"ok, max abs diff {_max_diff(got, want):.1e}"
                ok += 1
            except Exception as exc:  # noqa: BLE001 - reported per row
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:150]
                status = f"FAILED {type(exc).__name__}: {first}"
        rows.append(f"| {arch.name} | {status} | {time.perf_counter() - t0:.1f} |")
        print(rows[-1], file=sys.stderr, flush=True)
    table = "\n".join([f"torch.compile(rebuilt, backend={args.backend!r}, fullgraph=True): {ok} of {len(rows)} ok",
                       "", "| architecture | result | first call (s) |", "|---|---|---:|", *rows])
    print(table)
    if args.output:
        Path(args.output).write_text(table + "\n", encoding="utf-8")
        from benchmarks import results_file

        results_file.update_pages()


if __name__ == "__main__":
    main()
