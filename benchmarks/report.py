"""Markdown tables from the tasks' results, and the targets of issue #8 applied to them.

Each ``section_*`` function takes the results of one scenario and returns its Markdown lines and the
:class:`Check`s of its targets; :func:`render` puts the summary of every check first.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: Targets of issue #8 (ratios are candidate / reference, measured in the same run).
CONVERT_VS_EXPORT = 1.15
#: Issue #18: convert + lower (one export) against one export; convert alone, the tighter aim; 70B-dims load times.
CONVERT_LOWER_VS_EXPORT = 1.15
CONVERT_VS_EXPORT_TIGHT = 1.05
FLAT_LOAD_S = 0.5
REBUILD_META_70B_S = 0.5
CONVERT_RSS_MB = 1024.0
IR_LOAD_S = 0.5
REBUILD_META_S = 1.0
REBUILD_LOAD_VS_ORIGINAL = 0.1
FORWARD_VS_EAGER = 1.05
#: Our reading of "grows linearly": the exponent k of t ~ layers**k between the two largest sweep points
#: (8 and 32 layers in the full run) is at most this (1.0 is linear; run-to-run noise is about +-0.1).
LINEAR_EXPONENT = 1.15
#: Issue #32 (alike blocks traced once, stored once): convert / export on Llama-3-70B dimensions (80 layers) and on
#: a 32-layer Llama, convert + lower / export at 80 layers, the 70B file and its load, the sweep's per-layer slope
#: against export's, and every model's convert / export.
ONCE_70B = 0.25
ONCE_32 = 0.35
ONCE_LOWER_70B = 0.5
FILE_70B_MB = 0.6
IR_LOAD_70B_S = 0.1
SLOPE_VS_EXPORT = 0.10
CONVERT_VS_EXPORT_EVERY = 1.05


@dataclass(frozen=True)
class Check:
    """One target applied to one measurement."""

    what: str
    measured: str
    target: str
    met: bool | None  # None: not measured (the measurement failed)


def _fmt(value: float | None, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _ok(met: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "n/a"}[met]


def _table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


def _errors(results: list[dict[str, Any]]) -> list[str]:
    return [f"- child failed: `{r['error']}`" for r in results if "error" in r]


def _diff(value: Any) -> str:
    return "n/a" if value is None else f"{value:.1e}" if value else "0"


# -- sections --------------------------------------------------------------------------------------------------
def section_convert(results: list[dict[str, Any]]) -> tuple[list[str], list[Check]]:
    rows, checks = [], []
    for r in (r for r in results if "error" not in r):
        met = r["convert_vs_export"] <= CONVERT_VS_EXPORT
        checks.append(Check(f"convert / export, {r['model']}", _x(r["convert_vs_export"]),
                            f"<= {CONVERT_VS_EXPORT}x", met))
        checks.append(Check(f"convert / export, {r['model']} (issue 32)", _x(r["convert_vs_export"]),
                            f"<= {CONVERT_VS_EXPORT_EVERY}x", r["convert_vs_export"] <= CONVERT_VS_EXPORT_EVERY))
        exports = r.get("exports", "?")
        lowered = r.get("convert_lower_vs_export")
        if lowered is not None:
            checks.append(Check(f"(convert + lower) / export, {r['model']}", _x(lowered),
                                f"<= {CONVERT_LOWER_VS_EXPORT}x", lowered <= CONVERT_LOWER_VS_EXPORT))
        rows.append([r["model"], _fmt(r["export_s"]), _fmt(r["export_s"] + r["unflatten_s"]), _fmt(r["convert_s"]),
                     f"{_x(r['convert_vs_export'])} {'' if met else '(miss)'}".strip(),
                     _fmt(r.get("convert_lower_s")), _x(lowered),
                     _x(r["export_unflatten_vs_export"]), _x(r["convert_vs_export_unflatten"]), exports,
                     f"{r['ir_nodes']} / {r['fx_nodes']}", f"{r['peak_rss_mb']:.0f}"])
    lines = _table(["model", "export (s)", "export + unflatten (s)", "convert (s)", "convert / export",
                    "convert + lower (s)", "(convert + lower) / export",
                    "(export + unflatten) / export", "convert / (export + unflatten)", "exports in convert",
                    "IR nodes / fx nodes", "child peak RSS (MB)"], rows)
    return lines + _errors(results), checks


def section_scale(results: list[dict[str, Any]], rss: list[dict[str, Any]]) -> tuple[list[str], list[Check]]:
    main = next((r for r in results if "error" not in r), None)
    rss_by_op = {r["op"]: r for r in rss if "error" not in r}
    checks: list[Check] = []
    rows: list[list[Any]] = []
    label = (main or next(iter(rss), {})).get("label") or {"70b": "Llama-3-70B dims"}.get(
        next((r.get("dims") for r in rss), "7b"), "Llama-2-7B dims")
    seventy = label.startswith("Llama-3-70B")
    rebuild_limit = REBUILD_META_70B_S if seventy else REBUILD_META_S
    if main is not None:
        layers = main["layers"]
        met = main["convert_vs_export"] <= CONVERT_VS_EXPORT
        lower_met = main["lower_vs_export"] <= CONVERT_LOWER_VS_EXPORT
        checks += [Check(f"convert / export, {label} ({layers} layers, meta)",
                         _x(main["convert_vs_export"]), f"<= {CONVERT_VS_EXPORT}x", met),
                   Check(f"(convert + lower) / export, {label} ({layers} layers, meta)",
                         _x(main["lower_vs_export"]), f"<= {CONVERT_LOWER_VS_EXPORT}x", lower_met)]
        rows += [
            ["convert", f"{main['convert_s']:.2f} s", "torch.export.export", f"{main['export_s']:.2f} s",
             _x(main["convert_vs_export"]), f"<= {CONVERT_VS_EXPORT}x (aim {CONVERT_VS_EXPORT_TIGHT}x)", _ok(met)],
            ["convert + ir.lower()", f"{main['lower_s']:.2f} s", "torch.export.export", f"{main['export_s']:.2f} s",
             _x(main["lower_vs_export"]), f"<= {CONVERT_LOWER_VS_EXPORT}x", _ok(lower_met)],
        ]
        once = ONCE_70B if seventy and layers >= 80 else ONCE_32 if layers >= 32 else None
        if once is not None:
            checks.append(Check(f"convert / export, {label} ({layers} layers, meta; issue 32)",
                                _x(main["convert_vs_export"]), f"<= {once}x", main["convert_vs_export"] <= once))
        if seventy and layers >= 80:
            size_mb = main["ir_json_bytes"] / 2**20
            checks += [Check(f"(convert + lower) / export, {label} ({layers} layers, meta; issue 32)",
                             _x(main["lower_vs_export"]), f"<= {ONCE_LOWER_70B}x",
                             main["lower_vs_export"] <= ONCE_LOWER_70B),
                       Check(f"IR file, {label} ({layers} layers; issue 32)", f"{size_mb:.2f} MB",
                             f"<= {FILE_70B_MB} MB", size_mb <= FILE_70B_MB),
                       Check(f"IR.load, {label} ({layers} layers; issue 32)", f"{main['ir_load_s']:.3f} s",
                             f"<= {IR_LOAD_70B_S} s", main["ir_load_s"] <= IR_LOAD_70B_S)]
        if "ir_lower_s" in main:
            rows.append(["ir.lower() alone (from the capture)", f"{main['ir_lower_s']:.3f} s", "-", "-", "-", "-",
                         "-"])
    export_rss = rss_by_op.get("export")
    for op in ("convert", "lower"):
        r = rss_by_op.get(op)
        if r is None:
            continue
        met = r["op_rss_mb"] <= CONVERT_RSS_MB if op == "convert" else None
        if op == "convert":
            checks.append(Check(f"peak RSS of convert, {label} ({r['layers']} layers, meta)",
                                f"{r['op_rss_mb']:.0f} MB", f"<= {CONVERT_RSS_MB:.0f} MB", met))
        ref = f"{export_rss['op_rss_mb']:.0f} MB" if export_rss else "n/a"
        ratio = _x(r["op_rss_mb"] / export_rss["op_rss_mb"]) if export_rss else "n/a"
        rows.append([f"peak RSS of {op} (child; {r['baseline_rss_mb']:.0f} MB after imports + meta model)",
                     f"{r['op_rss_mb']:.0f} MB", "peak RSS of export", ref, ratio,
                     f"<= {CONVERT_RSS_MB:.0f} MB" if op == "convert" else "-", _ok(met) if op == "convert" else "-"])
    if main is not None:
        load_met = main["ir_load_s"] <= IR_LOAD_S
        meta_met = main["rebuild_meta_s"] <= rebuild_limit
        checks += [
            Check(f"IR.load, {label} ({main['layers']} layers)", f"{main['ir_load_s']:.3f} s",
                  f"<= {IR_LOAD_S} s", load_met),
            Check(f"ir2torch.convert(device='meta'), {label} ({main['layers']} layers)",
                  f"{main['rebuild_meta_s']:.3f} s", f"<= {rebuild_limit} s", meta_met),
        ]
        if "flat_load_s" in main:
            flat_met = main["flat_load_s"] <= FLAT_LOAD_S
            checks.append(Check(f"FlatIR.load, {label} ({main['layers']} layers)", f"{main['flat_load_s']:.3f} s",
                                f"<= {FLAT_LOAD_S} s", flat_met))
            rows += [["FlatIR JSON size", f"{main['flat_json_bytes'] / 2**20:.2f} MB", "-", "-", "-", "-", "-"],
                     ["FlatIR.save", f"{main['flat_save_s']:.3f} s", "-", "-", "-", "-", "-"],
                     ["FlatIR.load", f"{main['flat_load_s']:.3f} s", "json.loads of the same file",
                      f"{main['flat_json_parse_s']:.3f} s", "-", f"<= {FLAT_LOAD_S} s", _ok(flat_met)]]
        rows += [
            ["IR JSON size", f"{main['ir_json_bytes'] / 2**20:.2f} MB", "-", "-", "-", "-", "-"],
            ["IR.save", f"{main['save_s']:.3f} s", "-", "-", "-", "-", "-"],
            ["IR.load", f"{main['ir_load_s']:.3f} s", "json.loads of the same file", f"{main['json_parse_s']:.3f} s",
             _x(main["ir_load_vs_json_parse"]), f"<= {IR_LOAD_S} s", _ok(load_met)],
            ["ir2torch.convert(ir, device='meta')", f"{main['rebuild_meta_s']:.3f} s",
             "LlamaForCausalLM(config) on meta", f"{main['construct_meta_s']:.3f} s",
             _x(main["rebuild_meta_vs_construct_meta"]), f"<= {rebuild_limit} s", _ok(meta_met)],
        ]
    head = []
    if main is not None:
        head = [f"Llama with {label.removesuffix(' dims')} dimensions, {main['layers']} layers "
                f"({main['parameters'] / 1e9:.2f} B parameters), model and input ids (1, 16) on `meta`; convert ran "
                f"{main.get('exports', '?')} "
                f"export(s); train-mode pass: {main.get('train_trace') or 'not needed'}.", ""]
    lines = head + _table(["measure", "value", "reference", "reference value", "ratio", "target", "met"], rows)
    return lines + _errors(results + rss), checks


def section_rebuild_load(results: list[dict[str, Any]]) -> tuple[list[str], list[Check]]:
    checks: list[Check] = []
    lines: list[str] = []
    for r in (r for r in results if "error" not in r):
        met = r["rebuilt_vs_reference"] <= REBUILD_LOAD_VS_ORIGINAL
        checks.append(Check(f"rebuild on meta + load .safetensors vs original, GPT-2 ({r['parameters'] / 1e6:.0f} M)",
                            _x(r["rebuilt_vs_reference"]), f"<= {REBUILD_LOAD_VS_ORIGINAL}x", met))
        lines += [f"GPT-2-small dimensions, {r['layers']} layers ({r['parameters'] / 1e6:.1f} M parameters, "
                  f"{r['file_mb']:.0f} MB .safetensors), random weights; max abs diff of the rebuilt model's "
                  f"logits vs the original: {_diff(r['max_abs_diff'])}. The IR is converted from the CPU model; "
                  f"an IR converted from the model on meta, rebuilt the same way, {r['meta_ir_forward']} "
                  "when run on CPU inputs.", ""]
        ref = f"{r['reference_s']:.3f} s"
        lines += _table(["measure", "value", "reference", "reference value", "ratio", "target", "met"], [
            ["ir2torch.convert(ir, file, device='meta')", f"{r['rebuilt_s']:.3f} s",
             "GPT2LMHeadModel(config) + load_state_dict(file)", ref, _x(r["rebuilt_vs_reference"]),
             f"<= {REBUILD_LOAD_VS_ORIGINAL}x", _ok(met)],
            ["same, IR read from its JSON file", f"{r['rebuilt_from_file_s']:.3f} s", "same", ref,
             _x(r["rebuilt_from_file_vs_reference"]), "-", "-"],
        ])
    return lines + _errors(results), checks


def section_forward(results: list[dict[str, Any]]) -> tuple[list[str], list[Check]]:
    rows, checks = [], []
    for result in (r for r in results if "error" not in r):
        for r in result["rows"]:
            met = r["rebuilt_vs_eager"] <= FORWARD_VS_EAGER
            checks.append(Check(f"forward rebuilt / eager, {r['model']} batch {r['batch']}",
                                _x(r["rebuilt_vs_eager"]), f"<= {FORWARD_VS_EAGER}x", met))
            diffs = r["max_abs_diff"]
            rows.append([r["model"], r["batch"], _fmt(r["eager_ms"]), _fmt(r["rebuilt_ms"]), _fmt(r["unflatten_ms"]),
                         _fmt(r["ep_module_ms"]), f"{_x(r['rebuilt_vs_eager'])} {'' if met else '(miss)'}".strip(),
                         _x(r["unflatten_vs_eager"]), _x(r["ep_module_vs_eager"]),
                         " / ".join(_diff(diffs.get(k)) for k in ("rebuilt", "unflatten", "ep_module"))])
    lines = _table(["model", "batch", "eager (ms)", "rebuilt (ms)", "unflatten (ms)", "ep.module() (ms)",
                    "rebuilt / eager", "unflatten / eager", "ep.module() / eager",
                    "max abs diff (rebuilt / unflatten / ep.module())"], rows)
    return lines + _errors(results), checks


def section_onnx(results: list[dict[str, Any]]) -> tuple[list[str], list[Check]]:
    rows = []
    for r in (r for r in results if "error" not in r):
        onnx_s = _fmt(r.get("onnx_s"))
        status = r.get("onnx_path") or "failed"
        if r.get("onnx_path"):
            status += f" (first output max abs diff {_diff(r.get('onnx_max_abs_diff'))})"
        if r["onnx_errors"]:
            status += "; " + "; ".join(f"`{e}`" for e in r["onnx_errors"]) if r.get("onnx_path") else \
                ": " + "; ".join(f"`{e}`" for e in r["onnx_errors"])
        rows.append([r["model"], _fmt(r["ours_s"]), _diff(r.get("ours_max_abs_diff")), onnx_s,
                     _x(r.get("ours_vs_onnx")), status.replace("|", "\\|")])
    lines = _table(["model", "ours: convert + save + load + rebuild (s)", "ours: max abs diff",
                    "ONNX: torch.onnx.export + onnx2torch.convert (s)", "ours / ONNX", "ONNX path"], rows)
    return lines + _errors(results), []


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(x, y)`` points."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else float("nan")


def _per_layer(pts: list[dict[str, Any]], value: Callable[[dict[str, Any]], float]) -> str:
    """``"a->b: ms/layer"`` of ``value`` for each pair of successive sweep points."""
    return ", ".join(f"{p['layers']}->{q['layers']}: {(value(q) - value(p)) / (q['layers'] - p['layers']) * 1e3:.1f}"
                     for p, q in itertools.pairwise(pts))


def section_sweep(results: list[dict[str, Any]]) -> tuple[list[str], list[Check]]:
    main = next((r for r in results if "error" not in r), None)
    if main is None:
        return _errors(results), []
    pts = main["points"]
    rows = [[p["layers"], _fmt(p["export_s"]), _fmt(p["convert_s"]), _x(p["convert_vs_export"]),
             f"{p['convert_s'] / p['layers'] * 1e3:.1f}"] for p in pts]
    lines = _table(["layers", "export (s)", "convert (s)", "convert / export", "convert ms / layer"], rows)
    checks: list[Check] = []
    if len(pts) >= 2:
        conv = _slope([(p["layers"], p["convert_s"]) for p in pts])
        expo = _slope([(p["layers"], p["export_s"]) for p in pts])
        a, b = pts[-2], pts[-1]
        growth = math.log(b["layers"] / a["layers"])
        k_conv = math.log(b["convert_s"] / a["convert_s"]) / growth
        k_expo = math.log(b["export_s"] / a["export_s"]) / growth
        segments = _per_layer(pts, lambda p: p["convert_s"])
        extra = _per_layer(pts, lambda p: p["convert_s"] - p["export_s"])
        first, last = pts[0], pts[-1]
        lines += ["", f"- convert slope (least squares): **{conv * 1e3:.1f} ms/layer** (export: {expo * 1e3:.1f} "
                      f"ms/layer; convert - export: {(conv - expo) * 1e3:.1f} ms/layer)",
                  f"- growth exponent k of t ~ layers^k from {a['layers']} to {b['layers']} layers: convert "
                  f"**{k_conv:.2f}**, export {k_expo:.2f} (1.00 is linear)",
                  f"- per-layer slope by segment (ms/layer): convert {segments}; convert - export {extra}",
                  f"- convert time per layer at {first['layers']} vs {last['layers']} layers: "
                  f"{first['convert_s'] / first['layers'] * 1e3:.1f} vs {last['convert_s'] / last['layers'] * 1e3:.1f}"
                  " ms (fixed costs amortised)"]
        checks.append(Check("convert's per-layer slope / export's (issue 32)", f"{conv / expo:.1%}",
                            f"<= {SLOPE_VS_EXPORT:.0%}", conv / expo <= SLOPE_VS_EXPORT))
        checks.append(Check(f"convert grows linearly with layers ({a['layers']} -> {b['layers']})",
                            f"k = {k_conv:.2f} (export {k_expo:.2f})", f"<= {LINEAR_EXPONENT}",
                            k_conv <= LINEAR_EXPONENT))
    return lines + _errors(results), checks


def section_corpus(rows: list[dict[str, Any]], machine: list[str]) -> tuple[list[str], list[Check]]:
    """The whole-corpus forward distribution of the latest ``python -m benchmarks.corpus`` run (its own machine
    lines: it is a separate run), with issue #19's two targets."""
    from benchmarks.corpus import summary

    s = summary(rows)
    if s["median"] is None:
        return ["No row of the corpus run ran."], []
    worst = ", ".join(f"{m} b{b} {r:.3f}x" for m, b, r in s["worst"])
    lines = [f"From `benchmarks/results-corpus.md` ({s['ran']} of {s['rows']} rows ran; every row there):", "",
             *[f"- {line.lstrip('- ')}" for line in machine], "",
             *_table(["rebuilt / eager", "median", "p90", "max", "worst five"],
                     [["all rows", _x(s["median"]), _x(s["p90"]), _x(s["max"]), worst]])]
    c = summary(rows, "copy_ratio")
    if c["median"] is not None:  # the control: a deep copy of the eager model, timed in the same rounds
        noise = ", ".join(f"{m} b{b} {r:.3f}x" for m, b, r in c["worst"])
        lines.append(f"| control: copy / eager (identical code) | {_x(c['median'])} | {_x(c['p90'])} | "
                     f"{_x(c['max'])} | {noise} |")
    checks = [Check("forward rebuilt / eager over the real corpus, median", _x(s["median"]), "<= 1.0x",
                    s["median"] <= 1.0),
              Check("forward rebuilt / eager over the real corpus, max", _x(s["max"]), f"<= {FORWARD_VS_EAGER}x",
                    s["max"] <= FORWARD_VS_EAGER)]
    return lines, checks


def render(title: str, machine: list[str], sections: list[tuple[str, list[str], list[Check]]],
           footer: list[str]) -> str:
    """The whole Markdown document: title, machine, target summary, then every section."""
    checks = [c for _, _, cs in sections for c in cs]
    missed = [c for c in checks if c.met is False]
    out = [f"# {title}", "", *machine, "", "## Targets", ""]
    out += _table(["target", "measured", "limit", "met"], [[c.what, c.measured, c.target, _ok(c.met)] for c in checks])
    out += ["", f"{len(checks) - len(missed)} of {len(checks)} targets met" + (
        f"; missed: {', '.join(c.what for c in missed)}." if missed else "."), ""]
    for name, lines, _ in sections:
        out += [f"## {name}", "", *lines, ""]
    return "\n".join(out + footer).rstrip() + "\n"
