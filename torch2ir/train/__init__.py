"""What train mode does that the eval-mode trace does not hold, recorded after the export.

- :mod:`.record`: a cheap train-mode "trace" on meta tensors, per module;
- :mod:`.passes`: the passes run once the IR exists; :mod:`.device`: where they run (meta copies or CPU);
- :mod:`.updates`: buffers updated only in train mode; :mod:`.dropout`: functional dropout depending on
  ``self.training``; :mod:`.batch_norm`: batch norms a module computes in its own graph (timm's
  ``BatchNormAct2d``), carried as their base's forward in both modes.

May import: ``common`` (its core), torch, ``torch2ir.frontend``, ``torch2ir.hierarchy``'s graph helpers and
``torch2ir.trace_once``. Never ``ir2torch``.
"""
