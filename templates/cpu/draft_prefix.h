/* draft_prefix.h — forced into the draft model's generated source (cc -include) in a binary built with
 * --draft: every global symbol of model_api.h gets the ingot_draft_ prefix, so the draft links beside the
 * target, whose symbols keep the plain names. The runtime reaches the draft through ingot_draft_api
 * (draft_api.c). ./ingot build checks that the draft object defines no other global symbol. */
#define ingot_model_desc ingot_draft_model_desc
#define ingot_model_load ingot_draft_model_load
#define ingot_model_load_merged ingot_draft_model_load_merged
#define ingot_model_merged_lora ingot_draft_model_merged_lora
#define ingot_model_add_lora ingot_draft_model_add_lora
#define ingot_model_lora_count ingot_draft_model_lora_count
#define ingot_model_lora_name ingot_draft_model_lora_name
#define ingot_model_lora_path ingot_draft_model_lora_path
#define ingot_model_lora_summary ingot_draft_model_lora_summary
#define ingot_model_free ingot_draft_model_free
#define ingot_model_cast ingot_draft_model_cast
#define ingot_model_weights ingot_draft_model_weights
#define ingot_model_weight_bytes ingot_draft_model_weight_bytes
#define ingot_model_weight_origin ingot_draft_model_weight_origin
#define ingot_model_scratch_bytes ingot_draft_model_scratch_bytes
#define ingot_weights_planned_bytes ingot_draft_weights_planned_bytes
#define ingot_model_max_tokens ingot_draft_model_max_tokens
#define ingot_kv_alloc ingot_draft_kv_alloc
#define ingot_kv_release ingot_draft_kv_release
#define ingot_kv_fit_blocks ingot_draft_kv_fit_blocks
#define ingot_state_alloc ingot_draft_state_alloc
#define ingot_forward ingot_draft_forward
#define ingot_moe_observer ingot_draft_moe_observer
