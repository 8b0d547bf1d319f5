"""The measurements, one function per task; each runs inside a fresh child process.

Every task returns plain JSON data (seconds, ratios, sizes) and never judges it: targets are applied
by :mod:`benchmarks.report`. Each candidate is timed interleaved with its reference in the same process
(see :mod:`benchmarks.measure`). :data:`TASKS` maps task names to functions.
"""

from __future__ import annotations

import json
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils import _pytree as pytree

from . import models
from .measure import calibrate, interleaved, paired_ratio, peak_rss_mb, time_once

warnings.filterwarnings("ignore")


def _tensor_leaves(value: Any) -> list[torch.Tensor]:
    """The tensors of a (possibly nested, ``ModelOutput``) output, in pytree order."""
    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def max_abs_diff(a: Any, b: Any) -> float | None:
    """Largest absolute difference between the tensor leaves of two outputs (``None`` if they do not line up)."""
    xs, ys = _tensor_leaves(a), _tensor_leaves(b)
    if len(xs) != len(ys) or not xs or any(x.shape != y.shape for x, y in zip(xs, ys)):
        return None
    return max(float((x.detach().float() - y.detach().float()).abs().max()) for x, y in zip(xs, ys))


def _error(exc: BaseException) -> str:
    """``Type: first line of the message`` (shortened), for the tables."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:160]}" if text else type(exc).__name__


def exports_in(fn: Callable[[], Any]) -> int:
    """How many times ``fn()`` calls ``torch.export.export`` (one extra, untimed call)."""
    real = torch.export.export
    calls: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    torch.export.export = counting
    try:
        fn()
    finally:
        torch.export.export = real
    return len(calls)


# -- convert ---------------------------------------------------------------------------------------------------
def task_convert(model: str, rounds: int, warmup: int) -> dict[str, Any]:
    """``torch2ir.convert`` vs ``torch.export.export`` vs export + ``torch.export.unflatten`` (small config)."""
    import torch2ir

    spec = models.SMALL[model]
    m = spec.build(None)
    args, kwargs = spec.inputs(2, None)
    state: dict[str, Any] = {}

    def export() -> None:
        state["ep"] = torch.export.export(m, args, kwargs, strict=False)

    def unflatten() -> None:
        torch.export.unflatten(state["ep"])

    def convert() -> None:
        state["ir"] = torch2ir.convert(m, args, kwargs, allow=spec.allow)

    def convert_lower() -> None:
        state["flat"] = torch2ir.convert(m, args, kwargs, allow=spec.allow).lower()

    series = interleaved({"export": export, "unflatten": unflatten, "convert": convert,
                          "convert_lower": convert_lower}, rounds=rounds, warmup=warmup)
    ir = state["ir"]
    return {
        "convert_lower_s": series["convert_lower"].median,
        "convert_lower_vs_export": paired_ratio(series, "convert_lower", "export"),
        "flat_nodes": len(state["flat"].nodes),
        "model": model,
        "export_s": series["export"].median,
        "unflatten_s": series["unflatten"].median,
        "convert_s": series["convert"].median,
        "convert_vs_export": paired_ratio(series, "convert", "export"),
        "convert_vs_export_unflatten": paired_ratio(series, "convert", ["export", "unflatten"]),
        "export_unflatten_vs_export": 1 + paired_ratio(series, "unflatten", "export"),
        "train_trace": ir.root.meta.get("train_trace"),
        "exports": exports_in(convert),
        "fx_nodes": len(state["ep"].graph.nodes),
        "ir_nodes": sum(impl.graph.number_of_nodes() for impl in ir.values()),
        "implementations": len(ir),
    }


# -- forward ---------------------------------------------------------------------------------------------------
def task_forward(model: str, batches: list[int], rounds: int) -> dict[str, Any]:
    """Forward time of the rebuilt model vs eager vs ``unflatten``'s module vs ``ExportedProgram.module()``."""
    import ir2torch
    import torch2ir

    torch.set_num_threads(1)
    spec = models.SMALL[model]
    rows = []
    for batch in batches:
        m = spec.build(None)
        args, kwargs = spec.inputs(batch, None)
        ep = torch.export.export(m, args, kwargs, strict=False)
        rebuilt = ir2torch.convert(torch2ir.convert(m, args, kwargs, allow=spec.allow), m.state_dict(),
                                   allow=spec.allow).eval()
        modules: dict[str, Callable[..., Any]] = {
            "eager": m, "rebuilt": rebuilt, "unflatten": torch.export.unflatten(ep), "ep_module": ep.module(),
        }
        with torch.no_grad():
            reference = m(*args, **kwargs)
            diffs = {name: max_abs_diff(reference, fn(*args, **kwargs)) for name, fn in modules.items()}
            calls = {name: (lambda fn=fn, a=args, k=kwargs: fn(*a, **k)) for name, fn in modules.items()}
            number = calibrate(calls["eager"])
            series = interleaved(calls, rounds=rounds, warmup=2, number=number)
        rows.append({
            "model": model, "batch": batch, "calls_per_sample": number,
            **{f"{name}_ms": s.median * 1e3 for name, s in series.items()},
            **{f"{name}_vs_eager": paired_ratio(series, name, "eager") for name in modules if name != "eager"},
            "max_abs_diff": {k: v for k, v in diffs.items() if k != "eager"},
        })
    return {"model": model, "rows": rows}


# -- rebuild + load --------------------------------------------------------------------------------------------
def task_rebuild_load(layers: int, rounds: int, warmup: int) -> dict[str, Any]:
    """GPT-2-small rebuilt on meta from its IR + a memory-mapped ``.safetensors`` (assigned) vs the original
    class constructed and ``load_state_dict`` of the same file."""
    from transformers import GPT2LMHeadModel

    import ir2torch
    import torch2ir
    from common.state_dict import load_safetensors, save_safetensors

    config = models.gpt2_small_config(layers)
    with tempfile.TemporaryDirectory(prefix="t2i-bench-") as tmp:
        original = models.gpt2_small(config)
        params = models.parameter_count(original)
        state_path = save_safetensors(original.state_dict(), Path(tmp) / "gpt2.safetensors")
        ids = torch.randint(0, config.vocab_size, (1, models.SCALE_SEQ), generator=torch.Generator().manual_seed(0))
        ir = torch2ir.convert(original, (ids,))
        ir_path = ir.save(Path(tmp) / "gpt2.ir.json")
        with torch.no_grad():
            expected = original(ids)
        del original
        meta_ir_forward = _meta_ir_forward(config, ids, state_path, expected)
        out: dict[str, Any] = {}

        def reference() -> None:
            model = GPT2LMHeadModel(config)
            model.load_state_dict(load_safetensors(state_path))
            out["reference"] = model

        def rebuilt() -> None:
            out["rebuilt"] = ir2torch.convert(ir, state_path, device="meta")

        def rebuilt_from_file() -> None:
            ir2torch.convert(ir_path, state_path, device="meta")

        series = interleaved({"reference": reference, "rebuilt": rebuilt, "rebuilt_from_file": rebuilt_from_file},
                             rounds=rounds, warmup=warmup)
        with torch.no_grad():
            diff = max_abs_diff(expected, out["rebuilt"].eval()(ids))
        return {
            "layers": layers, "parameters": params, "file_mb": state_path.stat().st_size / 2**20,
            "reference_s": series["reference"].median, "rebuilt_s": series["rebuilt"].median,
            "rebuilt_from_file_s": series["rebuilt_from_file"].median,
            "rebuilt_vs_reference": paired_ratio(series, "rebuilt", "reference"),
            "rebuilt_from_file_vs_reference": paired_ratio(series, "rebuilt_from_file", "reference"),
            "max_abs_diff": diff, "meta_ir_forward": meta_ir_forward,
        }


def _meta_ir_forward(config: Any, ids: torch.Tensor, state_path: Path, expected: Any) -> str:
    """Whether an IR converted from the model *on meta* rebuilds (on meta, file assigned) into a model that
    runs on CPU: ``"max abs diff ..."`` or the error it raises."""
    import ir2torch
    import torch2ir

    try:
        ir = torch2ir.convert(models.gpt2_small(config, "meta"), (ids.to("meta"),))
        with torch.no_grad():
            got = ir2torch.convert(ir, state_path, device="meta").eval()(ids)
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        return f"fails: {_error(exc)}"
    return f"runs, max abs diff {max_abs_diff(expected, got)}"


# -- weight-free scale -----------------------------------------------------------------------------------------
def _scale_model(layers: int, dims: str = "7b") -> tuple[nn.Module, tuple]:
    model = models.SCALE_MODELS[dims][0](layers)
    return model, (torch.zeros((1, models.SCALE_SEQ), dtype=torch.long, device="meta"),)


def task_scale(layers: int, rounds: int, warmup: int, dims: str = "7b") -> dict[str, Any]:
    """Llama-2-7B (or Llama-3-70B) dimensions on meta: convert and convert + ``ir.lower()`` vs export, IR file
    size, ``IR.load`` vs parsing its JSON, ``ir2torch.convert(device="meta")`` vs building the original class on
    meta, ``FlatIR.load``."""
    import ir2torch
    import torch2ir
    from common import IR, FlatIR

    model, args = _scale_model(layers, dims)
    state: dict[str, Any] = {}

    def export() -> None:
        torch.export.export(model, args, strict=False)

    def convert() -> None:
        state["ir"] = torch2ir.convert(model, args)

    def lower() -> None:  # convert + lower from the one export
        state["flat"] = torch2ir.convert(model, args).lower()

    trace = interleaved({"export": export, "convert": convert, "lower": lower}, rounds=rounds, warmup=warmup)
    lower_only = interleaved({"ir_lower": lambda: state["ir"].lower()}, rounds=rounds, warmup=0)
    with tempfile.TemporaryDirectory(prefix="t2i-bench-") as tmp:
        path = Path(tmp) / "llama.ir.json"
        save_s = time_once(lambda: state["ir"].save(path))
        size = path.stat().st_size
        loaded: dict[str, Any] = {}

        def ir_load() -> None:
            loaded["ir"] = IR.load(path)

        def json_parse() -> None:
            json.loads(path.read_bytes())

        load = interleaved({"ir_load": ir_load, "json_parse": json_parse}, rounds=3 * rounds, warmup=1)
        flat_path = Path(tmp) / "llama.flat.json"
        flat_save_s = time_once(lambda: state["flat"].save(flat_path))
        flat_size = flat_path.stat().st_size
        flat_load = interleaved({"flat_load": lambda: FlatIR.load(flat_path),
                                 "json_parse": lambda: json.loads(flat_path.read_bytes())}, rounds=3 * rounds, warmup=1)

    def rebuild_meta() -> None:
        ir2torch.convert(loaded["ir"], device="meta")

    def construct_meta() -> None:
        models.SCALE_MODELS[dims][0](layers)

    rebuild = interleaved({"rebuild_meta": rebuild_meta, "construct_meta": construct_meta},
                          rounds=3 * rounds, warmup=1)
    return {
        "dims": dims, "label": models.SCALE_MODELS[dims][1], "ir_lower_s": lower_only["ir_lower"].median,
        "flat_json_bytes": flat_size, "flat_save_s": flat_save_s, "flat_load_s": flat_load["flat_load"].median,
        "flat_json_parse_s": flat_load["json_parse"].median,
        "layers": layers, "parameters": models.parameter_count(model),
        "export_s": trace["export"].median, "convert_s": trace["convert"].median, "lower_s": trace["lower"].median,
        "convert_vs_export": paired_ratio(trace, "convert", "export"),
        "lower_vs_export": paired_ratio(trace, "lower", "export"),
        "train_trace": state["ir"].root.meta.get("train_trace"),
        "exports": exports_in(convert),
        "ir_json_bytes": size, "save_s": save_s,
        "ir_load_s": load["ir_load"].median, "json_parse_s": load["json_parse"].median,
        "ir_load_vs_json_parse": paired_ratio(load, "ir_load", "json_parse"),
        "rebuild_meta_s": rebuild["rebuild_meta"].median, "construct_meta_s": rebuild["construct_meta"].median,
        "rebuild_meta_vs_construct_meta": paired_ratio(rebuild, "rebuild_meta", "construct_meta"),
    }


def task_scale_rss(op: str, layers: int, dims: str = "7b") -> dict[str, Any]:
    """Peak RSS of one ``op`` (``export`` / ``convert`` / ``lower``: convert + lower) on the Llama-2-7B (or
    Llama-3-70B) dimension model on meta.

    The child's high-water mark is read after building the model (imports + meta model: the baseline)
    and after running ``op`` once; nothing else runs in this process.
    """
    import torch2ir

    model, args = _scale_model(layers, dims)
    before = peak_rss_mb()
    fn = {"export": lambda: torch.export.export(model, args, strict=False),
          "convert": lambda: torch2ir.convert(model, args),
          "lower": lambda: torch2ir.convert(model, args).lower()}[op]
    seconds = time_once(fn)
    return {"op": op, "layers": layers, "dims": dims, "baseline_rss_mb": before, "op_rss_mb": peak_rss_mb(),
            "seconds": seconds}


# -- layer sweep -----------------------------------------------------------------------------------------------
def task_sweep(layers: list[int], rounds: int, warmup: int) -> dict[str, Any]:
    """Convert vs export time of the small Llama (on meta) at several layer counts (warm-up rounds for the
    first count only: the rest reuse the warmed-up tracing machinery)."""
    import torch2ir

    points = []
    for i, count in enumerate(layers):
        model = models.llama_sweep(count)
        args = (torch.zeros((1, models.SEQ), dtype=torch.long, device="meta"),)
        series = interleaved({"export": lambda m=model, a=args: torch.export.export(m, a, strict=False),
                              "convert": lambda m=model, a=args: torch2ir.convert(m, a)},
                             rounds=rounds, warmup=warmup if i == 0 else 0)
        points.append({"layers": count, "export_s": series["export"].median, "convert_s": series["convert"].median,
                       "convert_vs_export": paired_ratio(series, "convert", "export")})
    return {"points": points}


# -- round trip vs ONNX ----------------------------------------------------------------------------------------
def _onnx_task(**params: Any) -> dict[str, Any]:
    from .onnx_task import task_onnx  # imported only when the ONNX scenario runs

    return task_onnx(**params)


def _corpus_task(**params: Any) -> dict[str, Any]:
    from .corpus import task_corpus  # the whole real corpus (issue #19): python -m benchmarks.corpus

    return task_corpus(**params)


TASKS: dict[str, Callable[..., dict[str, Any]]] = {
    "corpus": _corpus_task,
    "convert": task_convert,
    "forward": task_forward,
    "rebuild_load": task_rebuild_load,
    "scale": task_scale,
    "scale_rss": task_scale_rss,
    "scale70": lambda **params: task_scale(dims="70b", **params),
    "scale70_rss": lambda **params: task_scale_rss(dims="70b", **params),
    "sweep": task_sweep,
    "onnx": _onnx_task,
}


def run_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Run ``TASKS[spec["task"]](**rest)``; adds the task name, its wall time and this process's peak RSS."""
    params = dict(spec)
    task = params.pop("task")
    start = time.perf_counter()
    result = TASKS[task](**params)
    result.update(task=task, task_s=time.perf_counter() - start, peak_rss_mb=peak_rss_mb())
    return result
