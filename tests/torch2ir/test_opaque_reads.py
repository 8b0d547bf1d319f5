"""What an opaque leaf's code reads of a child traced on its own (``common.opaque_reads``): a plain scalar attribute
(Cosmos3-Edge's ``projector.spatial_merge_size``), transformers' ``get_input_embeddings()`` returning a module
inside the child and a handled leaf inside it called directly (its ``embed_tokens``) keep the child a graph, the
reads carried to the rebuilt child; any other use, or one the rebuild could not repeat identically, keeps it opaque
as before."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import ir2torch
import torch2ir
from common import IR
from common.errors import IRFormatError
from common.opaque_reads import READS_KEY

modeling_utils = pytest.importorskip("transformers.modeling_utils")
EmbeddingAccessMixin = modeling_utils.EmbeddingAccessMixin


class Text(EmbeddingAccessMixin, nn.Module):
    """A language model whose forward takes embeddings the caller made with its own embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(10, 4)
        self.lin = nn.Linear(4, 4)

    def forward(self, input_ids: torch.Tensor | None = None, inputs_embeds: torch.Tensor | None = None) -> torch.Tensor:
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        return torch.tanh(self.lin(inputs_embeds))


class Projector(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.merge = 2
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class Root(EmbeddingAccessMixin, nn.Module):
    """Its own forward branches on data (an opaque root); it embeds the ids with the language model's embedding,
    found by ``self.get_input_embeddings()``, and reads the projector's int attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.language_model = Text()
        self.projector = Projector()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        embeds = self.get_input_embeddings()(ids)
        if ids.sum() > 10:
            embeds = embeds * 2
        out = self.language_model(inputs_embeds=embeds)
        return self.projector(out).reshape(-1, self.projector.merge, 4)


IDS = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]])
LOW = torch.tensor([[0, 1, 0, 1], [1, 0, 1, 0]])  # the other branch of the root's code
ALLOW = [f"{__name__}.Root"]


def _model(cls: type[nn.Module] = Root) -> nn.Module:
    torch.manual_seed(0)
    return cls().eval()


def _reasons(ir: IR) -> dict[str, str]:
    return {p: r for p, _, r in ir.capture.opaque}


def test_children_read_by_the_opaque_root_are_traced_and_carry_the_reads() -> None:
    model = _model()
    ir = torch2ir.convert(model, (IDS,), opaque="auto")
    assert list(_reasons(ir)) == [""]  # before: language_model and projector opaque too
    assert ir["language_model"].type == ir["projector"].type == "module"
    assert ir["language_model"].meta[READS_KEY] == {"modules": {"get_input_embeddings": "embed_tokens"}}
    assert ir["projector"].meta[READS_KEY] == {"attributes": {"merge": 2}}
    assert ir["language_model.embed_tokens"].type == "embedding"
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=ALLOW)
    assert rebuilt.language_model.get_input_embeddings() is rebuilt.language_model.embed_tokens
    assert rebuilt.get_input_embeddings() is rebuilt.language_model.embed_tokens
    assert rebuilt.projector.merge == 2
    for ids in (IDS, LOW):
        assert torch.equal(rebuilt(ids), model(ids))
    # through a file, and deep copies (fx's copy drops other attributes) keep the reads
    twin = copy.deepcopy(rebuilt)
    assert twin.projector.merge == 2 and twin.language_model.get_input_embeddings() is twin.language_model.embed_tokens
    assert torch.equal(twin(LOW), model(LOW))


def test_gradients_and_a_file_round_trip(tmp_path) -> None:
    model = _model()
    ir = IR.load(torch2ir.convert(model, (IDS,), opaque="auto").save(tmp_path / "ir.json"))
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=ALLOW)
    model.train()
    rebuilt.train()
    for ids in (IDS, LOW):
        model.zero_grad()
        rebuilt.zero_grad()
        model(ids).square().sum().backward()
        rebuilt(ids).square().sum().backward()
        grads = {n: p.grad for n, p in rebuilt.named_parameters()}
        for name, p in model.named_parameters():
            assert torch.equal(grads[name], p.grad), name


def test_converting_the_rebuild_gives_the_same_ir() -> None:
    model = _model()
    ir = torch2ir.convert(model, (IDS,), opaque="auto")
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=ALLOW)
    assert torch2ir.convert(rebuilt, (IDS,), opaque="auto") == ir


class OwnAccessor(Text):
    """The same method, but its own source: not a reviewed one."""

    def get_input_embeddings(self) -> nn.Module:
        return self.embed_tokens


class Counting(Projector):
    """Its own forward changes the attribute the root reads: a constant would not follow it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.merge = 2
        return self.lin(x)


class Listed(Projector):
    def __init__(self) -> None:
        super().__init__()
        self.merge = [2]  # a list: the opaque code could change it in place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


class Other(Root):
    def __init__(self, text: type[nn.Module] = OwnAccessor, projector: type[nn.Module] = Counting) -> None:
        super().__init__()
        self.language_model = text()
        self.projector = projector()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        embeds = self.get_input_embeddings()(ids)
        if ids.sum() > 10:
            embeds = embeds * 2
        merge = self.projector.merge if isinstance(self.projector.merge, int) else self.projector.merge[0]
        return self.projector(self.language_model(inputs_embeds=embeds)).reshape(-1, merge, 4)


class Peeks(Root):
    """Reads the reviewed method without calling it, and a property of the language model."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        assert hasattr(self.language_model, "get_input_embeddings")
        embeds = self.language_model.embed_tokens(ids)
        if ids.sum() > 10:
            embeds = embeds * 2
        return self.projector(self.language_model(inputs_embeds=embeds))


class Width(Root):
    """Calls a handled leaf inside the projector directly: rebuilt as its own class, so the projector stays a graph
    (a graph module inside a child called directly keeps the child opaque: test_opaque_children.py's ``Reads``)."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        embeds = self.get_input_embeddings()(ids)
        if ids.sum() > 10:
            embeds = embeds * 2
        return self.projector(self.language_model(inputs_embeds=embeds)) + self.projector.lin(embeds)


@pytest.mark.parametrize(("cls", "opaque"), [
    (Other, {"language_model": "reads language_model.get_input_embeddings",
             "projector": "reads projector.merge, which its own code sets"}),
    (Peeks, {"language_model": "reads language_model.get_input_embeddings without calling it"}),
])
def test_uses_a_rebuild_could_not_repeat_keep_the_child_opaque(cls: type[nn.Module], opaque: dict[str, str]) -> None:
    model = _model(cls)
    ir = torch2ir.convert(model, (IDS,), opaque="auto")
    reasons = _reasons(ir)
    assert set(reasons) == {"", *opaque}
    for path, why in opaque.items():
        assert why in reasons[path] and ir[path].type == "opaque"
    allow = [f"{__name__}.{cls.__name__}", *(f"{__name__}.{type(model.get_submodule(p)).__name__}" for p in opaque)]
    rebuilt = ir2torch.convert(ir, model.state_dict(), allow=allow)
    for ids in (IDS, LOW):
        assert torch.equal(rebuilt(ids), model(ids))


class Named(Projector):
    def __init__(self) -> None:
        super().__init__()
        self.code = 3  # a name a module rebuilt from its graph (fx's GraphModule) has already


class ReadsCode(Root):
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out = super().forward(ids)
        return out * self.projector.code if ids.sum() > 10 else out


def test_a_list_attribute_keeps_the_child_opaque_a_handled_leaf_called_directly_does_not() -> None:
    torch.manual_seed(0)
    model = Other(Text, Listed).eval()
    reasons = _reasons(torch2ir.convert(model, (IDS,), opaque="auto"))
    assert set(reasons) == {"", "projector"} and "reads projector.merge" in reasons["projector"]
    torch.manual_seed(0)
    model = ReadsCode().eval()
    model.projector = Named()
    reasons = _reasons(torch2ir.convert(model, (IDS,), opaque="auto"))
    assert set(reasons) == {"", "projector"} and "reads projector.code" in reasons["projector"]
    reasons = _reasons(torch2ir.convert(_model(Width), (IDS,), opaque="auto"))
    assert set(reasons) == {""}


@pytest.mark.parametrize(("record", "message"), [
    ({"attributes": {"forward": 1}}, "may not be set"),
    ({"attributes": {"lin": 1}}, "already has"),
    ({"attributes": {"merge": [2]}}, "not a plain scalar"),
    ({"modules": {"embeds": "nowhere"}}, "no submodule"),
    ({"modules": {"embeds": "lin.__class__"}}, "not a submodule path"),
    ({"other": {}}, "must be a dict"),
])
def test_a_malformed_record_is_refused(record: dict, message: str) -> None:
    model = _model()
    ir = torch2ir.convert(model, (IDS,), opaque="auto")
    ir["projector"].meta[READS_KEY] = record
    with pytest.raises(IRFormatError, match=message):
        ir2torch.convert(ir, model.state_dict(), allow=ALLOW)
