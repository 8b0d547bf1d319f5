"""The ``--opaque`` column of the registry sweep (:mod:`benchmarks.sweep`): a model plain ``torch.export`` cannot
trace, converted again with ``opaque="auto"``, rebuilt with its opaque classes allowed and compared with eager.

Its share of parameters inside opaque leaves is measured twice: on the model converted (a shrunk configuration for
transformers), and at the model type's default configuration's dimensions, on a model built from that
configuration on the ``meta`` device (:func:`share_of`): the same modules, found by path and class, the shrunk
model's last layer standing for the layers the default has beyond it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks.sweep_compare import DIFFERS, first_line, max_diff


def opaque_row(model: Any, args: tuple, kwargs: dict, real: Callable[[], Any] | None = None) -> dict[str, Any]:
    """``torch2ir.convert(..., opaque="auto")`` of a model export cannot trace, rebuilt with its opaque classes
    allowed and compared with eager: ``{"status": "exact" | "DIFFERS ..." | "refused ..." | "error ...",
    "leaves": [paths], "share": parameters inside the opaque leaves / all parameters, "real_share": the same at
    the default configuration's dimensions (``real()``: that model on ``meta``; absent when there is none)}``."""
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
    traced = traced_alone(ir)
    kinds = {**{p: True for p in paths}, **{p: False for p in traced}}  # opaque leaf / child traced on its own
    diff = max_diff(got, expected)
    status = "exact" if diff == 0 else f"{DIFFERS} {diff:.3g}"
    if diff and ir.root.type == "opaque" and _children_equal_export(model, rebuilt, traced, args, kwargs):
        status = f"export differs {diff:.3g} (each child traced alone equals torch.export's module of it exactly)"
    regions = {p: (_qualname(m), kinds.get(p)) for p, m in model.named_modules()}
    row = {"status": status, "leaves": paths, "share": share_of(model, regions)}
    if diff == 0:
        row["loop"] = loop_closure(ir, rebuilt, args, kwargs)
    big = _built(real)
    if big is not None and _qualname(big) == _qualname(model):
        row["real_share"] = share_of(big, regions)
    return row


def loop_closure(ir: Any, rebuilt: Any, args: tuple, kwargs: dict) -> str:
    """``"closed"`` when converting the rebuild with ``opaque="auto"`` gives ``ir`` again, else ``"open: "`` and
    the implementations that differ (the first three), or the error of that conversion."""
    import torch2ir

    try:
        again = torch2ir.convert(rebuilt, args, kwargs, opaque="auto")
    except Exception as error:  # noqa: BLE001 - reported as the row's loop
        return f"open: {type(error).__name__}: {first_line(error)[:160]}"
    if again == ir:
        return "closed"
    keys = sorted(set(ir) | set(again))
    differ = [k for k in keys if k not in ir or k not in again or ir[k] != again[k]]
    return f"open: {', '.join(differ[:3])}{', ...' if len(differ) > 3 else ''} differ" if differ else "open: IR differs"


def _qualname(module: Any) -> str:
    return f"{type(module).__module__}.{type(module).__qualname__}"


def _built(real: Callable[[], Any] | None) -> Any:
    """``real()``, or None when there is none or it fails."""
    try:
        return real() if real is not None else None
    except Exception:  # noqa: BLE001 - no default-dimension figure for this model
        return None


def _key(path: str) -> str:
    """``path`` with each layer index replaced by ``*``."""
    return ".".join("*" if part.isdigit() else part for part in path.split("."))


def _indices(path: str) -> tuple[int, ...]:
    return tuple(int(part) for part in path.split(".") if part.isdigit())


def share_of(model: Any, regions: dict[str, tuple[str, bool | None]]) -> float:
    """The share of ``model``'s parameters (a tied one once) inside opaque leaves, from what the conversion of a
    model of the same type made of each of its modules: ``regions`` maps each module path to ``(its qualified
    class, True: an opaque leaf | False: a child traced on its own | None: neither)``. A parameter counts when the
    innermost opaque leaf or child traced on its own holding it is an opaque leaf (an opaque leaf's typed children
    count, a child traced on its own does not, an opaque leaf inside that child counts again).

    ``model`` may be that model (each path its own) or the default configuration's, with more layers: a module
    takes the kind of the module at its path when there is one of its class, else of the one of its class at the
    same path but for its layer indices, the last such (the shrunk model's last layer stands for the layers it
    does not have); a module matching none is neither."""
    groups: dict[tuple[str, str], list[tuple[tuple[int, ...], bool | None]]] = {}
    for path, (cls, kind) in regions.items():
        groups.setdefault((_key(path), cls), []).append((_indices(path), kind))
    found: dict[str, bool] = {}
    for path, module in model.named_modules():
        cls = _qualname(module)
        if path in regions and regions[path][0] == cls:
            kind = regions[path][1]
        elif (_key(path), cls) in groups:
            kind = max(groups[(_key(path), cls)], key=lambda item: item[0])[1]
        else:
            kind = None
        if kind is not None:
            found[path] = kind
    inside, total, seen = 0, 0, set()
    for name, t in model.named_parameters(remove_duplicate=False):
        if id(t) in seen:
            continue
        seen.add(id(t))
        total += t.numel()
        parts = name.split(".")[:-1]
        owners = (".".join(parts[:i]) for i in range(len(parts), -1, -1))
        if found.get(next((o for o in owners if o in found), None), False):
            inside += t.numel()
    return inside / (total or 1)


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
    real = f" ({100 * o['real_share']:.1f} % at the default configuration's dimensions)" if "real_share" in o else ""
    loop = f"; loop {o['loop']}" if "loop" in o else ""
    return (f"{o['status']}: {len(o['leaves'])} opaque leaves ({', '.join(o['leaves'][:3])}"
            f"{', ...' if len(o['leaves']) > 3 else ''}), {100 * o['share']:.1f} % of the parameters{real}{loop}")


__all__ = ["loop_closure", "opaque_parameters", "opaque_row", "opaque_text", "share_of"]
