"""At least 15 distinct malformed IRs, each with its specific error and a useful message."""

import pytest

from common import IR
from common import errors as E
from common.json_files import loads_json
from common.serialize import ir_from_document
from tests.seed import seed_dict


def _mutate(fn):
    doc = seed_dict()
    fn(doc)
    return doc


def _add_node(name, **fields):
    return lambda d: d["root"]["nodes"].__setitem__(name, {"name": name, **fields})


def _add_edge(src, dst, **fields):
    return lambda d: d["root"]["edges"].__setitem__((src, dst), {"src": src, "dst": dst, **fields})


def _both(*fns):
    def run(d):
        for fn in fns:
            fn(d)

    return run


CASES = [
    # (id, mutation, error class, message fragment)
    ("dangling-edge", _add_edge("_0", "ghost"), E.DanglingEdgeError, "names missing node 'ghost'"),
    ("missing-implementation", lambda d: d["root"]["nodes"]["_0"].update(implementation="1"),
     E.MissingImplementationError, "calls implementation '1', which the IR does not hold"),
    ("unknown-kind", _both(_add_node("n", type="functon"), _add_edge("input_1", "n")),
     E.UnknownNodeKindError, "did you mean 'function'"),
    ("type-mismatch", lambda d: d["0"].update(type="linear"), E.NodeTypeMismatchError,
     "has type 'custom_linear' but implementation '0' has type 'linear'"),
    ("cycle", _add_edge("output", "_0"), E.IRValidationError, "nothing may follow the output node"),
    ("graph-cycle", _both(_add_node("a", type="function", implementation="aten.relu.default"),
                          _add_node("b", type="function", implementation="aten.relu.default"),
                          _add_edge("a", "b"), _add_edge("b", "a")),
     E.CycleError, "graph has a cycle"),
    ("self-loop", _both(_add_node("a", type="function", implementation="aten.relu.default"), _add_edge("a", "a")),
     E.CycleError, "graph has a cycle"),
    ("call-cycle", lambda d: d["0"].update(nodes={
        "i": {"type": "input"}, "c": {"type": "module", "implementation": "root"}, "output": {"type": "output"}},
        edges={("i", "c"): {}, ("c", "output"): {}}),
     E.CycleError, "call each other in a cycle"),
    ("unsafe-function", _both(_add_node("f", type="function", implementation="os.system"), _add_edge("input_1", "f")),
     E.UnsafeTargetError, "'os.system' is not on the allow-list"),
    ("unknown-aten-op", _both(_add_node("f", type="function", implementation="aten.not_an_op.default"),
                              _add_edge("input_1", "f")),
     E.UnsafeTargetError, "not an ATen operator"),
    ("ref-without-edge", _both(_add_node("f", type="function", implementation="aten.add.Tensor",
                                         args=[__import__("common").Ref("input_1"), __import__("common").Ref("_0")]),
                               _add_edge("input_1", "f", slot=0)),
     E.ArgumentMismatchError, "no edge fills them"),
    ("edge-slot-not-a-ref", _both(_add_node("f", type="function", implementation="aten.add.Tensor", args=[1, 2]),
                                  _add_edge("input_1", "f", slot=0)),
     E.ArgumentMismatchError, "which is not a reference in the node's args"),
    ("positional-gap", _both(_add_node("f", type="function", implementation="aten.add.Tensor"),
                             _add_edge("input_1", "f", slot=2)),
     E.ArgumentMismatchError, "leave a gap"),
    ("edge-into-input", _add_edge("_0", "input_1"), E.IRValidationError, "flows into input node"),
    ("reserved-type", _both(lambda d: d["0"].update(type="output"),
                            lambda d: d["root"]["nodes"]["_0"].update(type="output")),
     E.IRValidationError, "implementation type 'output' is a node kind"),
    ("two-outputs", _add_node("output2", type="output"), E.IRValidationError, "2 output nodes"),
    ("get-attr-unknown", _both(_add_node("w", type="get_attr", implementation="weight"), _add_edge("w", "output")),
     E.MissingImplementationError, "not in the implementation's state"),
    ("no-type", lambda d: d["0"].pop("type"), E.IRFormatError, "missing or empty 'type'"),
    ("name-differs", lambda d: d["0"].update(name="zero"), E.IRFormatError, "differs from its key"),
    ("edge-key-mismatch", lambda d: d["root"]["edges"][("_0", "output")].update(src="input_1"),
     E.IRFormatError, "must match its key"),
    ("bad-slot", _add_edge("input_1", "output", slot=-1), E.IRFormatError, "invalid slot"),
    ("bad-state-kind", lambda d: d["0"].update(state={"weight": {"kind": "tensor", "shape": [1], "dtype": None}}),
     E.IRFormatError, "has kind 'tensor'"),
    ("nodes-wrong-type", lambda d: d["root"].update(nodes="input_1"), E.IRFormatError,
     "'nodes' must be a mapping or a list"),
]


@pytest.mark.parametrize(("mutation", "error", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_ir_raises_specific_error(mutation, error, fragment):
    doc = _mutate(mutation)
    with pytest.raises(error) as info:
        IR.from_dict(doc).validate()
    message = str(info.value)
    assert fragment in message
    assert "Hint:" in message or "implementation" in message  # names a place or says what to do
    assert type(info.value) is error or issubclass(type(info.value), error)


def test_errors_name_implementation_and_node():
    doc = _mutate(lambda d: d["root"]["nodes"]["_0"].update(implementation="1"))
    with pytest.raises(E.MissingImplementationError) as info:
        IR.from_dict(doc).validate()
    assert info.value.implementation == "root" and info.value.node == "_0"
    assert str(info.value).startswith("implementation 'root', node '_0':")


def test_there_are_at_least_15_distinct_error_cases():
    assert len({c[0] for c in CASES}) >= 15
    assert len({c[2] for c in CASES}) >= 8


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"format": "torch2ir.ir", "format_version": 1}', E.IRFormatError),
        ('{"format": "torch2ir.ir", "format_version": "1", "implementations": {}}', E.IRFormatError),
        ('{"format": "torch2ir.ir", "format_version": 1, "implementations": {}, "x": 1}', E.IRFormatError),
        ('{"format": "torch2ir.ir", "format_version": 1, "implementations": {"root": {"type": "m", '
         '"dtype": {"$dtype": "float99"}}}}', E.IRFormatError),
        ('{"format": "torch2ir.ir", "format_version": 1, "implementations": {"root": {"type": "m", '
         '"k": {"$tuple": [1], "$dict": []}}}}', E.IRFormatError),
        ('{"format": "torch2ir.ir", "format_version": 1, "implementations": {"root": {"type": "m", '
         '"k": {"$unknown": 1}}}}', E.IRFormatError),
    ],
)
def test_malformed_documents(text, error):
    with pytest.raises(error):
        ir_from_document(loads_json(text))


@pytest.mark.parametrize("seed", range(40))
def test_acyclic_agrees_with_networkx(seed):
    import random

    import networkx as nx

    from common.validate_names import acyclic

    rng = random.Random(seed)
    nodes = [f"n{i}" for i in range(rng.randint(1, 12))]
    edges = [(rng.choice(nodes), rng.choice(nodes)) for _ in range(rng.randint(0, 20))]
    successors: dict = {}
    for u, v in edges:
        successors.setdefault(u, {})[v] = None
    for n in nodes[: len(nodes) // 2]:
        successors.setdefault(n, {})
    graph = nx.DiGraph(edges)
    graph.add_nodes_from(successors)
    assert acyclic(successors) == nx.is_directed_acyclic_graph(graph)
