"""``opaque="auto"`` on real models torch.export cannot trace (tests/real/corpus.py UNSUPPORTED). transformers'
modules keep their config object as an attribute: the opaque leaf records its constructor arguments (the config as
its class, its values and its private attributes) and the rebuild constructs it again. Longformer passes a bool
read from data (``.item()``) to its attention, which a kept call cannot carry: ``"auto"`` moves up to the module
that computes it (its encoder), whose layers are then traced on their own (the flag a constant of their recorded
call). Outputs are exact, the loop closes, and the file round-trips."""

from __future__ import annotations

import pytest
import torch
from torch.utils import _pytree as pytree

import ir2torch
import torch2ir
from common import IR
from common.opaque import traced_alone
from tests.real.corpus import UNSUPPORTED

#: name -> (outermost opaque path, its class)
_MODULES = {
    "longformer": ("encoder", "transformers.models.longformer.modeling_longformer.LongformerEncoder"),
    "mixtral_eager": ("model.layers.0.mlp.experts", "transformers.models.mixtral.modeling_mixtral.MixtralExperts"),
}
#: name -> the modules below an opaque leaf traced on their own
_TRACED = {"longformer": ["encoder.layer.0", "encoder.layer.1"], "mixtral_eager": []}


@pytest.mark.parametrize("arch", [a for a in UNSUPPORTED if a.name in _MODULES], ids=lambda a: a.name)
def test_auto_keeps_the_failing_modules_and_the_rebuild_is_exact(arch, tmp_path) -> None:
    path, qualname = _MODULES[arch.name]
    torch.manual_seed(0)
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    ir = torch2ir.convert(model, args, kwargs, opaque="auto")
    assert (path, qualname) in [(p, c) for p, c, _ in ir.capture.opaque]
    assert ir[path].data["init"]["config"]["$config"]["class"].startswith("transformers.models.")
    assert traced_alone(ir) == _TRACED[arch.name]
    classes = sorted({c for _, c, _ in ir.capture.opaque})
    ir.save(tmp_path / "m.ir.json")
    rebuilt = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), model.state_dict(), allow=classes)
    expected, got = pytree.tree_leaves(model(*args, **kwargs)), pytree.tree_leaves(rebuilt(*args, **kwargs))
    assert len(expected) == len(got) and all(torch.equal(a, b) for a, b in zip(expected, got, strict=True)
                                             if isinstance(a, torch.Tensor))
    assert torch2ir.convert(rebuilt, args, kwargs, opaque="auto") == ir


def test_a_model_whose_own_forward_does_not_trace_is_an_opaque_root_around_traced_children(tmp_path) -> None:
    """FSMT's own forward reads data (``Eq(u0, 1)``): the root is the opaque leaf, its encoder and decoder are
    traced on their own (graphs, their inputs guarded), the rebuild is exact and converts back to the same IR."""
    from transformers import FSMTConfig, FSMTModel

    from common.opaque import traced_alone

    config = FSMTConfig(langs=["en", "de"], src_vocab_size=64, tgt_vocab_size=64, d_model=16, encoder_layers=1,
                        decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                        decoder_ffn_dim=32, max_position_embeddings=32, use_cache=False)
    torch.manual_seed(0)
    model = FSMTModel(config).eval()
    ids, decoder_ids = torch.randint(3, 64, (1, 6)), torch.randint(3, 64, (1, 5))
    kwargs = {"decoder_input_ids": decoder_ids}
    ir = torch2ir.convert(model, (ids,), kwargs, opaque="auto")
    assert [(p, c) for p, c, _ in ir.capture.opaque] == [("", "transformers.models.fsmt.modeling_fsmt.FSMTModel")]
    assert traced_alone(ir) == ["encoder", "decoder"] and ir["encoder.layers.0"].type == "module"
    ir.save(tmp_path / "m.ir.json")
    rebuilt = ir2torch.convert(IR.load(tmp_path / "m.ir.json"), model.state_dict(),
                               allow=["transformers.models.fsmt.modeling_fsmt.FSMTModel"])
    expected, got = model(ids, **kwargs), rebuilt(ids, **kwargs)
    assert torch.equal(expected.last_hidden_state, got.last_hidden_state)
    assert torch2ir.convert(rebuilt, (ids,), kwargs, opaque="auto") == ir


def test_a_child_traced_alone_carries_its_train_mode_note_into_its_rebuild() -> None:
    """FastSpeech2-Conformer's own forward does not trace (an opaque root); its duration predictor, traced on its
    own, rounds its durations in eval mode only: the note of its conversion stays on it and its rebuild carries it,
    so converting the rebuild again gives the same IR (the loop closes)."""
    from transformers import FastSpeech2ConformerConfig, FastSpeech2ConformerModel

    from torch2ir.train.passes import COMPUTATIONS_NOTE

    config = FastSpeech2ConformerConfig(hidden_size=32, vocab_size=64, encoder_layers=1, decoder_layers=1,
                                        encoder_linear_units=64, decoder_linear_units=64,
                                        encoder_num_attention_heads=2, decoder_num_attention_heads=2,
                                        speech_decoder_postnet_layers=2, speech_decoder_postnet_units=32,
                                        duration_predictor_channels=32, pitch_predictor_layers=2,
                                        pitch_predictor_channels=32, energy_predictor_channels=32)
    torch.manual_seed(0)
    model = FastSpeech2ConformerModel(config).eval()
    ids = torch.randint(1, 64, (1, 8))
    ir = torch2ir.convert(model, (), {"input_ids": ids}, opaque="auto")
    root = "transformers.models.fastspeech2_conformer.modeling_fastspeech2_conformer.FastSpeech2ConformerModel"
    assert ir.capture.opaque[0][:2] == ("", root) and "duration_predictor" in traced_alone(ir)
    assert ir["duration_predictor"].meta["train_trace"] == f"{COMPUTATIONS_NOTE}root"
    assert f"duration_predictor: {COMPUTATIONS_NOTE}root" in ir.root.meta["train_trace"]
    classes = sorted({c for _, c, _ in ir.capture.opaque})
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=classes)
    expected, got = model(input_ids=ids), rebuilt(input_ids=ids)
    assert torch.equal(expected.spectrogram, got.spectrogram)
    alone = torch2ir.convert(rebuilt.duration_predictor, *_first_call(rebuilt, "duration_predictor", ids))
    assert alone.root.meta["train_trace"] == ir["duration_predictor"].meta["train_trace"]
    assert torch2ir.convert(rebuilt, (), {"input_ids": ids}, opaque="auto") == ir


def _first_call(model: torch.nn.Module, path: str, ids: torch.Tensor) -> tuple[tuple, dict]:
    """The positional and keyword arguments of the first call of ``model``'s module at ``path``."""
    seen: list[tuple[tuple, dict]] = []
    hook = model.get_submodule(path).register_forward_pre_hook(
        lambda _, a, k: seen.append((a, k)) and None, with_kwargs=True)
    try:
        model(input_ids=ids)
    finally:
        hook.remove()
    return seen[0]
