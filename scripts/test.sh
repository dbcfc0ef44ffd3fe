#!/usr/bin/env bash
# Runs the tests and prints a closing "N passed, N failed" line.
#
#   scripts/test.sh           the default tier (`make test`, what CI runs): the C unit tests and every
#                             pytest file optimized, then the C-heavy paths again under
#                             AddressSanitizer + UndefinedBehaviorSanitizer (loaders, tokenizer, Jinja,
#                             server, HTTP edges, grammars, scheduler (and the tight-pool serving test), bad
#                             models, stop ids, K-quant kernels and loading, one cudasim forward; the
#                             attention split across threads under them is test_kernels' chunks run apart);
#                             tests marked `full` (the same checks on more inputs) are skipped by name
#   scripts/test.sh --full    every test at full breadth, both passes over every file (`make test-full`)
#   scripts/test.sh --fast    the optimized pass of the default tier only
#
# Tests run on both cores through pytest-xdist (INGOT_TEST_JOBS=1 runs them one at a time).
# Each tier's wall time is printed at the end.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

mode=${1:-default}
case "$mode" in default|--full|--fast) ;; *) echo "usage: scripts/test.sh [--full|--fast]" >&2; exit 2;; esac
[ "$mode" = --full ] && export INGOT_TEST_FULL=1

# The sanitizer pass of the default tier: the files whose C handles untrusted bytes or
# concurrency (plus one CUDA model forward on cudasim under ASan). tests/test_cudasim.py is not
# among them: it builds the simulator in each of its modes, ASan included, whatever the pass.
SAN_FILES="tests/test_loaders.py tests/test_tokenizer.py tests/test_jinja.py tests/test_server.py
           tests/test_http_edges.py tests/test_scheduler.py tests/test_bad_models.py
           tests/test_stop_ids.py tests/test_kernels.py tests/test_grammar.py"
# test_kquants: the dequantization and kernels of every type, bad K-quant tensors and files, and one
# preset model each way (the optimized pass builds every preset; its kernels are the unit test's).
# Left to the optimized pass (their C runs here through other tests: the loaders', server's and
# tools'): the cast file passed over, the chat CLI's conversation, Messages' tool flow and a second
# DeepSeek-V2 preset.
SAN_EXTRA="tests/test_kquants.py::test_dequantize_matches_gguf_py tests/test_kquants.py::test_kernels
           tests/test_kquants.py::test_truncated_kquant_tensor tests/test_kquants.py::test_kquant_row_not_multiple_of_256
           tests/test_kquants.py::test_dtype_nan_weight_at_load tests/test_kquants.py::test_nan_scale_at_load
           tests/test_kquants.py::test_truncated_kquant_model tests/test_kquants.py::test_kquant_row_length_in_model
           tests/test_kquants.py::test_preset_matches_llamacpp[Q4_K_M] tests/test_kquants.py::test_preset_act_quant_q8[IQ4_XS]
           tests/test_kquants.py::test_dtype_quantizes_at_load[q3_k_m]
           tests/test_lora.py::test_bad_adapter_is_refused tests/test_lora.py::test_bad_adapter_names_and_files
           tests/test_cuda_models.py::test_cudasim_forward_matches_cpu tests/test_serving_load.py::test_tight_pool_never_stalls
           tests/test_tools.py::test_parser_c tests/test_tools.py::test_bad_tools_are_400_naming_the_field
           tests/test_limits.py::test_rate_limit_buckets_unit tests/test_limits.py::test_request_timeout_cuts_off_and_frees
           tests/test_embeddings.py::test_pooled_embeddings_match_transformers
           tests/test_embeddings.py::test_embeddings_bad_requests_name_the_field
           tests/test_router.py::test_metrics_merge_c
           tests/test_quant_ckpt.py::test_repacked_weights_are_exact tests/test_quant_ckpt.py::test_bad_gptq
           tests/test_quant_ckpt.py::test_bad_awq tests/test_quant_ckpt.py::test_bad_fp8
           tests/test_quant_ckpt.py::test_model_binary_refuses_bad_quantized_checkpoints tests/test_quant_ckpt.py::test_kernels
           tests/test_quant_moe.py::test_bad_expert_checkpoints tests/test_quant_moe.py::test_rules_choose_what_is_quantized_and_how
           tests/test_quant_moe.py::test_rules_unit
           tests/test_quant_moe.py::test_act_order_reorders_every_expert_of_a_layer
           tests/test_quant_moe.py::test_model_binary_refuses_disagreeing_experts tests/test_quant_moe.py::test_quantized_moe_matches_transformers[gptq4-act-order-mixtral]
           tests/test_spec.py::test_acceptance_rule_unit tests/test_spec.py::test_greedy_identical_to_plain_tiny
           tests/test_spec.py::test_draft_model_greedy_identical_tiny
           tests/test_gguf_families.py::test_f32_gguf_matches_transformers[deepseek2]
           tests/test_api_shapes.py::test_messages_bad_requests_are_400_in_anthropics_shape
           tests/test_api_shapes.py::test_responses_bad_requests_are_400_naming_the_field
           tests/test_api_shapes.py::test_responses_previous_response_id_continues_the_conversation"

tiers=""
tier_start=0
begin() { tier_start=$(date +%s); echo "== $1"; }
end() { tiers="$tiers${tiers:+, }$1 $(( $(date +%s) - tier_start ))s"; }

# The Python side of the setup (a few minutes in a fresh environment, mostly unpacking wheels
# on one core) runs beside the build, which needs only Debian's packages:
# - torch and transformers: `ingot check` of every models.lua entry takes its reference live (the
#   other oracle tests read committed fixtures); the full tier also installs the rest of the
#   oracle packages (llama-cpp-python, sentencepiece) for the tests that use them live
# - the fixture files the tree does not track: weights remade from their seeds, and for the full
#   tier llama.cpp's other presets (tests/fixtures/regenerate.py)
# - the 64-bit ARM cross compiler, its libraries and qemu-user (tests/test_arm.py), and Emscripten
#   with the libraries it links (tests/test_wasm.py): first, since apt cannot run beside setup.sh's
#   own apt-get of the test tools
python_setup() {
  "$root/scripts/setup.sh" --cross && "$root/scripts/setup.sh" --wasm &&
  if [ "$mode" = --full ]; then "$root/scripts/setup.sh" --oracles; else "$root/scripts/setup.sh" --check; fi &&
    "$root/scripts/fetch_smollm2.sh" >/dev/null &&
    if [ "$mode" = --full ]; then python3 "$root/tests/fixtures/regenerate.py" --oracles
    else python3 "$root/tests/fixtures/regenerate.py"; fi
}

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1


passed=0; failed=0
run_suite() { # label, env assignment, pytest targets...
  local label=$1 envset=$2; shift 2
  begin "$label"
  local log
  log=$(mktemp)
  env "$envset" python3 -m pytest "$@" -q -p no:cacheprovider -rs "${xdist[@]}" 2>&1 | tee "$log"
  local p f summary
  # pytest's last line: "N failed, N passed, N skipped, N errors in S s" (a test's own output may
  # say "1 error" too, so only this line counts)
  summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|errors?|skipped).* in [0-9.]+s' "$log" | tail -1)
  p=$(grep -Eo '[0-9]+ passed' <<<"$summary" | grep -Eo '[0-9]+' || echo 0)
  f=$(grep -Eo '[0-9]+ (failed|errors?)' <<<"$summary" | awk '{s+=$1} END {print s+0}')
  if ! grep -Eq '[0-9]+ passed' <<<"$summary"; then f=$((f + 1)); fi
  passed=$((passed + p)); failed=$((failed + f))
  rm -f "$log"
  end "$label"
}

begin "setup and build"
"$root/scripts/setup.sh" --debian || { echo "0 passed, 1 failed"; exit 1; }
setup_log=$(mktemp)
python_setup >"$setup_log" 2>&1 &
setup_pid=$!
built=1
make -s -j2 all tests || built=0
[ "$mode" = --fast ] || [ $built = 0 ] || make -s -j2 SAN=1 all tests || built=0
python_ok=1
wait $setup_pid || python_ok=0
cat "$setup_log"
rm -f "$setup_log"
[ $built = 1 ] && [ $python_ok = 1 ] || { echo "0 passed, 1 failed"; exit 1; }
end "setup and build"

# pytest-xdist is installed by now
jobs=${INGOT_TEST_JOBS:-$(nproc)}
xdist=()
# worksteal: an idle worker takes queued tests from the other, so the tier does not end with one
# worker finishing a long queue alone
if [ "$jobs" -gt 1 ] && python3 -c "import xdist" 2>/dev/null; then xdist=(-n "$jobs" --dist worksteal); fi

# the slowest tests of the optimized pass are listed at its end: where the tier's time goes
run_suite "optimized" INGOT_SAN=0 --durations=25 --durations-min=10 tests
if [ "$mode" = --full ]; then
  run_suite "ASan+UBSan" INGOT_SAN=1 tests
elif [ "$mode" = default ]; then
  san=()
  for f in $SAN_FILES; do [ -f "$f" ] && san+=("$f"); done
  # shellcheck disable=SC2086
  run_suite "ASan+UBSan" INGOT_SAN=1 "${san[@]}" $SAN_EXTRA
fi
echo "tiers: $tiers"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
