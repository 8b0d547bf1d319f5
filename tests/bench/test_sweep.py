"""The registry sweep's own pieces (``benchmarks/sweep.py``, ``benchmarks/sweep_transformers.py``): the transformers
builder shrinks a default configuration, a model runs through the loop to "exact", and statuses are grouped."""

from __future__ import annotations

import pytest
import torch

from benchmarks.sweep import DIFFERS, _kind, run_one, table
from benchmarks.sweep_transformers import transformers_model, transformers_names, transformers_params


def test_every_transformers_model_type_is_listed_and_shrunk():
    pytest.importorskip("transformers")
    names = transformers_names()
    assert len(names) > 300 and "llama" in names and names == sorted(names)
    model, args, kwargs = transformers_model("llama")
    assert args == () and kwargs["input_ids"].shape == (1, 8)
    assert model.config.hidden_size == 32 and model.config.num_hidden_layers == 2 and not model.config.use_cache
    assert transformers_params("llama") == sum(p.numel() for p in model.parameters()) < 100_000


def test_one_model_through_the_loop_is_exact():
    pytest.importorskip("transformers")
    row = run_one("transformers", "bert", 64, 1e8)
    assert row["status"] == "exact" and row["convert_s"] > 0


def test_statuses_are_grouped_and_the_silent_ones_named():
    rows = [{"name": "a", "status": "exact"}, {"name": "b", "status": f"{DIFFERS} 0.5"},
            {"name": "c", "status": "export differs 1e-07 (the rebuild equals torch.export's own module exactly)"},
            {"name": "d", "status": "refused ConversionError: x"}]
    assert [_kind(r["status"]) for r in rows] == ["exact", DIFFERS, "export differs", "refused"]
    text = table("transformers", rows)
    assert "**Silently different (output differs, no error): 1**: b" in text and "| export differs | 1 |" in text


def test_the_opaque_column_counts_exact_ones_and_their_share():
    rows = [{"name": "a", "status": "export failed X", "opaque": {"status": "exact", "leaves": ["m.gate"],
                                                                   "share": 0.02}},
            {"name": "b", "status": "export failed Y", "opaque": {"status": "exact", "leaves": ["x", "y"],
                                                                   "share": 0.10}},
            {"name": "c", "status": "export failed Z", "opaque": {"status": "refused ConversionError: w"}},
            {"name": "d", "status": "exact"}]
    text = table("brevitas", rows)
    assert '**With `opaque="auto"`: 2 of the 3 models export cannot trace are exact**' in text
    assert "median 6.0 %, max 10.0 %" in text
    assert "| a | export failed X |  | exact: 1 opaque leaves (m.gate), 2.0 % of the parameters |" in text
    assert "| d | exact |  | |" in text


def test_rows_are_kept_as_json_lines_and_merged(tmp_path):
    from benchmarks.sweep import _Rows, read_rows

    rows = _Rows(tmp_path / "a.jsonl")
    rows.append({"name": "m1", "status": "timeout"})
    (tmp_path / "b.jsonl").write_text('{"name": "m1", "status": "exact"}\n{"name": "m0", "status": "exact"}\n')
    merged = read_rows([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    assert sorted((r["name"], r["status"]) for r in merged) == [("m0", "exact"), ("m1", "exact")]
    assert table("timm", merged).index("| m0 |") < table("timm", merged).index("| m1 |")


def test_the_opaque_column_states_the_default_dimension_share_too():
    rows = [{"name": n, "status": "export failed X", "opaque": {"status": "exact", "leaves": [""], "share": s,
                                                                 "real_share": r}}
            for n, s, r in (("a", 0.9, 0.1), ("b", 0.5, 0.3), ("c", 0.1, 0.2))]
    text = table("transformers", rows)
    assert "median 50.0 %, max 90.0 %; at the default configurations' dimensions (3 models): median 20.0 %, " \
           "max 30.0 %" in text
    assert "90.0 % of the parameters (10.0 % at the default configuration's dimensions)" in text


def test_the_share_counts_by_the_innermost_opaque_leaf_or_child_traced_alone():
    from torch import nn

    from benchmarks.sweep_opaque import _qualname, share_of

    def model(layers: int, width: int) -> nn.Module:
        root = nn.Module()
        root.embed = nn.Linear(4, 4, bias=False)  # 16 parameters, outside every region
        root.layers = nn.ModuleList(nn.Sequential(nn.Linear(width, width, bias=False)) for _ in range(layers))
        return root

    small = model(2, 2)  # 16 + 2 * 4 parameters; layer 0 opaque, layer 1 traced alone with an opaque leaf inside
    kinds = {"layers.0": True, "layers.1": False, "layers.1.0": True}
    regions = {p: (_qualname(m), kinds.get(p)) for p, m in small.named_modules()}
    assert share_of(small, regions) == 8 / 24  # layer 0's and layer 1's inner leaf's, not the embedding's
    kinds["layers.1.0"] = None
    regions = {p: (_qualname(m), kinds.get(p)) for p, m in small.named_modules()}
    assert share_of(small, regions) == 4 / 24
    big = model(5, 8)  # 16 + 5 * 64: layer 0 opaque, layers 1-4 take the last small layer's kind (traced alone)
    assert share_of(big, regions) == 64 / 336
    regions["layers.1"] = (regions["layers.1"][0], True)
    assert share_of(big, regions) == 320 / 336


def test_the_opaque_column_counts_the_exact_ones_whose_loop_closes():
    rows = [{"name": n, "status": "export failed X", "opaque": {"status": "exact", "leaves": ["m"], "share": 0.1,
                                                                 "loop": loop}}
            for n, loop in (("a", "closed"), ("b", "open: m differ"), ("c", "closed"))]
    text = table("transformers", rows)
    assert "loop closed (converting the rebuild with `opaque=\"auto\"` gives the IR again): 2 of the 3 exact" in text
    assert "10.0 % of the parameters; loop open: m differ |" in text


class _Branchy(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.sum() > 0 else x - 1  # a branch on data: torch.export cannot trace it


class _Gated(torch.nn.Module):
    def __init__(self, out: int = 2):
        super().__init__()
        self.lin, self.gate, self.out = torch.nn.Linear(4, 4), _Branchy(), torch.nn.Linear(4, out)

    def forward(self, x):
        return self.out(self.gate(self.lin(x)))


def test_the_loop_closure_of_an_opaque_conversion_is_measured_on_the_rebuild():
    import ir2torch
    import torch2ir
    from benchmarks.sweep_opaque import loop_closure

    torch.manual_seed(0)
    model, x = _Gated().eval(), torch.randn(3, 4)
    ir = torch2ir.convert(model, (x,), opaque="auto")
    assert [p for p, _, _ in ir.capture.opaque] == ["gate"]
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=sorted({cls for _, cls, _ in ir.capture.opaque}))
    assert loop_closure(ir, rebuilt, (x,), {}) == "closed"
    other = torch2ir.convert(_Gated(out=3).eval(), (x,), opaque="auto")  # another head: another IR
    assert loop_closure(other, rebuilt, (x,), {}) == "open: out, root differ"


def test_latent_attention_s_rope_sections_sum_to_half_its_rope_part():
    """A shrunk multi-head latent attention with multimodal rope (HY-V4-VL, transformers 5.24): its sections must sum
    to half of ``qk_rope_head_dim`` (the configuration class validates it when the IR's recorded configuration is
    loaded back), its head dimension is the rope part."""
    from types import SimpleNamespace

    from benchmarks.sweep_transformers import _rotary

    config = SimpleNamespace(qk_rope_head_dim=8, qk_nope_head_dim=16, head_dim=64,
                             rope_parameters={"rope_type": "default", "mrope_section": [12, 10, 10]})
    _rotary(config)
    assert sum(config.rope_parameters["mrope_section"]) == 4 and min(config.rope_parameters["mrope_section"]) >= 1
    assert config.head_dim == 8 and config.qk_head_dim == 24
    plain = SimpleNamespace(qk_rope_head_dim=8, qk_nope_head_dim=16, head_dim=64, rope_parameters={"rope_type": "x"})
    _rotary(plain)
    assert plain.rope_parameters == {"rope_type": "x"} and plain.head_dim == 8
