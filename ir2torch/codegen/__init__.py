"""The one place ir2torch turns a graph into Python source, and what guards and speeds it.

- :mod:`.source`: the safe code generators and the checks every string of a graph passes before it reaches source;
- :mod:`.constants`, :mod:`.arguments`, :mod:`.lookups`: constants spelled in source, nested arguments bound,
  faster reads of a module's own children and state;
- :mod:`.shared`, :mod:`.lazy`: source generated and compiled once per distinct graph, or at first use;
- :mod:`.module_call`, :mod:`.direct_op`: the calls generated code makes;
- :mod:`.constant_fold`, :mod:`.fold_cache`: the input-independent part of a graph split off and cached;
- :mod:`.grouped_attention`: attention on repeated key/value heads run on the grouped heads in that folded forward;
- :mod:`.fast_paths`, :mod:`.causal_mask`: exact fast paths of that folded forward, checked at each call (size reads,
  transformers' experts product as ``torch._grouped_mm``, an all-true attention mask made in one op).

May import: ``common`` (its core), torch, ``ir2torch.guards`` and ``ir2torch.run_safety``. Never ``torch2ir``;
names in generated source come from the rebuilder, never from a file.
"""
