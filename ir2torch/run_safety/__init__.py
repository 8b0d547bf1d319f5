"""Run-time safety of a rebuilt model: what keeps a file's graph, when it runs, within its own tensors.

This package owns :mod:`~ir2torch.run_safety.uninitialized` (uninitialized allocations are zero-filled) ,
:mod:`~ir2torch.run_safety.flops` (the compute budget of a call, counted by the forward's probe) and
:mod:`~ir2torch.run_safety.writes` (no write into the caller's tensors). It may
import ``torch`` and :mod:`common`; the rest of ``ir2torch`` imports it, never the other way round.
"""
