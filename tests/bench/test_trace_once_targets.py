"""The targets of issue 32 in the benchmark report: applied to the 70B-dims scale run, the 32-layer one, the
layer sweep and every model's convert / export, each met or missed by its measurement."""

from __future__ import annotations

from benchmarks.report import section_convert, section_scale, section_sweep


def _scale(layers: int, label: str, convert: float, lower: float, size_mb: float, load_s: float) -> dict:
    return {"layers": layers, "label": label, "convert_vs_export": convert, "lower_vs_export": lower,
            "convert_s": 1.0, "export_s": 1.0 / convert, "lower_s": 1.0, "ir_json_bytes": size_mb * 2**20,
            "save_s": 0.1, "ir_load_s": load_s, "json_parse_s": 0.01, "ir_load_vs_json_parse": 1.0,
            "rebuild_meta_s": 0.1, "construct_meta_s": 0.1, "rebuild_meta_vs_construct_meta": 1.0,
            "parameters": 7e10}


def _checks(checks: list) -> dict[str, bool | None]:
    return {c.what: c.met for c in checks if "issue 32" in c.what}


def test_the_70b_targets() -> None:
    _, checks = section_scale([_scale(80, "Llama-3-70B dims", 0.2, 0.6, 0.5, 0.2)], [])
    assert _checks(checks) == {
        "convert / export, Llama-3-70B dims (80 layers, meta; issue 32)": True,
        "(convert + lower) / export, Llama-3-70B dims (80 layers, meta; issue 32)": False,
        "IR file, Llama-3-70B dims (80 layers; issue 32)": True,
        "IR.load, Llama-3-70B dims (80 layers; issue 32)": False,
    }


def test_the_32_layer_target_and_none_for_a_quick_run() -> None:
    _, checks = section_scale([_scale(32, "Llama-2-7B dims", 0.4, 0.5, 1.0, 0.1)], [])
    assert _checks(checks) == {"convert / export, Llama-2-7B dims (32 layers, meta; issue 32)": False}
    _, quick = section_scale([_scale(1, "Llama-3-70B dims", 2.0, 2.0, 9.0, 9.0)], [])
    assert _checks(quick) == {}


def test_the_slope_target() -> None:
    points = [{"layers": n, "export_s": 0.1 * n, "convert_s": 0.2 + slope * n, "convert_vs_export": 1.0}
              for n, slope in ((2, 0.005), (8, 0.005), (32, 0.005))]
    _, checks = section_sweep([{"points": points}])
    assert _checks(checks) == {"convert's per-layer slope / export's (issue 32)": True}
    steep = [dict(p, convert_s=0.02 * p["layers"]) for p in points]
    assert _checks(section_sweep([{"points": steep}])[1]) == {"convert's per-layer slope / export's (issue 32)": False}


def test_every_models_convert_target() -> None:
    row = {"model": "bert", "convert_vs_export": 1.08, "export_s": 1.0, "unflatten_s": 0.1, "convert_s": 1.08,
           "export_unflatten_vs_export": 1.1, "convert_vs_export_unflatten": 1.0, "ir_nodes": 1, "fx_nodes": 1,
           "peak_rss_mb": 1.0}
    assert _checks(section_convert([row])[1]) == {"convert / export, bert (issue 32)": False}
