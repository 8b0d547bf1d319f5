"""The ONNX round-trip task: ``torch.onnx.export`` + ``onnx2torch`` vs torch2ir's own round trip (split from
:mod:`benchmarks.scenarios`; the optional packages come from ``requirements-onnx.txt``)."""


from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import tempfile
import types
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import models
from .measure import interleaved, paired_ratio
from .scenarios import _error, _tensor_leaves, max_abs_diff

warnings.filterwarnings("ignore")


def import_onnx2torch() -> types.ModuleType:
    """Import ``onnx2torch``, with a placeholder ``torchvision`` when torchvision is not installed.

    onnx2torch imports torchvision only for its NMS and RoIAlign converters, and the PyPI torchvision
    wheel does not load with a CPU build of torch (so ``requirements-onnx.txt`` leaves it out). The
    placeholder is in ``sys.modules`` only during the import (so ``transformers`` never sees it).

    Raises:
        ImportError: onnx2torch is not installed.
    """
    if "onnx2torch" in sys.modules or importlib.util.find_spec("torchvision") is not None:
        import onnx2torch

        return onnx2torch
    stub = types.ModuleType("torchvision")
    stub.ops = types.ModuleType("torchvision.ops")  # type: ignore[attr-defined]
    for name in ("nms", "roi_align", "box_convert"):
        setattr(stub.ops, name, None)  # type: ignore[attr-defined]
    sys.modules.update({"torchvision": stub, "torchvision.ops": stub.ops})  # type: ignore[attr-defined]
    try:
        import onnx2torch
    finally:
        sys.modules.pop("torchvision", None)
        sys.modules.pop("torchvision.ops", None)
    return onnx2torch


class _Positional(nn.Module):
    """Calls ``model(*positional, **dict(zip(names, rest)))``: the flat calling convention of ONNX graphs."""

    def __init__(self, model: nn.Module, names: list[str]) -> None:
        super().__init__()
        self.model = model
        self.names = names

    def forward(self, *inputs: torch.Tensor) -> Any:
        split = len(inputs) - len(self.names)
        return self.model(*inputs[:split], **dict(zip(self.names, inputs[split:])))


def _onnx_attempts(model: nn.Module, args: tuple, kwargs: dict[str, Any], path: Path
                   ) -> list[tuple[str, Callable[[], nn.Module]]]:
    """The ONNX paths tried in order: the dynamo exporter (default opset), then the TorchScript one (opset 17)."""
    import onnx

    onnx2torch = import_onnx2torch()

    def dynamo() -> nn.Module:
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(model, args, str(path), kwargs=kwargs, dynamo=True)
        return onnx2torch.convert(onnx.load(str(path))).eval()

    def torchscript() -> nn.Module:
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(_Positional(model, list(kwargs)), (*args, *kwargs.values()), str(path), dynamo=False,
                              opset_version=17, do_constant_folding=False)
        return onnx2torch.convert(onnx.load(str(path))).eval()

    return [("dynamo exporter, default opset", dynamo), ("TorchScript exporter, opset 17", torchscript)]


def task_onnx(model: str, rounds: int, warmup: int) -> dict[str, Any]:
    """Our convert + save + load + rebuild vs ``torch.onnx.export`` + ``onnx2torch.convert`` (small config)."""
    import ir2torch
    import torch2ir
    from common import IR
    from common.state_dict import save_safetensors

    spec = models.SMALL[model]
    m = spec.build(None)
    args, kwargs = spec.inputs(2, None)
    with torch.no_grad():
        expected = m(*args, **kwargs)
    result: dict[str, Any] = {"model": model, "onnx_errors": []}
    with tempfile.TemporaryDirectory(prefix="t2i-bench-") as tmp:
        ir_path, state_path, onnx_path = Path(tmp) / "m.ir.json", Path(tmp) / "m.safetensors", Path(tmp) / "m.onnx"
        built: dict[str, nn.Module] = {}

        def ours() -> None:
            torch2ir.convert(m, args, kwargs).save(ir_path)
            save_safetensors(m.state_dict(), state_path)
            built["ours"] = ir2torch.convert(IR.load(ir_path), state_path)

        candidates: dict[str, Callable[[], Any]] = {"ours": ours}
        try:
            attempts = _onnx_attempts(m, args, kwargs, onnx_path)
        except ImportError as exc:
            result["onnx_errors"].append(f"not installed ({_error(exc)}); see benchmarks/requirements-onnx.txt")
            attempts = []
        for label, attempt in attempts:
            try:
                rebuilt = attempt()
                with torch.no_grad():
                    got = rebuilt(*args, *kwargs.values())
            except Exception as exc:  # noqa: BLE001 - any failure of the ONNX path is a result to report
                result["onnx_errors"].append(f"{label}: {_error(exc)}")
                continue
            first = _tensor_leaves(got)[:1]
            diff = max_abs_diff(_tensor_leaves(expected)[:1], first)
            result.update(onnx_path=label, onnx_max_abs_diff=diff)
            candidates["onnx"] = lambda attempt=attempt: built.__setitem__("onnx", attempt())
            break
        series = interleaved(candidates, rounds=rounds, warmup=warmup)
        with torch.no_grad():
            result["ours_max_abs_diff"] = max_abs_diff(expected, built["ours"].eval()(*args, **kwargs))
    result["ours_s"] = series["ours"].median
    if "onnx" in series:
        result["onnx_s"] = series["onnx"].median
        result["ours_vs_onnx"] = paired_ratio(series, "ours", "onnx")
    return result
