"""Executing a :class:`~common.flat.FlatIR`: an ``fx.GraphModule`` calling its ops through the allow-list
(:mod:`.run`), with its weights looked up by state-dict key, checked and attached (:mod:`.state`).

May import: ``common`` (its core), torch, ``ir2torch.codegen``, ``ir2torch.guards``, ``ir2torch.rebuild`` and
``ir2torch.run_safety``. Never ``torch2ir``.
"""
