"""Instances of a shared body are rebuilt from the first one (``ir2torch.rebuild.instances``) and are exactly what a
rebuild of each from the expanded IR gives: outputs, graphs, code, independence, copies, folds, errors.

Real models from ``transformers`` (random weights), saved and loaded, so that their alike layers come back as
unexpanded instances of shared bodies; each is compared with the same IR expanded (every implementation built on
its own).
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from torch import fx

import ir2torch
import torch2ir
from common import IR
from common.errors import ExecutionError
from ir2torch.rebuild.instances import template_key
from tests.helpers import same_outputs
from tests.real.corpus import CORPUS


def _saved(name: str, tmp_path):
    arch = next(a for a in CORPUS if a.name == name)
    model = arch.build().eval()
    args, kwargs = arch.inputs()
    ir = torch2ir.convert(model, args, kwargs)
    path = ir.save(tmp_path / f"{name}.ir.json")
    loaded = IR.load(path)
    expanded = IR.load(path)
    for key in expanded:  # the same IR, every implementation its own graph (reading it expands an instance)
        assert expanded[key].graph is not None and expanded[key].shared_body is None
    return model, args, kwargs, loaded, expanded


def _double_the_output(gm: fx.GraphModule) -> None:
    """Edit ``gm``'s graph (its first output doubled) and recompile it, as a user's fx pass would."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    value = out.args[0][0] if isinstance(out.args[0], (tuple, list)) else out.args[0]
    with gm.graph.inserting_before(out):
        doubled = gm.graph.call_function(torch.mul, (value, 2.0))
    out.replace_input_with(value, doubled)
    gm.recompile()


@pytest.mark.parametrize("name", ["llama", "bert"])
def test_instances_rebuild_exactly_as_each_built_on_its_own(name, tmp_path) -> None:
    model, args, kwargs, loaded, expanded = _saved(name, tmp_path)
    instances = [k for k, impl in loaded.items() if impl.shared_body is not None and impl.shared_body.node_count]
    keys = {template_key(loaded[k], True) for k in instances}
    assert len(instances) > len(keys) >= 1  # some key has several instances: they come from a template
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    alone = ir2torch.convert(expanded, model.state_dict())
    with torch.no_grad():
        expected = model(*args, **kwargs)
        assert same_outputs(rebuilt(*args, **kwargs), expected)
        assert same_outputs(alone(*args, **kwargs), expected)
    for key in instances:
        mine, theirs = rebuilt.get_submodule(key), alone.get_submodule(key)
        assert type(mine).__name__ == type(theirs).__name__
        assert mine.code == theirs.code
        assert str(mine.graph) == str(theirs.graph)
        assert [n.meta.get("ir_node") for n in mine.graph.nodes] == [n.meta.get("ir_node") for n in theirs.graph.nodes]
        assert mine.graph.owning_module is mine
        assert dict(mine.named_parameters()).keys() == dict(theirs.named_parameters()).keys()
        ours, alone_convention = mine.graph._codegen, theirs.graph._codegen  # calling conventions: equal, each its own
        assert type(ours) is type(alone_convention) and ours.pytree_info == alone_convention.pytree_info
        assert getattr(ours, "parameters", None) == getattr(alone_convention, "parameters", None)
        assert inspect.signature(mine.forward) == inspect.signature(theirs.forward)
    conventions = [rebuilt.get_submodule(key).graph._codegen for key in instances]
    assert len({id(c) for c in conventions}) == len(conventions)


def test_each_instance_has_its_own_graph_made_when_first_read(tmp_path) -> None:
    model, args, kwargs, loaded, _ = _saved("llama", tmp_path)
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    first, second = rebuilt.model.layers[0], rebuilt.model.layers[1]
    assert "_graph" not in second.__dict__  # not copied yet (white box: the copy is made on first read)
    assert type(first).forward.__code__ is type(second).forward.__code__
    assert first.graph is not second.graph
    assert "_graph" in second.__dict__ and second.graph is second.graph
    assert {id(n) for n in first.graph.nodes}.isdisjoint(id(n) for n in second.graph.nodes)

    # changing one instance's graph and recompiling changes that instance only, as in any GraphModule
    _double_the_output(second)
    assert "torch.mul" in second.code and "torch.mul" not in first.code
    with torch.no_grad():
        changed = rebuilt(*args, **kwargs)
    assert not same_outputs(changed, model(*args, **kwargs))


def test_changing_the_first_instance_before_another_is_read_changes_only_the_first(tmp_path) -> None:
    model, _, _, loaded, expanded = _saved("llama", tmp_path)
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    alone = ir2torch.convert(expanded, model.state_dict())
    first, second = rebuilt.model.layers[0], rebuilt.model.layers[1]
    assert "_graph" not in second.__dict__
    _double_the_output(first)
    # the second layer's graph, copied only now, is the one its code was generated from
    assert str(second.graph) == str(alone.model.layers[1].graph)
    second.recompile()
    assert second.code == alone.model.layers[1].code and "torch.mul" not in second.code


def test_copies_of_instances_whose_graph_was_never_read(tmp_path) -> None:
    model, args, kwargs, loaded, _ = _saved("bert", tmp_path)
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    layer = rebuilt.encoder.layer[1]
    assert "_graph" not in layer.__dict__
    copied = copy.deepcopy(rebuilt)
    assert copied.encoder.layer[1].graph is not layer.graph
    assert str(copied.encoder.layer[1].graph) == str(layer.graph)
    with torch.no_grad():
        assert same_outputs(copied(*args, **kwargs), model(*args, **kwargs))


def test_an_instance_names_itself_in_errors(tmp_path) -> None:
    model, args, kwargs, loaded, _ = _saved("llama", tmp_path)
    rebuilt = ir2torch.convert(loaded, model.state_dict(), guard_inputs=False)
    with torch.no_grad():
        rebuilt.model.layers[1].self_attn.o_proj.weight = torch.nn.Parameter(torch.zeros(3, 3))
        with pytest.raises(ExecutionError, match="implementation 'model.layers.1.self_attn'"):
            rebuilt(*args, **kwargs)


def test_fold_plans_are_shared_and_each_instance_folds_its_own_values(tmp_path) -> None:
    model, args, kwargs, loaded, expanded = _saved("bert", tmp_path)
    rebuilt = ir2torch.convert(loaded, model.state_dict())
    alone = ir2torch.convert(expanded, model.state_dict())
    folded = [(k, m) for k, m in rebuilt.named_modules() if "_ir_fold" in m.__dict__]
    folded_alone = {k for k, m in alone.named_modules() if "_ir_fold" in m.__dict__}
    assert {k for k, _ in folded} == folded_alone
    assert isinstance(rebuilt, fx.GraphModule)
    with torch.no_grad():
        assert same_outputs(rebuilt(*args, **kwargs), model(*args, **kwargs))
        assert same_outputs(rebuilt(*args, **kwargs), model(*args, **kwargs))
