"""Model registries of the registry sweep (:mod:`benchmarks.sweep`): torchvision's and timm's names, and one model
of any zoo built with random weights (seeded by the caller) with the input it is called on."""

from __future__ import annotations

import fnmatch
import random
from collections.abc import Iterable
from typing import Any

from benchmarks.sweep_transformers import transformers_default_on_meta, transformers_model, transformers_params
from benchmarks.sweep_zoos import brevitas_models, diffusers_blocks

#: the side torchvision's R-CNN, RetinaNet and FCOS models resize images to in the sweep (their default is 800)
DETECTION_SIDE = 320

# ---------------------------------------------------------------------------------------------- registries


def _torchvision():
    """torchvision, with pure-PyTorch kernels for the extension's ``nms`` and ``roi_align`` where it does not load
    (:mod:`benchmarks.torchvision_nms`): the detection models run in eager."""
    from benchmarks.torchvision_nms import install
    from tests.ecosystems.load import torchvision

    tv = torchvision()
    install()
    return tv


def torchvision_names(tasks: Iterable[str]) -> list[str]:
    tv = _torchvision()
    modules = {
        "classification": tv.models,
        "segmentation": tv.models.segmentation,
        "detection": tv.models.detection,
        "video": tv.models.video,
        "quantization": tv.models.quantization,
        "optical_flow": tv.models.optical_flow,
    }
    names: list[str] = []
    for task in tasks:
        prefix = "" if task == "classification" else task + "."
        names += [prefix + n for n in tv.models.list_models(module=modules[task])]
    return names


def timm_names(pattern: str, limit: int, seed: int) -> list[str]:
    """Matches of ``pattern`` (globs, comma-separated); with a limit, a seeded sample spread over timm's families
    (one per module first), in that round-robin order: an interrupted sweep's rows are still spread over them."""
    from tests.ecosystems.load import timm

    tm = timm()
    names = [n for n in tm.list_models() if any(fnmatch.fnmatch(n, glob) for glob in pattern.split(","))]
    limit = min(limit or len(names), len(names))  # 0: every match, in the same spread-out order
    from timm.models import _registry

    rng = random.Random(seed)
    by_family: dict[str, list[str]] = {}
    for n in names:
        by_family.setdefault(_registry._model_to_module.get(n, "?"), []).append(n)
    chosen: list[str] = []
    # in a family's seeded order, the sizes --max-params skips anyway come last
    def large(n: str) -> bool:
        return any(w in n for w in ("large", "huge", "giant", "gigantic", "xlarge", "enormous", "_g_", "_e_"))

    pools = [sorted(rng.sample(v, len(v)), key=large, reverse=True) for _, v in sorted(by_family.items())]
    while len(chosen) < limit:  # round robin over the families, each in a seeded order
        for pool in pools:
            if pool and len(chosen) < limit:
                chosen.append(pool.pop())
    return chosen


# --------------------------------------------------------------------------------------------- one model


def build(zoo: str, name: str, size: int) -> tuple[Any, tuple, dict]:
    import torch

    if zoo == "torchvision":
        tv = _torchvision()
        task, _, arch = name.rpartition(".")
        extra: dict[str, Any] = {}
        if arch in ("googlenet", "inception_v3"):
            extra = {"aux_logits": False, "init_weights": False}
        if task in ("segmentation", "detection"):
            extra["weights_backbone"] = None
        if task == "detection" and not arch.startswith("ssd"):  # resized to 320, not 800: 6x less work per call
            extra.update(min_size=DETECTION_SIDE, max_size=DETECTION_SIDE)
        if task == "quantization":
            extra["quantize"] = False
        model = tv.models.get_model(arch, weights=None, **extra)
        side = 299 if arch.endswith("inception_v3") else 224 if arch.startswith(("vit", "swin", "maxvit")) else size
        if task == "video":
            x = torch.randn(1, 3, 4, 64, 64) if not arch.startswith(("mvit", "s3d", "swin3d")) else \
                torch.randn(1, 3, 16, 224, 224)
            return model, (x,), {}
        if task == "detection":
            return model, ([torch.rand(3, size, size)],), {}
        if task == "optical_flow":
            return model, (torch.randn(1, 3, 128, 128), torch.randn(1, 3, 128, 128)), {"num_flow_updates": 2}
        return model, (torch.randn(1, 3, side, side),), {}
    if zoo == "timm":
        from tests.ecosystems.load import timm

        tm = timm()
        try:
            model = tm.create_model(name, pretrained=False, img_size=size)
        except TypeError:
            model = tm.create_model(name, pretrained=False)
        model.eval()
        x = torch.randn(1, 3, size, size)
        try:
            with torch.no_grad():
                model(x)
        except Exception:  # noqa: BLE001 - a model of fixed input size: built again at its own size
            model = tm.create_model(name, pretrained=False).eval()
            x = torch.randn(1, *model.pretrained_cfg.get("input_size", (3, 224, 224)))
        return model, (x,), {}
    if zoo == "diffusers":
        return diffusers_blocks()[name]()
    if zoo == "brevitas":
        return brevitas_models()[name]()
    if zoo == "transformers":
        return transformers_model(name)
    raise ValueError(zoo)


def default_on_meta(zoo: str, name: str) -> Any:
    """The model at its default configuration's dimensions on ``meta`` where the sweep builds a shrunk one
    (transformers), else None (timm and torchvision models are built at their own dimensions; diffusers' blocks
    come from tiny configurations with no default to compare with)."""
    return transformers_default_on_meta(name) if zoo == "transformers" else None


def params_on_meta(zoo: str, name: str) -> int | None:
    if zoo == "transformers":
        return transformers_params(name)
    if zoo != "timm":
        return None
    import torch

    from tests.ecosystems.load import timm

    try:
        with torch.device("meta"):
            model = timm().create_model(name, pretrained=False)
    except Exception:  # noqa: BLE001 - unknown size; the build proper reports the failure
        return None
    return sum(p.numel() for p in model.parameters())


__all__ = ["build", "default_on_meta", "params_on_meta", "timm_names", "torchvision_names"]
