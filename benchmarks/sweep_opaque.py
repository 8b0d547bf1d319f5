"""The ``--opaque`` column of the registry sweep (:mod:`benchmarks.sweep`): a model plain ``torch.export`` cannot
trace, converted again with ``opaque="auto"``, rebuilt with its opaque classes allowed and compared with eager."""

from __future__ import annotations

from typing import Any

from benchmarks.sweep_compare import DIFFERS, first_line, max_diff


def opaque_row(model: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    """``torch2ir.convert(..., opaque="auto")`` of a model export cannot trace, rebuilt with its opaque classes
    allowed and compared with eager: ``{"status": "exact" | "DIFFERS ..." | "refused ..." | "error ...",
    "leaves": [paths], "share": parameters inside the opaque leaves / all parameters}``."""
    import warnings

    import torch

    import ir2torch
    import torch2ir
    from common.errors import IRError
    from common.opaque import traced_alone

    warnings.simplefilter("ignore")
    model.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        expected = model(*args, **kwargs)
    try:
        ir = torch2ir.convert(model, args, kwargs, opaque="auto")
        leaves = list(ir.capture.opaque)
        rebuilt = ir2torch.convert(ir, model.state_dict(), allow=sorted({cls for _, cls, _ in leaves}))
        torch.manual_seed(0)
        with torch.no_grad():
            got = rebuilt(*args, **kwargs)
    except IRError as error:
        return {"status": f"refused {type(error).__name__}: {first_line(error)}"}
    except Exception as error:  # noqa: BLE001 - reported as a row
        return {"status": f"error {type(error).__name__}: {first_line(error)}"}
    paths = [path for path, _, _ in leaves]
    inside = sum(t.numel() for t in opaque_parameters(model, paths, traced_alone(ir)).values())
    total = sum(t.numel() for t in model.parameters()) or 1
    diff = max_diff(got, expected)
    return {"status": "exact" if diff == 0 else f"{DIFFERS} {diff:.3g}", "leaves": paths, "share": inside / total}


def opaque_parameters(model: Any, opaque: list[str], traced: list[str]) -> dict[int, Any]:
    """The parameters inside the opaque leaves at the paths ``opaque``, but not inside a child traced on its own
    (the ``traced`` paths): ``{id: parameter}`` (a tied parameter once)."""
    outermost = [p for p in opaque if not any(p != q and (not q or p.startswith(q + ".")) for q in opaque)]
    out = {}
    for path in outermost:
        for name, t in model.get_submodule(path).named_parameters(prefix=path, remove_duplicate=False):
            if not any(name.startswith(f"{t_path}.") for t_path in traced):
                out[id(t)] = t
    return out


def opaque_text(o: dict[str, Any]) -> str:
    if "leaves" not in o:
        return o["status"]
    return (f"{o['status']}: {len(o['leaves'])} opaque leaves ({', '.join(o['leaves'][:3])}"
            f"{', ...' if len(o['leaves']) > 3 else ''}), {100 * o['share']:.1f} % of the parameters")


__all__ = ["opaque_parameters", "opaque_row", "opaque_text"]
