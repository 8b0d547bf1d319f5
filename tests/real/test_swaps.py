"""Every module of every rebuilt corpus model can be swapped for the original (#14): the rebuilt parent calls
it with the original's arguments and reads its original results.

For each non-leaf module path ``p`` rebuilt from a graph, ``rebuilt.p`` is replaced by a deep copy of
``original.p`` and the model's outputs must stay exact; the rebuilt ``forward`` shows the original's
parameter names in order. A module that cannot carry its original signature would keep data-flow arguments;
such modules are listed in ``UNSIGNED`` with the reason (none today: ALiBi Falcon's layers, given rotary
embeddings no op uses, take them as NaN stand-ins or as the rotary module's results), and the test fails when
a listed one becomes swappable or an unlisted one does not, so the list stays true.
"""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
from torch import nn
from torch.utils import _pytree as pytree

from common.errors import InputMismatchError
from tests.real.corpus import CORPUS, Arch
from tests.real.shared import converted, converters

pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes:UserWarning")

#: path -> why it keeps data-flow arguments.
UNSIGNED: dict[str, dict[str, str]] = {}


def _exact(a, b) -> bool:
    la, sa = pytree.tree_flatten(a)
    lb, sb = pytree.tree_flatten(b)
    return sa == sb and all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(la, lb, strict=True))


def _shown(original: nn.Module) -> list[str]:
    """Parameter names of the original ``forward`` as a rebuilt one shows them (``**kwargs`` items by name
    are checked separately: they depend on the call)."""
    return [p.name for p in inspect.signature(original.forward).parameters.values()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _swap(root: nn.Module, path: str, module: nn.Module) -> nn.Module:
    parent, _, name = path.rpartition(".")
    holder = root.get_submodule(parent)
    old = holder._modules[name]
    holder._modules[name] = module
    return old


@pytest.mark.parametrize("arch", CORPUS, ids=lambda a: a.name)
def test_every_rebuilt_module_can_be_swapped_for_the_original(arch: Arch):
    shared = converted(arch)  # the eval-mode model and its IR, converted once (see shared.py)
    model, ir = shared.model, shared.ir
    args, kwargs = arch.inputs()
    rebuilt = converters(arch)["rebuilder"].convert(ir, model.state_dict())
    with torch.no_grad():
        expected = model(*args, **kwargs)
    unsigned = UNSIGNED.get(arch.name, {})
    paths = [k for k, impl in ir.items()
             if k != "root" and impl.type == "module" and impl.graph.number_of_nodes()]
    swapped = []
    for path in paths:
        signed = "in_spec" in ir[path].meta
        assert signed != (path in unsigned), (path, "signed" if signed else "unsigned")
        if not signed:
            continue
        original = model.get_submodule(path)
        shown = [n for n in inspect.signature(rebuilt.get_submodule(path).forward).parameters]
        assert shown[: len(_shown(original))] == _shown(original), path
        old = _swap(rebuilt, path, copy.deepcopy(original))
        try:
            with torch.no_grad():
                assert _exact(expected, rebuilt(*args, **kwargs)), path
        finally:
            _swap(rebuilt, path, old)
        swapped.append(path)
    assert len(swapped) == len(paths) - len(unsigned)


def _marked(ir) -> dict[str, list[str]]:
    """Module path -> its input nodes marked ``same_as`` (one tensor was passed for two arguments)."""
    out: dict[str, list[str]] = {}
    for key, impl in ir.items():
        for n in impl.nodes:
            meta = impl.node(n).get("meta")
            if impl.node(n)["type"] == "input" and isinstance(meta, dict) and "same_as" in meta:
                out.setdefault(key, []).append(n)
    return out


@pytest.mark.parametrize("name", ["mobilebert", "funnel"])
def test_attention_called_with_one_tensor_for_query_and_key_refuses_two(name: str):
    """MobileBERT's and Funnel's attention modules are called with one tensor as query, key (and value): their
    graphs read it once. Called on their own with the original call's arguments they are exact; with a copy as
    the key they raise instead of ignoring it."""
    arch = next(a for a in CORPUS if a.name == name)
    shared = converted(arch)
    model, ir = shared.model, shared.ir
    rebuilt = converters(arch)["rebuilder"].convert(ir, model.state_dict())
    marked = _marked(ir)
    assert marked, "the corpus model no longer passes one tensor twice"
    args, kwargs = arch.inputs()
    for path, names in marked.items():
        calls: list[tuple] = []
        hook = model.get_submodule(path).register_forward_pre_hook(
            lambda m, a, kw, calls=calls: calls.append((a, kw)), with_kwargs=True)
        with torch.no_grad():
            model(*args, **kwargs)
        hook.remove()
        a, kw = calls[0]
        original, module = model.get_submodule(path), rebuilt.get_submodule(path)
        with torch.no_grad():
            assert _exact(module(*a, **kw), original(*a, **kw)), path
            bound = inspect.signature(original.forward).bind(*a, **kw)
            bound.arguments[names[0]] = bound.arguments[names[0]].clone()
            with pytest.raises(InputMismatchError, match="different objects"):
                module(*bound.args, **bound.kwargs)
