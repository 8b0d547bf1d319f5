"""The per-operator rules of ``scripts/classify_ops.py``: refusal reasons and the explicit exceptions, each argued.

Data only: the classifier (``scripts/classify_ops.py``) applies these before its name and schema rules. A new
exception goes here with its reason; ``python scripts/classify_ops.py`` then regenerates the table.
"""

from __future__ import annotations

# -- reasons ---------------------------------------------------------------------------------------------------
FILE_IO = "file I/O"
UNCHECKED = "unchecked memory"
PROCESS = "process state"
DEVICE = "device runtime"
SCRIPT = "TorchScript builtin on Python values"
TEST_ONLY = "test-only op"
UNCLASSIFIED = "unclassified: safety not argued"
UNBOUNDED = "unbounded run time"
PRIVATE = "private kernel that torch.export does not emit: safety not argued"

#: Ops allowed although their name says "unsafe": each was tested on the CPU in a subprocess with out-of-range
#: indices or sizes (see the report of scripts/classify_ops.py and tests/security/test_op_table.py).
UNSAFE_NAMED_BUT_CHECKED: dict[str, str] = {
    "_unsafe_view": "a reshape that checks the element count (RuntimeError: shape is invalid for input of size)",
    "_unsafe_index": "raises IndexError on an out-of-range index",
    "_unsafe_index_put": "raises IndexError on an out-of-range index",
    "_unsafe_masked_index": "clamps indices into range before reading (masked-out lanes take the fill value)",
    "_unsafe_masked_index_put_accumulate": "clamps indices into range before writing",
    "unsafe_chunk": "chunk without view tracking; sizes come from the input",
    "unsafe_split": "split without view tracking; sizes come from the input",
    "unsafe_split_with_sizes": "checks that the sizes are non-negative and sum to the dimension",
}

#: Explicit per-op refusals (op name without overload -> reason), checked before any rule.
REFUSED_OPS: dict[str, str] = {
    "from_file": f"{FILE_IO}: maps or reads a named file (shared=True writes it)",
    "save": f"{FILE_IO}: writes a named file",
    "_reshape_alias": f"{UNCHECKED}: a view with free sizes and strides that torch does not check (reads the heap)",
    "_reshape_alias_copy": f"{UNCHECKED}: copies from an unchecked view (reads the heap)",
    "set": f"{UNCHECKED}: rebinds a tensor to another storage, offset and strides",
    "set_": f"{UNCHECKED}: rebinds a tensor to another storage, offset and strides",
    "set_data": f"{PROCESS}: replaces a tensor's data in place for autograd",
    # new in torch 2.14 (not registered in 2.13): the name rules would call it pure
    "shallow_copy_data_": f"{PROCESS}: replaces a tensor's data, sizes and strides in place with another's",
    "_sparse_coo_tensor_with_dims": f"{UNCHECKED}: sparse constructor that does not validate its invariants",
    "_sparse_coo_tensor_with_dims_and_tensors": f"{UNCHECKED}: sparse constructor that does not validate its "
                                                "indices (to_dense segfaults)",
    "_sparse_compressed_tensor_with_dims": f"{UNCHECKED}: sparse constructor that does not validate its invariants",
    "sparse_resize_": f"{UNCHECKED}: resizes sparse metadata without checking the indices",
    "sparse_resize_and_clear_": f"{UNCHECKED}: resizes sparse metadata without checking the indices",
    "_coalesced_": f"{UNCHECKED}: marks a sparse tensor coalesced without checking",
    "_pack_padded_sequence": f"{UNCHECKED}: lengths larger than the input are not refused",
    "quantized_lstm_cell": f"{UNCHECKED}: reads two hidden states from its list without checking its length (an "
                           "empty list segfaults, found by the long op-level fuzz; lstm_cell checks); a legacy "
                           "TorchScript dynamic-quantization cell export does not write",
    "_cholesky_solve_helper": f"{UNCHECKED}: an internal helper that trusts its caller's shape checks (segfault on "
                              "mismatched shapes, found by the op-level fuzz)",
    "_cummax_helper": f"{UNCHECKED}: an internal helper that trusts its caller's shape checks",
    "_cummin_helper": f"{UNCHECKED}: an internal helper that trusts its caller's shape checks",
    "_index_put_impl": f"{UNCHECKED}: takes an 'unsafe' flag that skips the bounds checks (export writes index_put)",
    "_index_put_impl_": f"{UNCHECKED}: takes an 'unsafe' flag that skips the bounds checks (export writes index_put_)",
    "_jagged_to_padded_dense_forward": f"{UNCHECKED}: jagged offsets are not bounds-checked",
    "_padded_dense_to_jagged_forward": f"{UNCHECKED}: jagged offsets are not bounds-checked",
    "_pack_sequence": f"{UNCHECKED}: lengths larger than the input are not refused",
    "_pad_packed_sequence": f"{UNCHECKED}: lengths larger than the input are not refused",
    "_foobar": TEST_ONLY,
    "_new_zeros_with_same_feature_meta": f"{UNCHECKED}: a functorch internal that trusts its batch-dim count "
                                         "(segfault, found by the long op-level fuzz)",
    "_add_batch_dim": f"{PROCESS}: functorch vmap levels",
    "_remove_batch_dim": f"{PROCESS}: functorch vmap levels",
    "_stack": f"{UNCHECKED}: an empty tensor list is not refused (segfault, found by the op-level fuzz); export "
              "writes aten.stack",
    "_weight_norm_interface": f"{UNCHECKED}: divides by zero on an empty input (SIGFPE, found by the op-level fuzz); "
                              "CPU exports write _weight_norm",
    "_resize_output": f"{DEVICE}: takes a device",
    "_resize_output_": f"{DEVICE}: takes a device",
    "backward": f"{PROCESS}: runs autograd and accumulates into .grad",
    "_backward": f"{PROCESS}: runs autograd and accumulates into .grad",
    "retain_grad": f"{PROCESS}: changes autograd bookkeeping",
    "retains_grad": f"{PROCESS}: reads autograd bookkeeping",
    "requires_grad_": f"{PROCESS}: changes autograd bookkeeping",
    "set_grad_enabled": f"{PROCESS}: sets the global grad mode",
    "is_grad_enabled": f"{PROCESS}: reads the global grad mode",
    "is_inference": f"{PROCESS}: reads inference mode",
    "is_autocast_enabled": f"{PROCESS}: reads the autocast mode",
    "is_autocast_cpu_enabled": f"{PROCESS}: reads the autocast mode",
    "get_autocast_dtype": f"{PROCESS}: reads the autocast mode",
    "_get_tracing_state": f"{PROCESS}: reads the TorchScript tracer state",
    "manual_seed": f"{PROCESS}: seeds a random generator",
    "seed": f"{PROCESS}: seeds a random generator",
    "initial_seed": f"{PROCESS}: reads a random generator",
    "_print": f"{PROCESS}: prints",
    "warn": f"{PROCESS}: emits a warning",
    "_test_warn_in_autograd": f"{PROCESS}: emits a warning",
    "wait": f"{PROCESS}: waits on a future",
    "record_stream": f"{DEVICE}: stream synchronisation",
    "pin_memory": f"{DEVICE}: allocates page-locked memory through the accelerator runtime",
    "_pin_memory": f"{DEVICE}: allocates page-locked memory through the accelerator runtime",
    "is_pinned": f"{DEVICE}: asks the accelerator runtime",
    "cuda": f"{DEVICE}: moves to CUDA",
    "is_vulkan_available": f"{DEVICE}: asks the device runtime",
    "_make_dual": f"{PROCESS}: forward-mode autograd levels",
    "_make_dual_copy": f"{PROCESS}: forward-mode autograd levels",
    "_unpack_dual": f"{PROCESS}: forward-mode autograd levels",
    "_fw_primal": f"{PROCESS}: forward-mode autograd levels",
    "_fw_primal_copy": f"{PROCESS}: forward-mode autograd levels",
    "Generator": f"{PROCESS}: creates a random generator",
    "grad": f"{PROCESS}: runs autograd (torch.autograd.grad)",
    "factorial": f"{SCRIPT}: loops as many times as its argument",
    "choose_qparams_optimized": f"{UNBOUNDED}: searches for as many steps as n_bins and ratio say, not the input's "
                                "size (ratio=inf or n_bins=10**9 hangs, found by the long op-level fuzz); a "
                                "quantization-time helper export's forward graphs do not write",
    "has_torch_function": f"{SCRIPT}: takes any Python values",
}

#: Single overloads refused where the op's other overloads are allowed (``op.overload`` -> reason).
REFUSED_OVERLOADS: dict[str, str] = {
    "tensor_split.tensor_indices_or_sections": f"{UNBOUNDED}: a 0-d tensor argument is a section count read from "
                                               "tensor data, and the op returns that many views (the literal count "
                                               "of tensor_split.sections is bounded at load); export writes "
                                               "tensor_split.sections or .indices for Python values",
}

#: Explicit per-op classes among the allowed (op name -> class), checked before the size rules.
PURE_OPS: dict[str, str] = {
    **{op: f"unsafe-named but checked: {why}" for op, why in UNSAFE_NAMED_BUT_CHECKED.items()},
    # reshapes whose size list is checked against the element count of the input
    "view": "size checked against the input's element count",
    "view_copy": "size checked against the input's element count",
    "reshape": "size checked against the input's element count",
    "_reshape_copy": "size checked against the input's element count",
    "unflatten": "sizes checked against the dimension",
    "split_with_sizes": "sizes checked to sum to the dimension",
    "split_with_sizes_copy": "sizes checked to sum to the dimension",
    # export's runtime assertions: they only compare and raise
    "_assert_scalar": "only raises when its condition is false",
    "_functional_assert_scalar": "only raises when its condition is false",
    "_assert_async": "only raises when its condition is false",
    "_functional_assert_async": "only raises when its condition is false",
    "_assert_tensor_metadata": "only raises when the metadata differ",
    "sym_constrain_range": "only raises when the value is out of range",
    "sym_constrain_range_for_size": "only raises when the value is out of range",
    "_functional_sym_constrain_range": "only raises when the value is out of range",
    "_functional_sym_constrain_range_for_size": "only raises when the value is out of range",
}

#: Ops whose output size comes from tensor data or from a count argument the generic rules miss.
ALLOCATING_OPS: dict[str, str] = {
    "bincount": "output length is the largest value in the data",
    "repeat_interleave": "output length is the sum of the repeats",
    "one_hot": "output width is the largest value in the data",
    "tensor_split": "number of outputs comes from an argument",
    "kron": "output size is the product of both input sizes",
    "nonzero_static": "output size comes from an argument",
    "_histogramdd_bin_edges": "output size comes from the bins argument",
    "histogramdd": "output size comes from the bins argument",
    "histogram": "output size comes from the bins argument",
    "_pad_packed_sequence": "output length comes from total_length",
    "to_padded_tensor": "output size comes from an argument",
    "meshgrid": "output size is the product of all input sizes",
    "cartesian_prod": "output size is the product of all input sizes",
}

#: Private ATen ops (a name starting with ``_``) allowed because ``torch.export``, ``torch2ir.lower(...,
#: decompose=True)`` (the core-ATen decompositions) or ir2torch emit them on the project's corpus: op -> where.
#: ``python -m tests.security.op_corpus`` lists the private ops the corpus emits (and, run whole, the entries here
#: that no model emits any more); every other private op is refused (:data:`PRIVATE`) unless argued safe in
#: :data:`ARGUED_PRIVATE`. An entry allows every overload of the op; the op-level fuzz runs them all.
EXPORTED_PRIVATE: dict[str, str] = {
    # torch.export itself (module-level IR and lower without decompositions)
    "__and__": "Python's & on tensors (export): the attention masks of most transformers (bert, gpt2, llama...)",
    "__or__": "Python's | on tensors (export): funnel's attention mask; the corpus' bit-operators layer",
    "__xor__": "Python's ^ on tensors (export): the corpus' bit-operators layer",
    "__lshift__": "Python's << on tensors (export): the corpus' bit-operators layer",
    "__rshift__": "Python's >> on tensors (export): the corpus' bit-operators layer",
    "__iand__": "Python's &= on tensors (export): the corpus' bit-operators layer",
    "__ior__": "Python's |= on tensors (export): the corpus' bit-operators layer",
    "_is_all_true": "a tensor condition in Python (export): LLaVA's image-token count check",
    "__ixor__": "Python's ^= on tensors (export): the corpus' bit-operators layer",
    "__ilshift__": "Python's <<= on tensors (export): the corpus' bit-operators layer",
    "__irshift__": "Python's >>= on tensors (export): the corpus' bit-operators layer",
    "_weight_norm": "the weight_norm parametrization of a convolution (export): wav2vec2, hubert, wavlm",
    "_conj": "Tensor.conj() of a complex tensor (export): the corpus' complex layer",
    "_upsample_bilinear2d_aa": "interpolate(mode='bilinear', antialias=True) (export): the corpus' antialias layer",
    "_upsample_bicubic2d_aa": "interpolate(mode='bicubic', antialias=True) (export): timm's naflexvit and samvit "
                              "position-embedding resize",
    "_upsample_nearest_exact1d": "interpolate(mode='nearest-exact') of a 3-D input (export): the corpus' "
                                 "nearest-exact layer",
    "_upsample_nearest_exact2d": "interpolate(mode='nearest-exact') (export): diffusers' AutoencoderKLWan upsampler",
    "_upsample_nearest_exact3d": "interpolate(mode='nearest-exact') of a 5-D input (export): the corpus' "
                                 "nearest-exact layer",
    # the core-ATen decompositions (lower with decompose=True)
    "_softmax": "softmax decomposition: every attention (bert, gpt2, llama, vit, nn.Transformer...)",
    "_log_softmax": "log_softmax and cross_entropy decomposition: the corpus' log-softmax layers",
    "_to_copy": "decomposition of .to(dtype) and type casts: most transformers (bert, gpt2, fnet...)",
    "_native_batch_norm_legit_no_training": "eval-mode batch_norm decomposition: resnet, mobilenet, regnet...",
    "_native_batch_norm_legit": "batch_norm without running stats (no_stats): BiT's weight-standardised "
                                "convolutions, instance_norm",
    "_fft_c2c": "fft_fftn decomposition: fnet",
    "_fft_r2c": "rfft and stft decomposition: the corpus' rfft and stft layers",
    "_fft_c2r": "irfft decomposition: the corpus' rfft layer",
    "_trilinear": "bilinear decomposition: nn.Bilinear in the zoo's multi_io_leaves",
    "_adaptive_avg_pool2d": "adaptive_avg_pool2d decomposition (an output size that does not divide the input)",
    "_embedding_bag": "embedding_bag decomposition: the corpus' nn.EmbeddingBag layer",
    "_cdist_forward": "cdist decomposition: the corpus' cdist layer",
    "_local_scalar_dense": "Tensor.item() decomposition: the corpus' item layer",
}
