"""A hostile value in every string field of both file formats: only an IRError comes out, nothing runs.

The fields are not listed by hand: every string a writer puts in a document (dict keys and string
values, at any depth, including the JSON inside ``in_spec``/``out_spec``) is found by walking real
saved documents, grouped by its place in the schema (implementation keys and node names folded),
and attacked once per place with payloads that would run code if they reached generated source
as an identifier, inside a quoted string, inside ``getattr(self, "...")`` or on a line of their
own. A test also checks that every key the schema code knows appears in the attacked documents,
so a field added to the schema without reaching these documents fails here.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from common import flat_schema, schema
from tests.security.corpus import Document, attempt, documents, write

MARKER = "PWNED_MARKER"
_RUN = f"open('{MARKER}','w')"  # no '.': attribute paths are split on dots before they reach source
#: One payload per syntactic context a name can land in; each is valid Python there, so it would run.
PAYLOADS = (
    f"z={_RUN}",  # the last name of a def line: a default value runs when the def executes
    f"x':{_RUN},'y",  # a key inside a '...' literal, e.g. {'key': value}
    f'x"),{_RUN},getattr(self,"y',  # inside getattr(self, "...")
    f"x={_RUN},y",  # a keyword name in a call: f(a, NAME = value)
    f"x\n{_RUN}\n",  # a line of its own
    "forward",  # a name that would shadow a module attribute
)
_SPEC_KEYS = ("in_spec", "out_spec")


def _positions(value: Any, path: tuple = ()) -> list[tuple[tuple, bool]]:
    """``(path, is_key)`` of every string in a JSON value; pytree spec strings are opened up."""
    out: list[tuple[tuple, bool]] = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append(((*path, k), True))
            out.extend(_positions(v, (*path, k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(_positions(v, (*path, i)))
        if value and all(isinstance(v, str) for v in value):
            out.append(((*path, len(value)), False))  # one more name, after the last one
    elif isinstance(value, str):
        out.append((path, False))
        if path and (path[-1] in _SPEC_KEYS or (path[-1] == "context" and "$json" in path)):
            out.extend(_positions(json.loads(value), (*path, "$json")))
    return out


def _signature(document: Document, path: tuple, is_key: bool) -> tuple:
    """The schema place of a position: implementation keys, node names and list indices folded."""
    sig: list[Any] = []
    for i, part in enumerate(path):
        before = path[i - 1] if i else None
        if isinstance(part, int) and isinstance(_at_or_none(document.doc, path[:i]), list) \
                and part == len(_at_or_none(document.doc, path[:i])):
            sig.append("+")  # a name appended to a list
        elif isinstance(part, int) or before in ("implementations", "nodes", "state", "args", "kwargs", "meta"):
            sig.append("*" if not (before in ("meta",) and part in _SPEC_KEYS) else part)
        else:
            sig.append(part)
    if document.kind == "ir" and len(path) > 1 and path[0] == "implementations" and path[1] == "root":
        sig[1] = "root"
    return (document.kind, tuple(sig), is_key)


def _plant(doc: Any, path: tuple, is_key: bool, payload: str) -> Any:
    doc = copy.deepcopy(doc)
    if "$json" in path:
        cut = path.index("$json")
        outer, inner = path[:cut], path[cut + 1 :]
        holder = _at(doc, outer[:-1])
        spec = json.loads(holder[outer[-1]])
        holder[outer[-1]] = json.dumps(_plant(spec, inner, is_key, payload))
        return doc
    holder = _at(doc, path[:-1])
    if is_key:
        items = [(payload if k == path[-1] else k, v) for k, v in holder.items()]
        holder.clear()
        holder.update(items)
    elif isinstance(holder, list) and path[-1] == len(holder):
        holder.append(payload)
    else:
        holder[path[-1]] = payload
    return doc


def _at_or_none(doc: Any, path: tuple) -> Any:
    try:
        return _at(doc, path)
    except (KeyError, IndexError, TypeError):
        return None  # inside an opened-up JSON string


def _at(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _targets(tmp: str) -> list[tuple[Document, tuple, bool]]:
    seen: dict[tuple, tuple[Document, tuple, bool]] = {}
    for document in documents(tmp):
        for path, is_key in _positions(document.doc):
            seen.setdefault(_signature(document, path, is_key), (document, path, is_key))
    return list(seen.values())


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Document, tuple, bool]]:
    return _targets(str(tmp_path_factory.mktemp("corpus")))


def test_every_schema_key_is_attacked(corpus: list[tuple[Document, tuple, bool]]) -> None:
    """Every key the schema code defines appears in the attacked documents (a new field needs a document
    that carries it, and then gets its payloads automatically)."""
    keys = {part for _, path, _ in corpus for part in path if isinstance(part, str)}
    known = (set(schema.RESERVED_KEYS) | {"slot", "src_index", "src", "dst", "args", "kwargs", "implementation"}
             | set(flat_schema._BODY_KEYS) | set(flat_schema._NODE_KEYS) | {"forward_arg_names", "in_spec"})
    missing = known - keys
    assert not missing, f"schema keys no attacked document carries: {sorted(missing)}"
    assert len(corpus) >= 60


@pytest.mark.parametrize("payload", PAYLOADS, ids=["def-default", "quoted", "getattr", "keyword", "newline", "shadow"])
def test_payload_in_every_string_field(corpus: list[tuple[Document, tuple, bool]], payload: str, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    outcomes: dict[str, int] = {}
    for i, (document, path, is_key) in enumerate(corpus):
        doc = _plant(document.doc, path, is_key, payload)
        outcome = attempt(write(document, doc, tmp_path / str(i)), document)
        assert not (tmp_path / MARKER).exists(), f"code ran from {document.name} {path} (key={is_key})"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert sum(outcomes.values()) == len(corpus)
    assert outcomes.get("ok", 0) < len(corpus)  # the payloads are noticed, not all silently accepted
