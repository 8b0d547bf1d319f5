"""What loading and rebuilding very large IR files costs, by phase (issue 28).

Usage::

    python benchmarks/large_files.py                        # both documents at full size, 3 runs each
    python benchmarks/large_files.py --case many --impls 10000 --runs 1
    python benchmarks/large_files.py --case variants --variants 64 --nodes 15000
    python benchmarks/large_files.py --profile many         # cProfile of one load + rebuild, top functions
    python benchmarks/large_files.py --case many --shared   # also as saved, alike implementations stored once
    python benchmarks/large_files.py --case many --kinds relu   # 10**5 leaves of one kind

Builds two valid IR documents programmatically (nothing is traced):

- ``many``: a root whose graph calls ``--impls`` (default 10**5) tiny implementations in a chain, a third
  each of ``linear`` (a leaf built from its attributes), ``relu`` (a leaf) and ``module`` (a graph
  ``x -> aten.relu -> aten.add -> output``, rebuilt as generated code); ``--kinds`` picks other kinds;
- ``variants``: a root calling one implementation ``--variants + 1`` times (default 64 + 1), once per graph:
  its main graph and its variants, each a chain of ``--nodes`` (default 15 000) ``aten.relu`` nodes.

Each run writes the document to a temporary file and, in a fresh interpreter, times the phases of a load
and a rebuild on ``device="meta"``: reading + JSON parse (:func:`common.json_files.loads_json`), IR
construction (:meth:`common.ir.IR.from_dict` with value decoding), validation (:func:`common.validate.validate`),
rebuild (:func:`ir2torch.convert`); plus the whole ``IR.load`` as one call, and ``ir2torch.convert(path)``, which
loads and rebuilds in one call (the document validated once, the loaded IR freed before the garbage collector
runs again; the young-generation collection the new objects trigger when the collector resumes is inside the
call), and the full collection (``gc.collect()``) right after it, which walks every object of the model, as
each later full collection of the process will. Peak memory is the child's
``VmHWM`` (the peak resident set) after each phase (it only grows). Times are medians over ``--runs``
children; nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable instead of benchmarks/
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_F32 = {"$dtype": "float32"}
_META = {"shape": [2, 4], "dtype": _F32}


def _node(name: str, ntype: str, target: str, src: str | None = None, *extra: Any) -> dict[str, Any]:
    node: dict[str, Any] = {"name": name, "type": ntype, "implementation": target}
    if ntype == "input":
        node["meta"] = _META
        return node
    node["args"] = [[{"$ref": src}]] if ntype == "output" else [{"$ref": src}, *extra]
    node["kwargs"] = {}
    return node


def _edge(src: str, dst: str, slot: Any = 0) -> dict[str, Any]:
    return {"src": src, "dst": dst, "slot": slot}


def _chain(calls: list[tuple[str, str, str]], variants: list[int | None] | None = None) -> dict[str, Any]:
    """A graph ``x -> calls[0] -> calls[1] -> ... -> output``; ``calls`` holds ``(node, type, target)``."""
    nodes = {"x": _node("x", "input", "input")}
    edges = []
    prev = "x"
    for i, (name, ntype, target) in enumerate(calls):
        nodes[name] = _node(name, ntype, target, prev)
        if variants is not None and variants[i]:
            nodes[name]["variant"] = variants[i]
        edges.append(_edge(prev, name))
        prev = name
    nodes["output"] = _node("output", "output", "output", prev)
    edges.append(_edge(prev, "output", [0, 0]))
    return {"nodes": nodes, "edges": edges}


def _graph_meta(cls: str) -> dict[str, Any]:
    """``meta`` of a module rebuilt from its graph: one tensor in, one tensor out."""
    spec = ('[1, {"type": "builtins.tuple", "context": "null", "children_spec": [{"type": "builtins.tuple", '
            '"context": "null", "children_spec": [{"type": null, "context": null, "children_spec": []}]}, '
            '{"type": "builtins.dict", "context": "[]", "children_spec": []}]}]')
    return {"class": cls, "training": False, "in_spec": spec,
            "out_spec": '[1, {"type": null, "context": null, "children_spec": []}]', "forward_arg_names": ["x"]}


def _leaf_linear(key: str) -> dict[str, Any]:
    state = {"weight": {"kind": "parameter", "shape": [4, 4], "dtype": _F32, "requires_grad": True},
             "bias": {"kind": "parameter", "shape": [4], "dtype": _F32, "requires_grad": True}}
    return {"name": key, "type": "linear", "in_features": 4, "out_features": 4, "bias": True, "nodes": {},
            "edges": [], "state": state, "meta": {"class": "torch.nn.modules.linear.Linear", "training": False}}


def _leaf_relu(key: str) -> dict[str, Any]:
    return {"name": key, "type": "relu", "inplace": False, "nodes": {}, "edges": [],
            "meta": {"class": "torch.nn.modules.activation.ReLU", "training": False}}


def _small_module(key: str) -> dict[str, Any]:
    nodes = {"x": _node("x", "input", "input"),
             "relu": _node("relu", "function", "aten.relu.default", "x"),
             "add": _node("add", "function", "aten.add.Tensor", "relu", 1),
             "output": _node("output", "output", "output", "add")}
    edges = [_edge("x", "relu"), _edge("relu", "add"), _edge("add", "output", [0, 0])]
    return {"name": key, "type": "module", "nodes": nodes, "edges": edges,
            "meta": _graph_meta("benchmarks.Small")}


_MAKERS = {"linear": _leaf_linear, "relu": _leaf_relu, "module": _small_module}


def many_implementations(count: int, kinds: tuple[str, ...] = ("linear", "relu", "module")) -> dict[str, Any]:
    """The document of a root calling ``count`` tiny implementations in a chain (see the module docstring), of
    ``kinds`` in turn."""
    impls: dict[str, Any] = {}
    calls = []
    makers = [(kind, _MAKERS[kind]) for kind in kinds]
    for i in range(count):
        key = f"m{i}"
        itype, make = makers[i % len(makers)]
        impls[key] = make(key)
        calls.append((key, itype, key))
    root = {"name": "root", "type": "module", **_chain(calls), "meta": _graph_meta("benchmarks.Large")}
    return _document({"root": root, **impls})


def many_variants(variants: int, nodes: int) -> dict[str, Any]:
    """The document of one implementation with ``variants`` per-call graphs besides its main graph, each a
    chain of ``nodes`` relu nodes, called once per graph by the root."""

    def body() -> dict[str, Any]:
        return _chain([(f"relu_{j}", "function", "aten.relu.default") for j in range(nodes)])

    block = {"name": "block", "type": "module", **body(), "variants": [body() for _ in range(variants)],
             "meta": _graph_meta("benchmarks.Block")}
    calls = [(f"block_{v}", "module", "block") for v in range(variants + 1)]
    root = {"name": "root", "type": "module", **_chain(calls, list(range(variants + 1))),
            "meta": _graph_meta("benchmarks.Large")}
    return _document({"root": root, "block": block})


def _document(impls: dict[str, Any]) -> dict[str, Any]:
    return {"format": "torch2ir.ir", "format_version": 1, "implementations": impls}


def shared_document(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as ``IR.save`` writes it: alike implementations stored once (format 2, :mod:`common.bodies`)."""
    from common.bodies import share

    impls, bodies = share(doc["implementations"])
    return {**doc, "format_version": 2, "implementations": impls, "bodies": bodies} if bodies else doc


def _maxrss_mb() -> float:
    # VmHWM, not ru_maxrss: a child's ru_maxrss includes the parent's peak, recorded at exec
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmHWM:"))) / 1024


# -- the child: one load + rebuild, phase by phase -------------------------------------------------
def child(path: str, mode: str) -> dict[str, float]:
    """Time the phases of loading and rebuilding ``path`` (``mode``: ``phases`` or ``load``) in this process."""
    import ir2torch
    from common.collector import collector_paused
    from common.ir import IR
    from common.json_files import check_header, loads_json, read_text
    from common.safety import DEFAULT_ALLOWLIST
    from common.values import decode

    out: dict[str, float] = {"rss_start_mb": _maxrss_mb()}
    if mode == "path":  # load and rebuild in one call: the file is read, checked and validated once
        t0 = time.perf_counter()
        model = ir2torch.convert(path, device="meta")
        out["path_s"] = time.perf_counter() - t0
        out["rss_path_mb"] = _maxrss_mb()
        t0 = time.perf_counter()
        gc.collect()  # a full collection now walks every object of the model: what each later one costs
        out["collect_s"] = time.perf_counter() - t0
        del model
        return out
    if mode == "load":  # the public call, as a user makes it
        t0 = time.perf_counter()
        ir = IR.load(path)
        out["load_s"] = time.perf_counter() - t0
        out["rss_load_mb"] = _maxrss_mb()
    else:
        with collector_paused():
            t0 = time.perf_counter()
            doc = loads_json(read_text(path), source=path)
            check_header(doc, "torch2ir.ir", 2, path)
            t1 = time.perf_counter()
            out["parse_s"], out["rss_parse_mb"] = t1 - t0, _maxrss_mb()
            ir = IR.from_dict(doc["implementations"], value_fn=decode, bodies=doc.get("bodies"))
            t2 = time.perf_counter()
            out["construct_s"], out["rss_construct_mb"] = t2 - t1, _maxrss_mb()
            del doc
            ir.validate(allowlist=DEFAULT_ALLOWLIST)
            t3 = time.perf_counter()
            out["validate_s"], out["rss_validate_mb"] = t3 - t2, _maxrss_mb()
    t0 = time.perf_counter()
    model = ir2torch.convert(ir, device="meta")
    out["rebuild_s"] = time.perf_counter() - t0
    out["rss_rebuild_mb"] = _maxrss_mb()
    del model
    return out


def _run_child(path: str, mode: str) -> dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", path, "--mode", mode]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"child failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _write(doc: dict[str, Any], folder: str, name: str) -> tuple[str, float, int]:
    from common.json_files import dumps

    path = os.path.join(folder, name)
    text = dumps(doc)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    bodies = doc.get("bodies", {})
    total = sum(len(impl.get("nodes", {})) + sum(len(v["nodes"]) for v in impl.get("variants", []))
                for impl in (bodies.get(e["$body"], e) if "$body" in e else e for e in doc["implementations"].values()))
    return path, len(text.encode()) / 1e6, total


def _table(rows: list[tuple[str, str, float, int, dict[str, float], dict[str, float], dict[str, float]]]) -> str:
    head = ("| document | size (MB) | nodes | parse (s) | construct (s) | validate (s) | rebuild on meta (s) "
            "| IR.load (s) | IR.load + rebuild (s) | peak RSS after parse / construct / validate / rebuild (MB) "
            "| peak RSS IR.load + rebuild (MB) | `ir2torch.convert(path)` (s) | its peak RSS (MB) "
            "| then `gc.collect()` (s) |")
    lines = [head, "|" + "---|" * 14]
    for label, _, size, nodes, ph, ld, pa in rows:
        rss = " / ".join(f"{ph[k]:.0f}" for k in ("rss_parse_mb", "rss_construct_mb", "rss_validate_mb",
                                                    "rss_rebuild_mb"))
        lines.append(f"| {label} | {size:.1f} | {nodes} | {ph['parse_s']:.2f} | {ph['construct_s']:.2f} "
                     f"| {ph['validate_s']:.2f} | {ph['rebuild_s']:.2f} | {ld['load_s']:.2f} "
                     f"| {ld['load_s'] + ld['rebuild_s']:.2f} | {rss} | {ld['rss_rebuild_mb']:.0f} "
                     f"| {pa['path_s']:.2f} | {pa['rss_path_mb']:.0f} | {pa['collect_s']:.2f} |")
    return "\n".join(lines)


def _median(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(s[k] for s in samples) for k in samples[0]}


def _profile(path: str, top: int) -> None:
    import cProfile
    import pstats

    import ir2torch
    from common.ir import IR

    profile = cProfile.Profile()
    profile.enable()
    ir = IR.load(path)
    ir2torch.convert(ir, device="meta")
    profile.disable()
    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(top)
    stats.sort_stats("tottime").print_stats(top)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=("many", "variants", "both"), default="both")
    parser.add_argument("--shared", action="store_true",
                        help="also time each document as IR.save writes it, alike implementations stored once")
    parser.add_argument("--impls", type=int, default=10**5, help="implementations of the 'many' document")
    parser.add_argument("--kinds", default="linear,relu,module",
                        help="kinds of implementation of the 'many' document, in turn (of linear, relu, module)")
    parser.add_argument("--variants", type=int, default=64, help="variants of the 'variants' document")
    parser.add_argument("--nodes", type=int, default=15_000, help="nodes per graph of the 'variants' document")
    parser.add_argument("--runs", type=int, default=3, help="children per document and mode (medians reported)")
    parser.add_argument("--profile", choices=("many", "variants"), help="cProfile one load + rebuild instead")
    parser.add_argument("--top", type=int, default=40, help="functions listed by --profile")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="phases", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.mode)))
        return
    cases = ["many", "variants"] if args.case == "both" else [args.case]
    if args.profile:
        cases = [args.profile]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for case in cases:
            if case == "many":
                kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
                unknown = sorted(set(kinds) - set(_MAKERS))
                if unknown or not kinds:
                    parser.error(f"--kinds: unknown kinds {unknown}; choose among {sorted(_MAKERS)}")
                what = "" if kinds == ("linear", "relu", "module") else f" ({', '.join(kinds)})"
                label, doc = f"{args.impls} implementations{what}", many_implementations(args.impls, kinds)
            else:
                label = f"{args.variants} variants x {args.nodes} nodes"
                doc = many_variants(args.variants, args.nodes)
            forms = [(label, doc)]
            if args.shared:
                forms.append((f"{label}, shared bodies", shared_document(doc)))
            del doc
            for form_label, form in forms:
                path, size, nodes = _write(form, folder, f"{case}.ir.json")
                if args.profile:
                    _profile(path, args.top)
                    return
                phases = [_run_child(path, "phases") for _ in range(args.runs)]
                loads = [_run_child(path, "load") for _ in range(args.runs)]
                paths = [_run_child(path, "path") for _ in range(args.runs)]
                rows.append((form_label, case, size, nodes, _median(phases), _median(loads), _median(paths)))
                print(f"{form_label}: done ({args.runs} runs)", file=sys.stderr, flush=True)
    print(_table(rows))


if __name__ == "__main__":
    main()
