/*
 * Pinned sizes of every public struct on x86-64 Linux (LP64), read by
 * test_abi.c. A size that changes is an ABI change: append fields only
 * (docs/abi-policy.md), then update the number here in the same commit.
 *
 * Adding a public struct: add one line. KT_ABI_TAGGED for structs whose first
 * member is `uint32_t struct_size` (options and output structs), KT_ABI_PLAIN
 * otherwise. test_abi fails for any `typedef struct kt_x {` in include/kt/
 * that is missing here.
 */
/* kt/convert.h */
KT_ABI_TAGGED(kt_convert_options, 64)
KT_ABI_TAGGED(kt_convert_report, 40)
/* kt/core.h */
KT_ABI_TAGGED(kt_runtime_options, 32)
KT_ABI_PLAIN(kt_buf, 24)
/* kt/engine.h */
KT_ABI_TAGGED(kt_context_options, 48)
/* kt/hw.h */
KT_ABI_TAGGED(kt_hw_info, 328)
KT_ABI_TAGGED(kt_hw_numa_node, 32)
KT_ABI_TAGGED(kt_hw_gpu, 184)
/* kt/model.h */
KT_ABI_TAGGED(kt_model_open_options, 24)
KT_ABI_TAGGED(kt_arch_info, 320)
KT_ABI_TAGGED(kt_layer_info, 20)
KT_ABI_TAGGED(kt_tensor_view, 200)
KT_ABI_TAGGED(kt_estimate_options, 24)
KT_ABI_TAGGED(kt_memory_estimate, 192)
/* kt/moe.h */
KT_ABI_TAGGED(kt_moe_desc, 44)
KT_ABI_TAGGED(kt_moe_layer_weights, 96)
KT_ABI_TAGGED(kt_moe_options, 28)
KT_ABI_TAGGED(kt_moe_io, 56)
KT_ABI_TAGGED(kt_moe_info, 80)
KT_ABI_TAGGED(kt_router_params, 40)
/* kt/placement.h */
KT_ABI_TAGGED(kt_placement_options, 64)
KT_ABI_PLAIN(kt_expert_move, 24)
KT_ABI_TAGGED(kt_rebalancer_options, 48)
/* kt/registry.h */
KT_ABI_TAGGED(kt_registry_entry, 96)
/* kt/sampler.h */
KT_ABI_TAGGED(kt_sampler_options, 48)
/* kt/tokenizer.h */
KT_ABI_TAGGED(kt_tokenizer_options, 16)
/* kt/template.h */
KT_ABI_TAGGED(kt_template_options, 8)
KT_ABI_TAGGED(kt_template_render_options, 24)
KT_ABI_PLAIN(kt_chat_message, 24)
/* kt/gpu.h */
KT_ABI_TAGGED(kt_gpu_options, 40)
KT_ABI_TAGGED(kt_gpu_limits, 40)
