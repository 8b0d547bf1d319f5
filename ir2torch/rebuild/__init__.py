"""Rebuilding the module tree: one module per implementation, from its builder or its graph.

- :mod:`.graphs`: implementation graphs turned into ``torch.fx.GraphModule`` objects;
- :mod:`.assemble`, :mod:`.paths`: the tree assembled, children attached at their paths;
- :mod:`.instances`, :mod:`.leaf_copies`: instances of one shared body, and leaves made once per class and
  arguments, then copied;
- :mod:`.device`: the device a builder runs on (``meta`` or not); :mod:`.state`: loading state into the rebuild.

May import: ``common`` (its core), torch, ``ir2torch.codegen``, ``ir2torch.guards`` and ``ir2torch.run_safety``.
Never ``torch2ir``.
"""
