"""A higher-order op's body (``torch.cond``'s branches, a scan's step) is written as a graph-only implementation
(``torch2ir.hierarchy.graphs.flat_implementation``): its runtime assertions name the IR node they check, as a
module's graph does, not export's model-wide node name (which shifts when anything before it changes, so converting
a rebuild again gave another message: GLM-5-Next's indexer)."""

from __future__ import annotations

import torch
from torch import fx

from torch2ir.hierarchy.graphs import ASSERT_SCALAR, flat_implementation


def _body(exported: str) -> fx.GraphModule:
    graph = fx.Graph()
    x = graph.placeholder("arg0_1")
    item = graph.call_function(torch.ops.aten._local_scalar_dense.default, (x,))
    ge = graph.call_function(torch.ops.aten.ge.Scalar, (item, 0))
    ge.name = exported
    graph.call_function(torch.ops.aten._assert_scalar.default,
                        (ge, f"Runtime assertion failed for expression u0 >= 0 on node '{exported}'"))
    graph.output((x,))
    return fx.GraphModule(torch.nn.Module(), graph)


def test_a_bodys_assertion_names_the_node_it_reads_whatever_export_called_it() -> None:
    messages = []
    for exported in ("ge_7", "ge_14"):  # the same body, export's counter elsewhere in the model
        impl = flat_implementation(_body(exported), "true_graph_0")
        (node,) = [n for n in impl.nodes if impl.node(n).get("implementation") == ASSERT_SCALAR]
        checked, message = impl.node(node)["args"]
        assert message == f"Runtime assertion failed for expression u0 >= 0 on node '{checked.node}'"
        messages.append(message)
    assert messages[0] == messages[1] and "'ge'" in messages[0]
