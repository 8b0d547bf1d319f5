"""The torch.export frontend: trace a model once, with what the hierarchy needs from the trace.

- :mod:`.export`: ``torch.export.export(strict=False)`` with the facts it records (``lean_export``, call signatures
  to preserve), its log output kept quiet (:mod:`.logs`);
- :mod:`.hooks`: module hooks carried where the trace shows their ops, refused by name elsewhere;
- :mod:`.functional_calls`: ``FloatFunctional``-like modules made visible to the trace;
- :mod:`.custom_backward`: custom ``autograd.Function`` classes the forward calls (their backward is not in the trace);
- :mod:`.transformers_masks`: transformers' bidirectional mask skipped while exporting exactly when eager mode
  skips it (an unpadded call), so the trace computes what the eager call computed;
- :mod:`.transformers_compiling`: transformers' ``is_torchdynamo_compiling()`` answered as in eager mode while
  exporting, in modules of reviewed sources (Switch Transformers' and LongT5's stacks build their default mask);
- :mod:`.transformers_experts` (with :mod:`.experts_forwards`): transformers' eager experts loops of reviewed
  sources traced as the same computation (every expert in order, one with no token adding nothing).

May import: ``common`` (its core) and torch. Never ``ir2torch``; nothing of the later stages of ``torch2ir``.
"""
