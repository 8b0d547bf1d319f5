"""Run-time safety of a rebuilt model: bounding what a file's code may do when it runs.

A file is data, but its graphs name operators with arguments, and running them is running the file. This package
owns every bound on that run:

- **surface**: which operators a call may reach and how they are called (:mod:`.fast_ops`, the bindings that run
  exactly one ATen overload; the default operator surface itself is data of :mod:`common.surface`);
- **preconditions**: what a kernel assumes without checking, tested on its arguments before it runs
  (:mod:`.op_preconditions`, :mod:`.index_checks`: indices, labels, offsets and counts read from tensor data),
  by the nodes of generated code that reach them (:mod:`.node_checks`);
  writes into the caller's tensors refused (:mod:`.writes`); uninitialized allocations zero-filled
  (:mod:`.uninitialized`);
- **memory**: the parameters and buffers a rebuild allocates (:mod:`.budget`) and the live memory of a call at
  every point, measured on fake tensors before anything real runs (:mod:`.forward_budget`, with
  :mod:`.fake_probe` and the dispatch modes of :mod:`.op_modes`), or op by op when sizes depend on data
  (:mod:`.checked`); kernels' workspace by a documented model (:mod:`.workspace`); quantized and mkldnn tensors
  on stand-ins or refused (:mod:`.unmeasured`);
- **compute**: the floating-point work of a call (:mod:`.flops`).

It may import ``torch`` and :mod:`common` only, never :mod:`torch2ir` nor the rest of :mod:`ir2torch`: the rest of
``ir2torch`` imports it, never the other way round (``tests/cli/test_layering.py`` checks it).
"""
