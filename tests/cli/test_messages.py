"""Messages a newcomer meets: hints that fit the failure, short key lists, closed pipes, typos in --config,
checkpoint names given to --hf, and torch's own trace dumps kept off stderr (shown with --debug)."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import torch2ir
from common.errors import ConversionError
from ir2torch.cli import main as ir2torch_main
from tests.cli.helpers import REPO, _env, command, explain, run, run_all
from tests.models.zoo import ConvNet
from torch2ir.cli import main as torch2ir_main

MODELS = textwrap.dedent('''
    import torch
    import torch.nn.functional as F
    from torch import nn

    class ValueBranch(nn.Module):  # Python control flow on a tensor's value: torch.export cannot trace it
        def forward(self, x):
            return x + 1 if x.sum() > 0 else x - 1

    class TrainBranch(nn.Module):  # traces in eval mode; the train-mode trace fails on the value branch
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 8)

        def forward(self, x):
            x = F.dropout(self.lin(x), 0.1, self.training)
            if self.training and x.sum() > 0:
                x = x * 2
            return x
''')


class _CustomOut(nn.Module):
    def forward(self, x: torch.Tensor) -> object:
        out = type("Out", (), {})()
        out.x = x
        return out


class _ValueBranch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1 if x.sum() > 0 else x - 1


def test_export_hints_fit_the_failure():
    wrong = torch.randn(2, 2, 16, 16)  # 2 channels where the first conv takes 3
    model = ConvNet().eval()
    with pytest.raises(RuntimeError, match="channels"):
        model(wrong)  # eager PyTorch fails the same way: the inputs are wrong, not the model
    with pytest.raises(ConversionError) as shape:
        torch2ir.convert(model, (wrong,))
    assert "torch.cond" not in shape.value.hint and "pytree" not in shape.value.hint
    assert "shapes, dtypes" in shape.value.hint and "channels" in shape.value.message
    branch = _ValueBranch()
    assert torch.equal(branch(torch.ones(2)), torch.full((2,), 2.0))  # runs eagerly; only tracing fails
    with pytest.raises(ConversionError) as value:
        torch2ir.convert(branch, (torch.ones(2),))
    assert "torch.cond" in value.value.hint
    with pytest.raises(ConversionError) as custom:
        torch2ir.convert(_CustomOut(), (torch.ones(2),))
    assert "pytree" in custom.value.hint and "torch.cond" not in custom.value.hint


def test_torch_trace_dumps_stay_off_stderr_unless_debug(tmp_path):
    (tmp_path / "dumpy.py").write_text(MODELS)
    base = ["--import-path", str(tmp_path), "-i", "2x8", "-o"]
    runs = run_all({
        "fail": command("torch2ir", "convert", "dumpy:ValueBranch", *base, tmp_path / "a.json"),
        "fail_debug": command("torch2ir", "convert", "dumpy:ValueBranch", *base, tmp_path / "b.json", "--debug"),
        "fallback": command("torch2ir", "convert", "dumpy:TrainBranch", *base, tmp_path / "c.json"),
        "fallback_debug": command("torch2ir", "convert", "dumpy:TrainBranch", *base, tmp_path / "d.json", "--debug"),
    })
    fail = runs["fail"]
    assert fail.returncode == 2 and len(fail.stderr.strip().splitlines()) == 1, explain(fail)
    assert "torch.cond" in fail.stderr
    assert runs["fallback"].returncode == 0 and runs["fallback"].stderr == "", explain(runs["fallback"])
    for name in ("fail_debug", "fallback_debug"):  # the dumps are logged under --debug, not lost
        assert "def forward(" in runs[name].stderr and "[stderr]" in runs[name].stderr, explain(runs[name])
    assert runs["fallback_debug"].returncode == 0


def test_torch_logs_go_to_the_debug_logger(caplog):
    from torch2ir.frontend.logs import torch_logs_to_debug

    torch_logger = logging.getLogger("torch._subclasses.fake_tensor")
    handlers = list(logging.getLogger("torch").handlers)
    with caplog.at_level(logging.DEBUG, logger="torch2ir"), torch_logs_to_debug():
        torch_logger.error("fake tensor traceback")
        print("partial graph", file=sys.stderr)
    assert logging.getLogger("torch").handlers == handlers
    messages = [r.getMessage() for r in caplog.records if r.name == "torch2ir.torch"]
    assert any("fake tensor traceback" in m for m in messages) and any("partial graph" in m for m in messages)


def test_verify_with_the_wrong_model_summarises_the_keys(tmp_path, capsys):
    ir = tmp_path / "convnet.ir.json"
    state = tmp_path / "convnet.safetensors"
    spec = ["-i", "2x3x16x16", "--import-path", str(REPO)]
    assert torch2ir_main(["convert", "tests.models.zoo:ConvNet", *spec, "-o", str(ir), "--state", str(state),
                          "-q"]) == 0
    capsys.readouterr()
    wrong = ["verify", str(ir), "--model", "tests.models.zoo:NestedContainers", *spec, "-q"]
    for extra in ([], ["--state", str(state)]):
        assert ir2torch_main([*wrong, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and len(err) < 600, err
        assert "strict=False" not in err and "--model and --config" in err
        assert "more)" in err and "missing" in err, err


def test_a_closed_stdout_pipe_is_not_an_error(tmp_path):
    model = ConvNet().eval()
    path = torch2ir.convert(model, (torch.randn(2, 3, 16, 16),)).save(tmp_path / "convnet.ir.json")
    # argparse's --help ignores a failed write itself (exit 0); the commands' own output exits 141, like `yes | head`
    for cmd, codes in ((command("ir2torch", "show", path), {141}), (command("torch2ir", "--help"), {0, 141})):
        proc = subprocess.Popen(cmd, cwd=REPO, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdout.close()  # the reader (`| head`) is gone before the command writes
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) in codes, (cmd, err)
        assert "BrokenPipeError" not in err and "Traceback" not in err and "error" not in err, err


def test_config_typos_and_checkpoint_names_are_refused_with_what_to_do(tmp_path, capsys):
    out = ["-i", "2x8:int64", "-o", "never.json", "--meta", "-q"]
    assert torch2ir_main(["convert", "bert", "--hf", "--config", '{"num_hiden_layers": 2}', *out]) == 2
    err = capsys.readouterr().err
    assert "'num_hiden_layers' is not known to BertConfig" in err and "did you mean num_hidden_layers" in err
    assert torch2ir_main(["convert", "bert-base-uncased", "--hf", *out]) == 2
    err = capsys.readouterr().err
    assert "--hf takes a model type" in err and "never downloads or loads weights" in err
    assert "did you mean bert?" in err and err.count("\n") == 1
    # fields the config class consumes under another name are accepted, and take effect
    accepted = run(command("torch2ir", "convert", "llama", "--hf", "--meta", "-i", "1x4:int64", "-o",
                           tmp_path / "llama.ir.json", "--config", '{"num_hidden_layers": 1, "hidden_size": 16, '
                           '"intermediate_size": 16, "num_attention_heads": 2, "num_key_value_heads": 1, '
                           '"vocab_size": 20, "rope_theta": 500.0}', "-q"))
    assert accepted.returncode == 0 and "rope_theta" not in accepted.stderr, explain(accepted)


def test_a_returned_kv_cache_lowers_as_its_tensors_and_the_module_level_ir_points_to_generation():
    """transformers' DynamicCache is an allow-listed pytree node (common.caches): the FlatIR returns it, exact;
    the module-level IR, whose callers would unpack it by position, refuses it and names convert_for_generation."""
    from transformers import LlamaConfig, LlamaForCausalLM

    import ir2torch

    config = LlamaConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=50)
    assert config.use_cache  # transformers' default: the forward returns a DynamicCache
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 50, (1, 8))
    expected = model(ids)
    got = ir2torch.convert(torch2ir.lower(model, (ids,)), model.state_dict())(ids)
    assert torch.equal(got.logits, expected.logits)
    assert type(got.past_key_values).__name__ == "DynamicCache"
    assert torch.equal(got.past_key_values.layers[0].keys, expected.past_key_values.layers[0].keys)
    with pytest.raises(ConversionError) as cached:
        torch2ir.convert(model, (ids,))
    assert "convert_for_generation" in cached.value.hint and "DynamicCache" in cached.value.message


@pytest.mark.parametrize("argv, close, command", [
    (["show", "x.ir.json", "--depht", "2"], "--depth", "ir2torch show"),
    (["verify", "x.ir.json", "--model", "m:f", "--stat", "w.safetensors"], "--state", "ir2torch verify"),
])
def test_option_typos_get_the_closest_option_and_the_commands_help(capsys, argv, close, command):
    assert ir2torch_main(argv) == 2
    err = capsys.readouterr().err
    assert f"(did you mean {close}?)" in err and f"see {command} --help" in err, err


def test_options_are_never_abbreviated(capsys):
    """``--dept`` is a typo of ``--depth``, not an abbreviation: argparse would take it as one silently."""
    assert ir2torch_main(["show", "x.ir.json", "--dept", "2"]) == 2
    assert "unrecognized arguments: --dept (did you mean --depth?)" in capsys.readouterr().err
    assert torch2ir_main(["convert", "m:f", "-i", "2x8", "--out", "x.ir.json"]) == 2
    assert "unrecognized arguments: --out (did you mean --output?)" in capsys.readouterr().err
    assert torch2ir_main(["convert", "m:f", "-i", "2x8", "--ouput", "x.ir.json"]) == 2  # not "-o is missing"
    assert "unrecognized arguments: --ouput (did you mean --output?)" in capsys.readouterr().err


def test_the_diff_summary_gives_every_count_its_unit():
    from ir2torch.cli.commands import diff_summary

    lines = ["- layer.3", "+ layer.4", "+ layer.5", "~ root: nodes.add.args[1]: 1 -> 2", "~ root: meta.class: A -> B",
             "~ layer.0: data.eps: 1e-05 -> 0.001"]
    assert diff_summary(lines, "a.ir.json", "b.ir.json") == (
        "6 differences: 1 entry only in a.ir.json, 2 entries only in b.ir.json, 3 changed fields in 2 places")
    assert diff_summary(["~ root: x: 1 -> 2"], "a", "b") == (
        "1 difference: 0 entries only in a, 0 entries only in b, 1 changed field in 1 place")
