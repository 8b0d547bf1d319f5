"""The seed IR of docs/ir-spec.md's plain dict form, verbatim (tuple edge keys, attributes at the top level)."""

import copy


def seed_dict() -> dict:
    return copy.deepcopy(_SEED)


_SEED = {
    "root": {
        "name": "root",
        "type": "module",
        "nodes": {
            "input_1": {"name": "input_1", "type": "input", "implementation": "input"},
            "_0": {"name": "_0", "type": "custom_linear", "implementation": "0"},
            "output": {"name": "output", "type": "output", "implementation": "output"},
        },
        "edges": {
            ("input_1", "_0"): {"src": "input_1", "dst": "_0"},
            ("_0", "output"): {"src": "_0", "dst": "output"},
        },
    },
    "0": {
        "name": "0",
        "type": "custom_linear",
        "in_features": 1,
        "out_features": 2,
        "bias": True,
        "nodes": {},
        "edges": {},
    },
}
