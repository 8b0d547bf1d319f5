"""What a PT2E-prepared model (``prepare_pt2e`` / ``prepare_qat_pt2e``) carries for ``convert_pt2e``, as data.

``convert_pt2e`` finishes a prepared model only when its ``meta["_observed_graph_module_attrs"]`` (torch.ao's
``ObservedGraphModuleAttrs``) is there (else: "incoming model must be produced by prepare_fx"). For a PT2E model
every field of it is torch.ao's empty default except two: ``is_qat`` and ``node_name_to_scope``, the module path
(and class) of the module each graph node came from, which ``convert_pt2e`` reads for the observed node of each
observer call to name the scale and zero-point buffers it creates (``conv1_scale_0``).

torch2ir records them on the root implementation as ``meta["pt2e_prepared"]`` (:mod:`torch2ir.quant.pt2e_prepared`)::

    {"is_qat": false, "scopes": {"<IR node of an observer call>": ["<module path>", "<class name>" | null]}}

keyed by the IR node calling the observer (its observed node is that call's first argument, whatever the
rebuilt graph names it); ir2torch checks the record on load and recreates the attributes on the rebuilt root
(:mod:`ir2torch.rebuild.pt2e_prepared`). Class names are data: kept as strings (torch.ao's ``convert`` never reads
them),
``null`` standing for ``NoneType`` (a node outside any module); nothing is imported or looked up.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import IRFormatError

#: ``meta`` key, on the root implementation, of the record.
PT2E_PREPARED_KEY = "pt2e_prepared"
#: The most observer calls a record may name.
MAX_SCOPES = 10**5
_MAX_NAME = 300
_MAX_PATH = 1000
_HINT = ('it records what convert_pt2e reads from a PT2E-prepared model: {"is_qat": false, "scopes": {"<observer '
         'call node>": ["<module path>", "<class name>" or null]}}; remove it if the file was edited')


def _text(value: Any, most: int, *, empty: bool = False) -> bool:
    return isinstance(value, str) and (empty or bool(value)) and len(value) <= most and value.isprintable()


def pt2e_prepared_record(meta: Mapping[str, Any], key: str = "root") -> dict[str, Any] | None:
    """The checked ``meta["pt2e_prepared"]`` of implementation ``key`` (``None`` when absent).

    Raises:
        IRFormatError: not a record of the form above, or not on the root implementation.
    """
    record = meta.get(PT2E_PREPARED_KEY)
    if record is None:
        return None
    if key != "root":
        raise IRFormatError(f"meta.{PT2E_PREPARED_KEY} belongs to the root implementation", implementation=key,
                            hint="move it to the root's meta")
    if not isinstance(record, dict) or set(record) != {"is_qat", "scopes"} or type(record["is_qat"]) is not bool:
        raise IRFormatError(f"meta.{PT2E_PREPARED_KEY} must be a dict of a bool 'is_qat' and 'scopes'",
                            implementation=key, hint=_HINT)
    scopes = record["scopes"]
    if not isinstance(scopes, dict) or len(scopes) > MAX_SCOPES:
        raise IRFormatError(f"meta.{PT2E_PREPARED_KEY}.scopes must be a dict of at most {MAX_SCOPES} entries",
                            implementation=key, hint=_HINT)
    for node, scope in scopes.items():
        if (not _text(node, _MAX_NAME) or not isinstance(scope, list) or len(scope) != 2
                or not _text(scope[0], _MAX_PATH, empty=True)
                or not (scope[1] is None or _text(scope[1], _MAX_NAME))):
            raise IRFormatError(f"meta.{PT2E_PREPARED_KEY}.scopes: the entry {str(node)[:80]!r} must map a node "
                                "name to [module path, class name or null]", implementation=key, hint=_HINT)
    return {"is_qat": record["is_qat"], "scopes": {n: list(s) for n, s in scopes.items()}}


__all__ = ["MAX_SCOPES", "PT2E_PREPARED_KEY", "pt2e_prepared_record"]
