"""Reviewed additions to the default operator surface (:mod:`common.surface`) beyond what the model corpus emits.

The corpus converts its models with static shapes in eval and train mode, plain and decomposed. The project's own
tests convert more: dynamic shapes, quantized tensors, training-time layers, common reductions, and the real models
of the ecosystem tests (timm, torchvision, diffusers, brevitas samples beyond the corpus' zoo). Each entry below is
an ATen overload the operator classes allow that those tests convert and load by default, with why a real model
would name it too; ``python -m tests.security.op_corpus --write-surface`` adds them to ``common/default_ops.txt``.
Operators the tests name only to attack them (``resize_``, ``zeros.out``, ``ctc_loss``, the special polynomials,
``round.decimals``...) are not here: those tests opt in with ``allow=``.
"""

from __future__ import annotations

_DYNAMIC = "dynamic shapes (tests/flat/test_dynamic.py, tests/ir2torch/test_guards.py): export's"
_TRAIN = "training-time layers (tests/torch2ir/test_train_updates.py)"

#: ``aten.<op>.<overload>`` -> why it is in the default surface although no corpus model emits it.
EXTRA_SURFACE: dict[str, str] = {
    "aten._is_all_true.default": "torch.all of a boolean tensor in a model's own check: LLaVA's image-token count "
                                 "(tests/real/test_beyond_corpus.py)",
    "aten.masked_scatter.default": "Tensor.masked_scatter: LLaVA places image features at its image tokens "
                                   "(tests/real/test_beyond_corpus.py; the kernel checks the source's size)",
    "aten.masked_fill_.Scalar": "an in-place masked_fill on a tensor the model made: XLM's attention mask "
                                "(tests/real/test_beyond_corpus.py; writes into inputs are refused apart)",
    "aten.sym_size.int": f"{_DYNAMIC} symbolic sizes",
    "aten._assert_scalar.default": f"{_DYNAMIC} range assertions",
    "aten.sum.default": "a full reduction (x.sum()): losses, norms (tests/flat/test_lowering.py)",
    "aten.mean.default": "a full reduction (x.mean()): batch-norm statistics in train mode (tests/rewrite)",
    "aten.ge.Tensor": "an elementwise comparison (tests/ir2torch/test_constant_fold.py)",
    "aten.round.default": "torch.round: fake quantizers written by hand (tests/torch2ir/test_custom_backward.py); "
                          "brevitas' estimators emitted it until they became torch2ir_ste operators (common.ste_ops)",
    "aten._assert_async.msg": "a graph's assertion with a message (raises when false): brevitas' branches on its "
                              "quantizers' state, decided as eager and asserted (torch2ir.frontend.brevitas_branches)",
    "aten.any.default": "Tensor.any of a whole tensor: brevitas' zero-point test in quant_layer "
                        "(torch2ir.frontend.brevitas_branches; tests/torch2ir/test_brevitas_branches.py)",
    "aten.isclose.default": "torch.isclose: what torch.allclose computes, brevitas' scale checks asserted in the graph "
                            "(torch2ir.frontend.brevitas_branches; bnn_pynq's ResNet-18)",
    "aten.clamp_max.Tensor": "torch.clamp_max with a tensor bound: brevitas' A2Q weight quantizers bound the weights' "
                             "norm (brevitas_examples' a2q ESPCNs, traced since brevitas_branches)",
    "aten.flip.default": "torch.flip: bidirectional layers, image flips (tests/torch2ir/test_opaque.py)",
    "aten.leaky_relu.default": "nn.LeakyReLU: GANs, YOLO-style detectors (tests/torch2ir/test_opaque.py)",
    "aten.square.default": "torch.square: RMS norms, losses (tests/torch2ir/test_first_call.py)",
    "aten.mv.default": f"a matrix-vector product: spectral norm's power iteration, {_TRAIN}",
    "aten.vdot.default": f"a dot product: spectral norm's power iteration, {_TRAIN}",
    "aten.view_as.default": "Tensor.view_as (tests/flat/test_capture.py)",
    "aten.tril.default": "causal masks built with torch.tril (tests/security/test_forward_budget.py)",
    "aten.upsample_nearest2d.vec": "interpolate(mode='nearest'): U-Nets, FPNs (tests/security/test_op_table.py)",
    "aten._unsafe_index.Tensor": "the core-ATen decomposition of nearest and bilinear upsampling (bounds-checked: "
                                 "IndexError; index preconditions too)",
    "aten._unsafe_view.default": "the core-ATen decomposition of reshapes (checks the element count)",
    "aten.new_zeros.default": "Tensor.new_zeros: caches and padding (tests/security/test_forward_budget.py)",
    "aten.nonzero.default": "torch.nonzero / boolean masks: detection heads (data-dependent size, budget-checked)",
    "aten.repeat_interleave.Tensor": "mixture-of-experts routing, grouped-query attention (sum checked, issue 50)",
    "aten.dequantize.self": "quantized models' dequantize (tests/quant/test_int8.py)",
    "aten.quantize_per_tensor.tensor_qparams": "quantized models' quantize with tensor parameters "
                                               "(tests/quant/test_int8.py)",
    "aten.fake_quantize_per_tensor_affine.tensor_qparams": "QAT models' fake quantization (tests/rewrite)",
    "aten.fill_.Scalar": "Tensor.fill_ on a tensor the graph made (tests/security/test_caller_writes.py)",
    "aten.empty_strided.default": "torch.empty_strided (zero-filled when run, tests/security/test_stale_memory.py)",
    "aten.new_empty.default": "Tensor.new_empty (zero-filled when run, tests/security/test_stale_memory.py)",
    "aten.index_add.default": "transformers' JetMoE experts (tests/loop/test_symbolic_arguments.py; index "
                              "preconditions)",
    "aten.sym_numel.default": "transformers' JetMoE under dynamic shapes (tests/loop/test_structural_names.py)",
    # real models the ecosystem tests (tests/ecosystems, the zoo run) convert beyond the corpus
    "aten.adaptive_avg_pool3d.default": "torchvision's video models (mc3_18)",
    "aten.conv3d.default": "torchvision's video models (r3d_18, mc3_18)",
    "aten.tensor_split.indices": "torchvision's MViT (mvit_v1_b, mvit_v2_s)",
    "aten.argmin.default": "diffusers' VQModel quantizer",
    "aten.round_.default": "diffusers' AutoencoderTiny",
    "aten.col2im.default": "timm's VOLO (fold)",
    "aten.dropout_.default": "timm's TNT",
    "aten.leaky_relu_.default": "timm's TResNet",
    "aten.silu_.default": "timm's DPN and EfficientNet",
    "aten.rms_norm.default": "timm's DeepSeek and Gemma-4 ViTs",
    "aten.one_hot.default": "timm's Gemma-4 ViT (index preconditions)",
    "aten.hardtanh_.default": "torchvision's MobileNetV2 quantized with PT2E",
    "aten.log2.default": "brevitas' binarized CNV networks",
    "aten.rand.default": "torch.rand: stochastic depth and noise in train mode (tests/ir2torch/test_constant_fold.py)",
    "aten.randn.default": "torch.randn: diffusion noise, VAE sampling (tests/security/test_op_table.py)",
    "aten.squeeze.default": "Tensor.squeeze() of every size-1 dimension: transformers' Autoformer and Informer "
                            "(tests/real/test_opaque_time_series.py); a view",
    "aten.view_as_complex.default": "rotary embeddings as complex numbers: diffusers' Lumina2 "
                                    "(tests/ecosystems/test_diffusers_opaque.py); a view",
    "aten.outer.default": "torch.outer for rotary frequencies: diffusers' Flux, Chroma and HunyuanVideo "
                          "(benchmarks.sweep --zoo diffusers)",
    "aten.linspace.default": "torch.linspace for positions and timesteps: diffusers' LTX-Video and Mochi "
                             "(benchmarks.sweep --zoo diffusers); its size is measured against the memory budget",
    "aten.movedim.int": "Tensor.movedim: diffusers' AutoencoderDC (benchmarks.sweep --zoo diffusers); a view",
    "aten.pixel_shuffle.default": "nn.PixelShuffle: diffusers' AutoencoderDC, super-resolution networks "
                                  "(benchmarks.sweep --zoo diffusers); a rearrangement of its input",
    "aten.pixel_unshuffle.default": "nn.PixelUnshuffle: diffusers' AutoencoderDC (benchmarks.sweep --zoo diffusers); "
                                    "a rearrangement of its input",
    "aten.ones_like.default": "torch.ones_like: diffusers' LTX-Video (benchmarks.sweep --zoo diffusers); sized as its "
                              "input",
}
