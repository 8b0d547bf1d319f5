"""Whole registries through the loop: build, convert, rebuild, compare with eager (issue #29).

Usage::

    python -m benchmarks.sweep --zoo torchvision                       # every classification model
    python -m benchmarks.sweep --zoo torchvision --tasks classification,segmentation,video,quantization
    python -m benchmarks.sweep --zoo timm --limit 100 --timeout 120 --output /tmp/timm.md
    python -m benchmarks.sweep --zoo timm --filter 'convnext*' --limit 0   # every match
    python -m benchmarks.sweep --zoo diffusers
    python -m benchmarks.sweep --zoo brevitas                           # BNN-PYNQ, ImageNet examples, ESPCN
    python -m benchmarks.sweep --zoo brevitas --opaque                  # export failures again with opaque="auto"
    python -m benchmarks.sweep --zoo transformers --limit 0 --timeout 60   # every model type, shrunk configs
    python -m benchmarks.sweep --zoo timm --limit 0 --rows timm.jsonl --shard 1/2   # half, each row kept as it comes
    python -m benchmarks.sweep --zoo timm --limit 0 --rows b.jsonl --resume timm.jsonl   # the models it lacks
    python -m benchmarks.sweep --zoo timm --merge timm.jsonl other.jsonl --output timm.md   # the table of saved rows

Each model is built with random weights (seeded, no download), put in eval mode and called on a small input;
then ``torch2ir.convert`` → ``ir2torch.convert(ir, model.state_dict())`` → the rebuilt model is called on the
same input and every output tensor is compared with the eager one. Models run one after the other in a child
process; a model that runs over ``--timeout`` seconds kills its child, is reported as such, and a new child
goes on with the next model, so one hang does not stop the sweep.

A row's status is one of

- ``exact``: every output tensor equal;
- ``DIFFERS WITHOUT AN ERROR <max abs diff>``: the status that matters: the rebuild runs and returns something
  else, and nothing said so;
- ``export differs <max abs diff>``: the rebuild differs from eager but equals ``torch.export``'s own module of the
  model exactly: the traced program itself rounds differently (checked only when the outputs differ);
- ``refused <IRError subclass: first line>``: the library said no, naming the construct;
- ``error <class: first line>``: a non-``IRError`` exception left the library (a bug too, but a loud one);
- ``export failed <first line>``: plain ``torch.export.export`` cannot trace the model either (checked whenever
  the conversion's own export fails or a non-``IRError`` leaves it);
- ``eager failed``, ``skipped`` (over ``--max-params``), ``timeout``, ``crashed``.

With ``--opaque``, every ``export failed`` model is converted again with ``opaque="auto"`` (the smallest modules
whose trace fails kept as opaque leaves), rebuilt with their classes allowed and compared with eager; its row gets
that status, the leaves and the share of the model's parameters inside them, and the summary the count of exact
ones with the median and maximum share.

timm's names (``--limit`` N, or 0 for all) come in a seeded round robin over its families, so the rows of an
interrupted sweep are still spread over them. torchvision's detection models run with pure-PyTorch kernels for the
extension's ``nms`` and ``roi_align`` where it does not load (:mod:`benchmarks.torchvision_nms`), the R-CNNs,
RetinaNet and FCOS at 320x320 rather than 800x800.

The output is a Markdown table (model, status, convert time) and a count per status; ``--output`` writes it to
a file as well. No assertion: this measures what CI cannot hold (``tests/ecosystems`` holds a sample).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.sweep_compare import DIFFERS, first_line, max_diff
from benchmarks.sweep_opaque import opaque_row, opaque_text
from benchmarks.sweep_registries import build, default_on_meta, params_on_meta, timm_names, torchvision_names
from benchmarks.sweep_transformers import transformers_names
from benchmarks.sweep_zoos import brevitas_models, diffusers_blocks

ROOT = Path(__file__).resolve().parent.parent



def run_one(zoo: str, name: str, size: int, max_params: float, opaque: bool = False) -> dict[str, Any]:
    """One model's row; with ``opaque``, a model plain ``torch.export`` cannot trace is converted again with
    ``opaque="auto"`` (:func:`opaque_row`)."""
    row = _run_one(zoo, name, size, max_params)
    if opaque and row["status"].startswith("export failed"):
        import torch

        torch.manual_seed(0)  # the same weights as the row's own model
        row["opaque"] = opaque_row(*build(zoo, name, size), real=lambda: default_on_meta(zoo, name))
    return row


def _run_one(zoo: str, name: str, size: int, max_params: float) -> dict[str, Any]:
    import warnings

    import torch

    import ir2torch
    import torch2ir
    from common.errors import IRError
    from torch2ir.frontend.export import ExportFailedError

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    params = params_on_meta(zoo, name)
    if params is not None and params > max_params:
        return {"status": f"skipped ({params / 1e6:.0f} M parameters)"}
    try:
        model, args, kwargs = build(zoo, name, size)
        model.eval()
        torch.manual_seed(0)  # models drawing random numbers in eval mode (ViTMAE's masking, VITS' noise)
        with torch.no_grad():
            expected = model(*args, **kwargs)
    except Exception as error:  # noqa: BLE001 - reported as a row
        return {"status": f"eager failed {type(error).__name__}: {first_line(error)}"}
    start = time.perf_counter()
    try:
        ir = torch2ir.convert(model, args, kwargs)
    except IRError as error:
        seconds = time.perf_counter() - start
        if isinstance(error, ExportFailedError):  # torch2ir's export failed: does a plain one?
            try:
                torch.export.export(model, args, kwargs)
            except Exception as plain:  # noqa: BLE001 - export itself fails
                return {"status": f"export failed {type(plain).__name__}: {first_line(plain)}", "convert_s": seconds}
        return {"status": f"refused {type(error).__name__}: {first_line(error)}", "convert_s": seconds}
    except Exception as error:  # noqa: BLE001 - a non-IRError from the library: reported as a row
        seconds = time.perf_counter() - start
        try:
            torch.export.export(model, args, kwargs)
        except Exception as plain:  # noqa: BLE001 - export itself fails
            return {"status": f"export failed {type(plain).__name__}: {first_line(plain)}", "convert_s": seconds}
        return {"status": f"error {type(error).__name__}: {first_line(error)}", "convert_s": seconds}
    seconds = time.perf_counter() - start
    try:
        rebuilt = ir2torch.convert(ir, model.state_dict())
        torch.manual_seed(0)  # the same random numbers as the eager call drew
        with torch.no_grad():
            got = rebuilt(*args, **kwargs)
    except IRError as error:
        return {"status": f"refused {type(error).__name__}: {first_line(error)}", "convert_s": seconds}
    except Exception as error:  # noqa: BLE001 - reported as a row
        return {"status": f"error {type(error).__name__}: {first_line(error)}", "convert_s": seconds}
    diff = max_diff(got, expected)
    if diff != 0 and _export_agrees(model, args, kwargs, got):
        return {"status": f"export differs {diff:.3g} (the rebuild equals torch.export's own module exactly)",
                "convert_s": seconds}
    return {"status": "exact" if diff == 0 else f"{DIFFERS} {diff:.3g}", "convert_s": seconds}


def _export_agrees(model: Any, args: tuple, kwargs: dict, got: Any) -> bool:
    """Whether ``torch.export``'s own module of ``model`` (seeded the same) returns exactly ``got``: the traced
    program itself differs from eager (rounding of a decomposed or functionalized op), not the rebuild."""
    import torch

    try:
        module = torch.export.export(model, args, kwargs).module()
        torch.manual_seed(0)
        with torch.no_grad():
            return max_diff(module(*args, **kwargs), got) == 0
    except Exception:  # noqa: BLE001 - no verdict: the row stays "differs"
        return False


def child(zoo: str, names: list[str], size: int, max_params: float, opaque: bool = False) -> None:
    """Run ``names`` in order, one JSON line on stdout per model."""
    for name in names:
        print(json.dumps({"name": name, "start": True}), flush=True)
        try:
            row = run_one(zoo, name, size, max_params, opaque)
        except Exception:  # noqa: BLE001 - the sweep goes on with the next model
            row = {"status": "crashed " + traceback.format_exc().strip().splitlines()[-1][:160]}
        print(json.dumps({"name": name, **row}), flush=True)


# --------------------------------------------------------------------------------------------- the sweep


def sweep(zoo: str, names: list[str], *, size: int, timeout: float, max_params: float, opaque: bool = False,
          echo: Callable[[str], None] = print, rows_file: Path | None = None) -> list[dict[str, Any]]:
    """Every model of ``names`` in child processes (a new one after a timeout or a crash); with ``rows_file``, each
    row is appended to it as a JSON line as soon as it is known (an interrupted sweep keeps its rows)."""
    rows: list[dict[str, Any]] = _Rows(rows_file)
    todo = list(names)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "HF_HUB_OFFLINE": "1"}
    while todo:
        cmd = [sys.executable, "-m", "benchmarks.sweep", "--child", json.dumps(
            {"zoo": zoo, "names": todo, "size": size, "max_params": max_params, "opaque": opaque})]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def read(stream=proc.stdout, out=lines) -> None:
            for line in stream:
                out.put(line)
            out.put(None)

        threading.Thread(target=read, daemon=True).start()
        current, deadline = None, time.monotonic() + timeout + 60  # the first model also pays the imports
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = ""
            if line is None or (line == "" and time.monotonic() >= deadline):
                proc.kill()
                proc.wait()
                name = current or todo[0]
                status = "timeout" if line == "" else "crashed (child died)"
                rows.append({"name": name, "status": status})
                echo(f"{name}: {status}")
                todo = todo[todo.index(name) + 1:]
                break
            if not line.strip().startswith("{"):
                continue
            msg = json.loads(line)
            if msg.get("start"):
                current, deadline = msg["name"], time.monotonic() + timeout
                continue
            rows.append(msg)
            echo(f"{msg['name']}: {msg['status']}" + (f" ({msg['convert_s']:.1f} s)" if "convert_s" in msg else "")
                 + (f"; opaque='auto': {opaque_text(msg['opaque'])}" if "opaque" in msg else ""))
            todo = todo[todo.index(msg["name"]) + 1:]
            current = None
            if not todo:
                proc.wait()
                break
    return rows


class _Rows(list):
    """A list of rows that also appends each row to a JSON-lines file."""

    def __init__(self, path: Path | None) -> None:
        super().__init__()
        self.path = path

    def append(self, row: dict[str, Any]) -> None:
        super().append(row)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")


def read_rows(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """The rows of JSON-lines files written by ``--rows`` (a model in several: its last row)."""
    rows: dict[str, dict[str, Any]] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                rows[row["name"]] = row
    return list(rows.values())


def _kind(status: str) -> str:
    for prefix in (DIFFERS, "exact", "export differs", "refused", "error", "export failed", "eager failed", "skipped",
                   "timeout", "crashed"):
        if status.startswith(prefix):
            return prefix
    return status


def table(zoo: str, rows: list[dict[str, Any]]) -> str:
    counts = Counter(_kind(r["status"]) for r in rows)
    silent = [r for r in rows if r["status"].startswith(DIFFERS)]
    out = [f"## {zoo}: {len(rows)} models", "", "| status | models |", "|---|---:|"]
    out += [f"| {k} | {v} |" for k, v in counts.most_common()]
    out += ["", f"**Silently different (output differs, no error): {len(silent)}**"
            + (": " + ", ".join(r["name"] for r in silent) if silent else ""), ""]
    tried = [r["opaque"] for r in rows if "opaque" in r]
    if tried:  # --opaque: the models export cannot trace, converted with opaque="auto"
        exact = [o for o in tried if o["status"] == "exact"]
        alike = [o for o in tried if o["status"].startswith("export differs")]
        shares = sorted(o["share"] for o in exact + alike)
        real = sorted(o["real_share"] for o in exact + alike if "real_share" in o)
        out += [f"**With `opaque=\"auto\"`: {len(exact)} of the {len(tried)} models export cannot trace are exact**"
                + (f" (+{len(alike)} equal to export's own modules of what is traced)" if alike else "")
                + (f"; parameters inside opaque leaves: median {100 * statistics.median(shares):.1f} %, max "
                   f"{100 * shares[-1]:.1f} %" if shares else "")
                + (f"; at the default configurations' dimensions ({len(real)} models): median "
                   f"{100 * statistics.median(real):.1f} %, max {100 * real[-1]:.1f} %" if real else "")
                + (f"; loop closed (converting the rebuild with `opaque=\"auto\"` gives the IR again): "
                   f"{sum(o.get('loop') == 'closed' for o in exact)} of the {len(exact)} exact" if exact else ""), ""]
        if any(o["status"].startswith(DIFFERS) for o in tried):
            out += [f"**Silently different with opaque leaves: "
                    f"{', '.join(r['name'] for r in rows if r.get('opaque', {}).get('status', '').startswith(DIFFERS))}"
                    "**", ""]
    out += ["| model | status | convert (s) |" + (" opaque=\"auto\" |" if tried else ""),
            "|---|---|---:|" + ("---|" if tried else "")]
    for r in sorted(rows, key=lambda r: r["name"]):
        seconds = f"{r['convert_s']:.1f}" if "convert_s" in r else ""
        extra = (f" {opaque_text(r['opaque'])} |" if "opaque" in r else " |") if tried else ""
        out.append(f"| {r['name']} | {r['status']} | {seconds} |{extra}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--zoo", choices=("torchvision", "timm", "diffusers", "transformers", "brevitas"),
                        default="torchvision")
    parser.add_argument("--tasks", default="classification",
                        help="torchvision: comma-separated of classification,segmentation,detection,video,"
                             "quantization,optical_flow")
    parser.add_argument("--filter", default="*", help="globs over the registry's names, comma-separated")
    parser.add_argument("--limit", type=int, default=300, help="timm: seeded sample size over families (0: all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, default=64, help="image side where the model allows it")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per model")
    parser.add_argument("--max-params", type=float, default=1e8, help="timm: skip larger models")
    parser.add_argument("--output", type=Path, help="also write the Markdown table here")
    parser.add_argument("--opaque", action="store_true",
                        help='convert the models torch.export cannot trace again with opaque="auto"')
    parser.add_argument("--rows", type=Path, help="append each row to this JSON-lines file as it comes")
    parser.add_argument("--shard", help="K/N: only every N-th model of the list, from the K-th (1-based)")
    parser.add_argument("--merge", type=Path, nargs="+", help="no sweep: the table of these --rows files")
    parser.add_argument("--resume", type=Path, nargs="+", help="skip the models these --rows files have rows for")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.child:
        spec = json.loads(ns.child)
        child(spec["zoo"], spec["names"], spec["size"], spec["max_params"], spec.get("opaque", False))
        return 0
    if ns.merge:
        text = table(ns.zoo, read_rows(ns.merge))
        print(text)
        if ns.output:
            ns.output.write_text(text)
        return 0
    if ns.zoo == "torchvision":
        names = torchvision_names(ns.tasks.split(","))
    elif ns.zoo == "timm":
        names = timm_names(ns.filter, ns.limit, ns.seed)
    elif ns.zoo == "transformers":
        names = transformers_names()
    elif ns.zoo == "brevitas":
        names = sorted(brevitas_models())
    else:
        names = sorted(diffusers_blocks())
    names = [n for n in names if any(fnmatch.fnmatch(n, glob) for glob in ns.filter.split(","))]
    if ns.zoo != "timm" and ns.limit and len(names) > ns.limit:
        names = names[: ns.limit]
    if ns.resume:
        done = {r["name"] for r in read_rows(p for p in ns.resume if p.exists())}
        names = [n for n in names if n not in done]
    if ns.shard:
        k, n = (int(v) for v in ns.shard.split("/"))
        names = names[k - 1::n]
    rows = sweep(ns.zoo, names, size=ns.size, timeout=ns.timeout, max_params=ns.max_params, opaque=ns.opaque,
                 echo=lambda s: print(s, file=sys.stderr, flush=True), rows_file=ns.rows)
    text = table(ns.zoo, rows)
    print(text)
    if ns.output:
        ns.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
