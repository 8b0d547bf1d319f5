"""Property tests: on random IRs and random models of the strategies (common.testing), a rewrite followed by
its inverse gives back an equal IR."""

from __future__ import annotations

import copy

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ir2torch
import torch2ir
from common.rewrite import NodeRef, insert_after, remove, replace
from common.rewrite.core import all_graphs
from common.testing import models_and_inputs
from common.testing.strategies import irs
from common.verify import verify
from tests.conftest import examples

_SETTINGS = dict(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], deadline=None)


def _nodes(ir):
    return [NodeRef(key, name, variant) for key, variant, graph in all_graphs(ir)
            for name, attrs in graph.graph.nodes(data=True) if attrs["type"] != "output"]


@settings(max_examples=examples(100), **_SETTINGS)
@given(irs(), st.data())
def test_insert_after_then_remove_gives_back_the_ir(ir, data):
    ref = data.draw(st.sampled_from(_nodes(ir)))
    before = copy.deepcopy(ir)
    new_ir, _ = insert_after(ir, None, ref, type="fakeq", data={"bits": 8}, record=False)
    assert new_ir != ir and ir == before  # the input is never changed
    graph = new_ir[ref.implementation].graphs()[ref.variant]
    (added,) = set(graph.nodes) - set(ir[ref.implementation].graphs()[ref.variant].nodes)
    back, _ = remove(new_ir, None, NodeRef(ref.implementation, added, ref.variant))
    assert back == ir


@settings(max_examples=examples(100), **_SETTINGS)
@given(irs(), st.data())
def test_replace_by_key_then_back_gives_back_the_ir(ir, data):
    # replace makes leaves (built by a builder): the inverse can give back a leaf, not a graph
    leaves = [k for k in ir if k != "root" and not ir[k].nodes and not any(c.startswith(k + ".") for c in ir)]
    if not leaves:
        return
    key = data.draw(st.sampled_from(leaves))
    old = ir[key]
    new_ir, _ = replace(ir, None, key, type="other_type", data={"x": 1}, meta={}, record=False)
    assert new_ir[key].type == "other_type"
    back, _ = replace(new_ir, None, key, type=old.type, data=old.data, meta=old.meta, record=False)
    assert back == ir


@settings(max_examples=examples(15), **_SETTINGS)
@given(models_and_inputs(), st.data())
def test_on_random_models_insert_then_remove_is_exact(case, data):
    model, args, kwargs = case
    ir = torch2ir.convert(model, args, kwargs)
    state = model.state_dict()
    calls = [ref for ref in _nodes(ir) if ir[ref.implementation].graphs()[ref.variant].node(ref.node)["type"]
             not in ("input", "output", "function", "get_attr")]
    if not calls:
        return
    ref = data.draw(st.sampled_from(calls))
    new_ir, new_state = insert_after(ir, state, ref, type="identity", record=False)
    rebuilt = ir2torch.convert(new_ir, new_state)
    report = verify(model, rebuilt, args, kwargs)
    assert report.ok and report.max_abs_diff == 0.0, report
    graph = new_ir[ref.implementation].graphs()[ref.variant]
    (added,) = set(graph.nodes) - set(ir[ref.implementation].graphs()[ref.variant].nodes)
    back, back_state = remove(new_ir, new_state, NodeRef(ref.implementation, added, ref.variant))
    assert back == ir and back_state.keys() == new_state.keys()
