"""The tests ``make test-newest`` runs against the newest releases (:data:`SELECTION`, read by
``scripts/newest_site.py``): pytest node ids from the project's root."""

from __future__ import annotations

#: The tests run against the newest releases (pytest node ids, from the project's root): each converts, rebuilds,
#: compares with eager and converts the rebuild again (fixpoint); the corpus tests also lower (``ir.lower()``).
_CORPUS = ("llama", "qwen2", "mistral", "phi3", "gpt2", "bert", "t5", "mixtral", "qwen3_moe", "vit", "whisper")
SELECTION: tuple[str, ...] = (
    # transformers: decoders (Llama, Qwen2, Mistral, Phi-3: the four transformers 5.24 broke), GPT-2, BERT, T5,
    # two mixtures of experts, ViT and Whisper: round trip exact, fixpoint; then the lowering of the same models
    *(f"tests/real/test_corpus.py::test_eval_mode_round_trip_is_exact[{name}]" for name in _CORPUS),
    *(f"tests/real/test_lower_corpus.py::test_flat_from_the_capture_runs_like_the_model_and_the_direct_lowering"
      f"[{name}]" for name in _CORPUS),
    "tests/loop/test_structural_names.py::test_decoders_with_dynamic_batch_and_sequence_reach_a_fixpoint",
    # timm: four families through round trip, gradients, fixpoint, lowering, swaps and the input guard
    *(f"tests/ecosystems/test_timm.py::test_round_trip_is_exact[{family}]"
      for family in ("resnet", "convnext", "efficientnet", "vision_transformer")),
    # diffusers: the UNets (down, mid and up blocks with attention and cross attention) and the VAE
    *(f"tests/ecosystems/test_diffusers.py::test_round_trip_is_exact[{name}]"
      for name in ("unet2d", "unet2d_condition", "autoencoder_kl")),
    # brevitas: its example network (fixpoint) and a QuantConv2d / QuantLinear network from its own state dict
    "tests/ecosystems/test_brevitas.py::test_tfc_round_trips_exactly_and_reaches_a_fixpoint",
    "tests/quant/test_brevitas.py::test_brevitas_network_round_trips_exactly_from_its_own_state_dict",
    # torchao: PT2E post-training and quantization-aware models, converted and rebuilt exactly
    "tests/quant/test_pt2e.py::test_pt2e_model_round_trips_exactly",
    # generate() on rebuilt decoders (Llama, GPT-2, Qwen2, Gemma-2, Mixtral; dynamic and static caches): transformers
    # 5.24 renamed the cache argument and output field (past_key_values -> cache) and changed its cache layers
    *(f"tests/real/test_generate.py::{name}" for name in (
        "test_single_prompt", "test_padded_batch", "test_every_steps_logits_are_within_float32_rounding",
        "test_past_the_sliding_window_is_refused",
    )),
    *(f"tests/ir2torch/test_generation.py::{name}" for name in (
        "test_single_prompt_gives_the_original_tokens", "test_padded_batch_gives_the_original_tokens",
        "test_generation_without_attention_mask", "test_beam_search_and_sampling_give_the_original_tokens",
        "test_the_config_passed_is_not_changed", "test_an_offloaded_cache_is_refused",
        "test_a_spec_naming_a_cache_outside_the_allow_list_is_refused",
        "test_plain_conversion_with_the_default_config_points_to_convert_for_generation",
        "test_a_rebuild_without_a_past_cannot_generate", "test_the_errors_are_ir_errors",
    )),
    *(f"tests/ir2torch/test_generation_caches.py::{name}" for name in (
        "test_static_cache_gives_the_original_tokens", "test_the_static_cache_holds_what_the_original_s_holds",
        "test_a_static_cache_without_room_is_refused",
        "test_static_caches_the_wrapper_cannot_copy_are_refused_by_name",
        "test_other_cache_classes_are_refused_by_name", "test_the_step_graph_copies_no_past",
        "test_the_unflatten_without_copies_makes_transformers_cache",
        "test_a_hostile_dynamic_cache_node_is_refused", "test_unequal_key_and_value_lists_are_refused",
        "test_a_cache_of_another_layer_layout_is_refused_naming_the_layouts",
    )),
    *(f"tests/ir2torch/test_static_cache_writes.py::{name}" for name in (
        "test_static_writes_equal_the_layers_updates",
        "test_write_all_runs_updates_ops_with_one_position_tensor", "test_write_all_runs_update_elsewhere",
    )),
    # transformers' custom attention masks (torch.vmap; 5.24 moved flat_apply's constants into the vmap region) and
    # the first generate()'s probes (one symbolic probe for the growing cache)
    "tests/torch2ir/test_vmap_regions.py::test_a_transformers_model_with_a_custom_mask_function_converts",
    "tests/security/test_symbolic_probe.py::test_generate_on_a_rebuilt_gpt2_probes_a_few_steps_not_each",
)
