"""From one exported program to the module-level IR: the module hierarchy recovered and assembled.

- :mod:`.recover`: the module hierarchy of the trace (frames per module call, from ``nn_module_stack``);
- :mod:`.graph_writer`, :mod:`.graphs`: each non-leaf frame written as its implementation's graph;
- :mod:`.modules`: one implementation per module instance (``named_modules()``), handled leaves and containers;
- :mod:`.tensormeta`, :mod:`.local_sizes`: shapes and dtypes as IR values, symbolic sizes computed where read;
- :mod:`.symbolic_order`: runs of symbolic scalars and their runtime assertions written in one canonical order;
- :mod:`.build`: the conversion's driver that assembles the IR; :mod:`.program_facts`: what the exported program
  records beyond its graph (constants, mutations, calling conventions).

May import: ``common`` (its core), torch, and ``torch2ir``'s handlers, frontend, signatures, train-mode passes,
trace-once, lowering capture and opaque leaves (this is the stage that drives them). Never ``ir2torch``.
"""
