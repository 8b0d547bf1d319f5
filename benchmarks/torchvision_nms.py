"""Pure-PyTorch CPU kernels for ``torchvision::nms`` and ``torchvision::roi_align``, for the registry sweep's process
only (:mod:`benchmarks.sweep`).

torchvision's compiled extension does not load with this torch build (``tests/ecosystems/load.py`` defines two of
its operator schemas so that ``import torchvision`` works at all), so a detection model fails in eager at its first
``torchvision.ops.nms``. Of the extension's ops, the detection models call ``nms`` (every one) and ``roi_align``
(the R-CNNs' ``MultiScaleRoIAlign``); ``roi_pool``, ``ps_roi_align``, ``ps_roi_pool`` and ``deform_conv2d`` no model
of torchvision's registry calls. :func:`install` registers, with ``torch.library``, :func:`nms` as the CPU kernel
of ``torchvision::nms`` (torchvision's own fake kernel serves ``torch.export``) and defines ``torchvision::roi_align``
with torchvision's schema, its own pure-PyTorch ``_roi_align`` (unwrapped from the ``torch.compile`` it gets when
the extension is missing, which would run inductor's kernels in eager) as the CPU kernel and its own meta kernel;
then ``torchvision.ops`` calls both as it calls the extension's. A graph ``torch.export`` traces thus holds the
``torchvision::nms`` and ``torchvision::roi_align`` operators, as it does with the extension loaded.

The kernel follows torchvision's CPU kernel (``torchvision/csrc/ops/cpu/nms_kernel.cpp``) and its documented
semantics: boxes ``(x1, y1, x2, y2)`` in decreasing order of score (a stable sort, so equal scores keep their
index order), each kept box suppresses every later one whose IoU with it is greater than ``iou_threshold``; the
kept indices are returned in decreasing order of score. IoU is computed in the boxes' dtype with the kernel's
operation order (``inter / (area_i + area_j - inter)``) and compared with the threshold in double precision, as the
C++ comparison of a ``scalar_t`` with a ``double`` does. Not part of the library: nothing outside ``benchmarks/``
imports it.
"""

from __future__ import annotations

import torch

_LIBRARIES: list[torch.library.Library] = []  # a registration lives as long as its Library object


def iou_matrix(boxes: torch.Tensor) -> torch.Tensor:
    """IoU of every pair of ``boxes`` (``N x 4``, ``x1, y1, x2, y2``) with the operation order of torchvision's CPU
    kernel, in the boxes' dtype."""
    x1, y1, x2, y2 = boxes.unbind(1)
    areas = (x2 - x1) * (y2 - y1)
    w = (torch.minimum(x2[:, None], x2[None, :]) - torch.maximum(x1[:, None], x1[None, :])).clamp_min(0)
    h = (torch.minimum(y2[:, None], y2[None, :]) - torch.maximum(y1[:, None], y1[None, :])).clamp_min(0)
    inter = w * h
    return inter / (areas[:, None] + areas[None, :] - inter)


def nms(dets: torch.Tensor, scores: torch.Tensor, iou_threshold: float) -> torch.Tensor:
    """Greedy non-maximum suppression: the indices (``int64``) of the boxes kept, in decreasing order of score.

    Args:
        dets: ``N x 4`` boxes ``(x1, y1, x2, y2)``.
        scores: ``N`` scores.
        iou_threshold: a box whose IoU with a kept, higher-scoring box is greater than this is dropped.
    """
    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    order = scores.sort(stable=True, descending=True).indices
    over = iou_matrix(dets[order]).double() > iou_threshold  # row i: the boxes box i suppresses if it is kept
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep: list[int] = []
    for i in range(len(order)):
        if not suppressed[i]:
            keep.append(i)
            suppressed |= over[i]  # boxes before i are decided already: marking them changes nothing
    return order[torch.tensor(keep, dtype=torch.long)]


#: ``torchvision::roi_align`` as the extension defines it (``torchvision/csrc/ops/roi_align.cpp``)
ROI_ALIGN = ("roi_align(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, SymInt pooled_width, "
             "int sampling_ratio, bool aligned) -> Tensor")


def install() -> None:
    """Register the CPU kernels of ``torchvision::nms`` and ``torchvision::roi_align`` (when torchvision's own
    extension is not loaded) and let ``torchvision.ops`` call them. Idempotent; torchvision is imported already."""
    import importlib

    import torchvision._meta_registrations as meta
    import torchvision.extension
    import torchvision.ops.boxes

    roi = importlib.import_module("torchvision.ops.roi_align")  # the attribute of torchvision.ops is the function

    if torchvision.extension._has_ops() or _LIBRARIES:
        return
    impl = torch.library.Library("torchvision", "IMPL")
    impl.impl("nms", nms, "CPU")
    define = torch.library.Library("torchvision", "FRAGMENT")
    define.define(ROI_ALIGN)
    plain = getattr(roi._roi_align, "__wrapped__", roi._roi_align)  # lazy_compile's hook wraps the function
    define.impl("roi_align", plain, "CPU")
    define.impl("roi_align", meta.meta_roi_align, "Meta")
    _LIBRARIES.extend((impl, define))
    torchvision.ops.boxes._assert_has_ops = lambda: None  # the checks before calling torch.ops.torchvision.*
    roi._assert_has_ops = lambda: None
    roi._has_ops = lambda: True


__all__ = ["ROI_ALIGN", "install", "iou_matrix", "nms"]
