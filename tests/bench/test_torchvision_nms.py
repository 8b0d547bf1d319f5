"""The sweep's pure-PyTorch ``torchvision::nms`` kernel (``benchmarks/torchvision_nms.py``) against a brute-force
greedy NMS written from torchvision's documented semantics, one box pair at a time."""

from __future__ import annotations

import pytest
import torch

from benchmarks.torchvision_nms import nms


def _reference(boxes: torch.Tensor, scores: torch.Tensor, threshold: float) -> list[int]:
    """Greedy NMS by the letter: visit boxes by decreasing score (equal scores in index order), keep a box no kept
    box suppressed, suppress every later box whose IoU with it (float32, torchvision's operation order) is greater
    than ``threshold``."""
    order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
    b = [[torch.tensor(float(v), dtype=boxes.dtype) for v in box] for box in boxes]
    keep: list[int] = []
    suppressed: set[int] = set()
    for pos, i in enumerate(order):
        if i in suppressed:
            continue
        keep.append(i)
        ix1, iy1, ix2, iy2 = b[i]
        iarea = (ix2 - ix1) * (iy2 - iy1)
        for j in order[pos + 1:]:
            x1, y1, x2, y2 = b[j]
            w = torch.clamp_min(torch.minimum(ix2, x2) - torch.maximum(ix1, x1), 0)
            h = torch.clamp_min(torch.minimum(iy2, y2) - torch.maximum(iy1, y1), 0)
            inter = w * h
            if float(inter / (iarea + (x2 - x1) * (y2 - y1) - inter)) > threshold:
                suppressed.add(j)
    return keep


@pytest.mark.parametrize("seed", range(6))
def test_nms_matches_a_brute_force_greedy_reference(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    n = 60
    centers = torch.rand(5, 2, generator=g)[torch.randint(0, 5, (n,), generator=g)] * 50  # clusters: overlaps
    xy = centers + torch.randn(n, 2, generator=g) * 2
    wh = torch.rand(n, 2, generator=g) * 10 + 1
    boxes = torch.cat([xy, xy + wh], 1)
    scores = torch.randint(0, 8, (n,), generator=g).float() / 8  # ties: the stable order decides
    for threshold in (0.0, 0.3, 0.5, 0.7, 1.0):
        got = nms(boxes, scores, threshold)
        assert got.dtype == torch.long
        assert got.tolist() == _reference(boxes, scores, threshold)


def test_nms_of_no_boxes_is_empty() -> None:
    assert nms(torch.zeros(0, 4), torch.zeros(0), 0.5).tolist() == []
