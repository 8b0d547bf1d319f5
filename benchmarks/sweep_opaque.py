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
    from common.opaque import named_classes, traced_alone

    warnings.simplefilter("ignore")
    model.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        expected = model(*args, **kwargs)
    try:
        ir = torch2ir.convert(model, args, kwargs, opaque="auto")
        leaves = list(ir.capture.opaque)
        allow = sorted({cls for _, cls, _ in leaves} | set(named_classes(ir.values())))
        rebuilt = ir2torch.convert(ir, model.state_dict(), allow=allow)
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
    status = "exact" if diff == 0 else f"{DIFFERS} {diff:.3g}"
    if diff and ir.root.type == "opaque" and _children_equal_export(model, rebuilt, traced_alone(ir), args, kwargs):
        status = f"export differs {diff:.3g} (each child traced alone equals torch.export's module of it exactly)"
    return {"status": status, "leaves": paths, "share": inside / total}


def _children_equal_export(model: Any, rebuilt: Any, traced: list[str], args: tuple, kwargs: dict) -> bool:
    """Whether, with an opaque root (everything traced is a child traced on its own), each such child of the
    rebuild returns exactly what ``torch.export``'s own module of the original child returns, on the inputs of its
    first call in eager mode: the rebuild then differs from eager only where export's program rounds otherwise."""
    import torch

    inputs: dict[str, tuple[tuple, dict]] = {}
    hooks = [model.get_submodule(p).register_forward_pre_hook(
        lambda m, a, k, p=p: inputs.setdefault(p, (a, k)) and None, with_kwargs=True) for p in traced]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for hook in hooks:
            hook.remove()
    for path in traced:
        if path not in inputs:
            return False
        a, k = inputs[path]
        try:
            with torch.no_grad():
                theirs = torch.export.export(model.get_submodule(path), a, k, strict=False).module()(*a, **k)
                ours = rebuilt.get_submodule(path)(*a, **k)
        except Exception:  # noqa: BLE001 - then it is not shown equal
            return False
        if max_diff(ours, theirs) != 0:
            return False
    return True


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
