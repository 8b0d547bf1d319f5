"""Mutated documents: load, rebuild (meta and CPU) and one forward give only IRErrors, never anything else.

Each example takes a valid saved IR or FlatIR document and applies one to three mutations at random
places: replace a value (numbers far out of range, strings that are code, names of module attributes,
deeply nested lists, tagged values with bad payloads, values taken from elsewhere in the document),
delete a key, rename a key, duplicate or drop a list item. ``HYPOTHESIS_PROFILE=long`` runs ten times
as many examples.
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from tests.conftest import examples
from tests.security.corpus import Document, attempt, documents, write

MARKER = "FUZZ_MARKER"
_SMALL = ("kwargs", "shared_sequential", "buffers", "no_grad_inside", "dict_output", "tied_embedding", "per_call",
          "repeated")


@cache
def _corpus() -> tuple[Document, ...]:
    return tuple(d for d in documents(tempfile.mkdtemp(prefix="fuzz-corpus-")) if d.name in _SMALL)


def _places(value: Any, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out.extend(_places(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_places(v, (*path, i)))
    return out


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


_CODE = f"x=open('{MARKER}','w')"
_STRINGS = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["forward", "training", "__init__", "self", "node_for_adding", "root", "aten.__init__",
                     "aten.name", "os.system", "cuda", "disk", _CODE, f"a\"){_CODE}#", "int_oo", "", "."]),
)
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.sampled_from([10**400, -1, 0, 2**63, 10**12]),
    st.floats(allow_nan=False, allow_infinity=False), _STRINGS,
)
_TAGGED = st.sampled_from([
    {"$complex": [10**400, 0]}, {"$device": "cuda"}, {"$device": "disk"}, {"$dtype": "float32"}, {"$dtype": "no"},
    {"$tuple": [1, 2]}, {"$ref": "x"}, {"$ref": "output", "index": 7}, {"$slice": [0, "a", None]},
    {"$graph": {"name": "g", "type": "module"}}, {"$float": "inf"}, {"$training": True}, {"$dict": [[[1], 2]]},
    {"$unknown": 1}, {"$size": [2**64]}, {"$size": [-1]}, {"$size": "3"}, {"$size": [True]},
]).map(copy.deepcopy)  # drawn objects are shared between examples; mutations must not reach them
_VALUES = st.one_of(_SCALARS, _TAGGED, st.integers(300, 700).map(_nested),
                    st.lists(_SCALARS, max_size=4), st.dictionaries(st.text(max_size=6), _SCALARS, max_size=3))


def _copied(value: Any) -> Any:
    """A deep copy of a JSON value; through the C JSON codec, since ``copy.deepcopy`` takes two Python frames
    per level and overflows the stack on the 700-deep nestings planted by an earlier mutation."""
    return json.loads(json.dumps(value))


def _mutate(doc: Any, data: st.DataObject) -> Any:
    places = _places(doc)
    path = data.draw(st.sampled_from(places[1:]))
    holder = doc
    for part in path[:-1]:
        holder = holder[part]
    last = path[-1]
    action = data.draw(st.sampled_from(["replace", "replace", "replace", "copy", "delete", "rename", "dup"]))
    if action == "replace":
        holder[last] = data.draw(_VALUES)
    elif action == "copy":  # a value from elsewhere in the same document
        source = data.draw(st.sampled_from(places))
        value = doc
        for part in source:
            value = value[part]
        holder[last] = _copied(value)
    elif action == "delete":
        del holder[last]
    elif action == "rename" and isinstance(holder, dict):
        new = data.draw(_STRINGS)
        holder[new] = holder.pop(last)
    elif action == "dup" and isinstance(holder, list):
        holder.insert(last, _copied(holder[last]))
    return doc


@settings(max_examples=examples(1000))
@given(data=st.data())
def test_mutated_documents_give_only_irerrors(data: st.DataObject) -> None:
    document = data.draw(st.sampled_from(_corpus()), label="document")
    doc = copy.deepcopy(document.doc)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        doc = _mutate(doc, data)
    folder = Path(tempfile.mkdtemp(prefix="fuzz-"))
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        path = write(document, json.loads(json.dumps(doc)), folder)
        outcome = attempt(path, document)  # any exception other than an IRError fails the test
        event(outcome)
        assert outcome == "ok" or outcome.endswith("Error")
        assert not (folder / MARKER).exists(), "code from the document ran"
    finally:
        os.chdir(cwd)
