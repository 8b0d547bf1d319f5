"""The view's screenshots in the docs (docs/img/view-*.png), made again by ``python -m tests.view.screenshots``.

Each is a page of the view in headless Chromium at 1280 x 800 (tests/view/browser.py), its colours reduced to a
palette of 64 so the file stays small: a Llama with Llama-3-70B dimensions and 80 layers (converted on ``meta``) as
the page opens, its decoder's graph at its stack box, a BERT layer, and a comparison of a
tower of conv blocks before and after folding its batch norms. tests/view/test_llm_browser.py checks that the docs
show them.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

DOCS = Path(__file__).resolve().parents[2] / "docs" / "img"
SIZE = (1280, 800)
#: file name -> what it shows (the alt text in docs/cli.md)
SHOTS = {
    "view-70b-root.png": "a Llama with 70B dimensions as the view opens: its root's graph, centred",
    "view-70b-decoder.png": "the 70B decoder's graph: 80 layers in one stack box",
    "view-bert-layer.png": "a BERT layer, its attention and self-attention drawn in place",
    "view-compare.png": "a comparison: batch norms folded into the convolutions of a run of blocks",
}


def _shoot(page: Path, fragment: str, out: Path, tmp: Path) -> None:
    from PIL import Image

    from tests.view.browser import screenshot

    png = screenshot(f"{page.as_uri()}{fragment}", tmp, SIZE)
    Image.open(png).convert("RGB").quantize(colors=64).save(out, optimize=True)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch2ir
    from benchmarks.models import llama_70b
    from common.rewrite import fold_batchnorm
    from tests.view.test_layout_browser import _bert
    from tests.view.test_llm_browser import Tower

    DOCS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        llama = torch2ir.convert(llama_70b(), (torch.zeros((1, 16), dtype=torch.long, device="meta"),))
        page = llama.view(tmp / "llama.html")
        _shoot(page, "", DOCS / "view-70b-root.png", tmp)
        _shoot(page, "#node=model:norm", DOCS / "view-70b-decoder.png", tmp)
        bert = _bert().view(tmp / "bert.html")
        _shoot(bert, "#graph=encoder.layer.0&inplace=attention,attention/self", DOCS / "view-bert-layer.png", tmp)
        torch.manual_seed(0)
        model = Tower().eval()
        ir = torch2ir.convert(model, (torch.randn(1, 3, 10, 10),))
        folded, _ = fold_batchnorm(ir, model.state_dict())
        page = ir.view(tmp / "cmp.html", compare=folded, names=("tower.ir.json", "folded.ir.json"))
        _shoot(page, "#graph=root&select=blocks.1", DOCS / "view-compare.png", tmp)
    for name in SHOTS:
        print(f"{DOCS / name}: {(DOCS / name).stat().st_size} bytes")


if __name__ == "__main__":
    main()
