"""Do brevitas' example networks train through a rebuild? Each is converted with ``opaque=["auto", TensorNorm]`` (a
quantized layer is kept as an opaque leaf when export cannot trace it or its quantizer computes otherwise in train
mode; bnn_pynq's ``TensorNorm`` named, as its train-mode computation is its own too), rebuilt with the classes the
IR names allowed, and trained for three SGD steps beside a twin of the original built alike (a deep copy of a
brevitas model shares its injectors). A table of: opaque leaves (the quantized layers whose quantizers collect
runtime statistics, or that export cannot trace: the others are traced, their estimators the ``torch2ir_ste``
operators of :mod:`common.ste_ops`), the share of the parameters inside them, whether train-mode outputs, every
parameter's gradient, and the whole state dict after each step are equal (``torch.equal``), and the time; written to
``benchmarks/results-brevitas-train.md``.

    python -m benchmarks.brevitas_train                   # every example but the ImageNet ones
    python -m benchmarks.brevitas_train --imagenet        # with them (224x224)

Batches of two (a batch norm in train mode needs more than one value per channel); random weights, nothing
downloaded (the models of :func:`benchmarks.sweep_zoos.brevitas_models`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from typing import Any

import torch

from benchmarks import results_file

TENSOR_NORM = "brevitas_examples.bnn_pynq.models.tensor_norm.TensorNorm"


def _build(name: str) -> tuple[Any, torch.Tensor]:
    from benchmarks.sweep_zoos import brevitas_models

    torch.manual_seed(0)
    model, args, _ = brevitas_models()[name]()
    x = torch.cat([args[0], args[0].flip(0) * 0.5])
    return model, x


def check(name: str, steps: int = 3) -> dict[str, Any]:
    """One row: convert, rebuild, train beside a twin; what held."""
    import ir2torch
    import torch2ir
    from common.opaque import named_classes

    start = time.perf_counter()
    model, x = _build(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ir = torch2ir.convert(model, (x,), opaque=["auto", TENSOR_NORM])
        rebuilt = ir2torch.convert(ir, model.state_dict(), allow=named_classes(ir.values()))
    twin = _build(name)[0]
    row = {"model": name, "opaque": len(ir.capture.opaque), "share": _share(model, ir), "outputs": True,
           "gradients": True, "state": True}
    twin.train()
    rebuilt.train()
    for step in range(steps):
        batch = x * (1 - 0.2 * step)
        torch.manual_seed(step)
        out = twin(batch)
        torch.manual_seed(step)
        got = rebuilt(batch)
        row["outputs"] &= torch.equal(out, got)
        out.square().mean().backward()
        got.square().mean().backward()
        row["gradients"] &= all((p.grad is None) == (q.grad is None) and (p.grad is None or torch.equal(p.grad, q.grad))
                                for p, q in zip(twin.parameters(), rebuilt.parameters(), strict=True))
        with torch.no_grad():
            for module in (twin, rebuilt):
                for p in module.parameters():
                    if p.grad is not None:
                        p -= 0.01 * p.grad
                        p.grad = None
        a, b = twin.state_dict(), rebuilt.state_dict()
        row["state"] &= list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)
    row["seconds"] = time.perf_counter() - start
    return row


def _share(model: torch.nn.Module, ir: Any) -> float:
    """The parameters inside the opaque leaves of ``ir`` (not in a child traced on its own), over all of them."""
    from benchmarks.sweep_opaque import opaque_parameters
    from common.opaque import traced_alone

    paths = [path for path, _, _ in ir.capture.opaque]
    inside = sum(t.numel() for t in opaque_parameters(model, paths, traced_alone(ir)).values())
    return inside / (sum(t.numel() for t in model.parameters()) or 1)


def main(argv: list[str] | None = None) -> None:
    from benchmarks.sweep_zoos import brevitas_models

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--imagenet", action="store_true", help="include the ImageNet examples (224x224)")
    parser.add_argument("--output", default=str(results_file.BENCH / "results-brevitas-train.md"),
                        help=results_file.output_help("results-brevitas-train.md"))
    ns = parser.parse_args(argv)
    load = os.getloadavg()[0]
    names = [n for n in sorted(brevitas_models()) if ns.imagenet or not n.startswith("imagenet.")]
    lines = ["| model | opaque leaves | parameters inside them | train-mode outputs equal | gradients equal | "
             "state equal after each step | s |",
             "|---|---:|---:|---|---|---|---:|"]
    for name in names:
        try:
            row = check(name)
        except Exception as exc:  # noqa: BLE001 - a row says what failed
            lines.append(f"| {name} | failed: {type(exc).__name__}: {str(exc).splitlines()[0][:120]} | | | | | |")
        else:
            lines.append(f"| {name} | {row['opaque']} | {100 * row['share']:.1f} % | {row['outputs']} | "
                         f"{row['gradients']} | {row['state']} | {row['seconds']:.1f} |")
        print(lines[-1], flush=True)
    results_file.write(ns.output, "brevitas examples train through a rebuild (issue 51)",
                       sys.argv[1:] if argv is None else argv, load, "\n".join(lines))


if __name__ == "__main__":
    main()
