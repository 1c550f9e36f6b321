#!/usr/bin/env bash
# The GPU suite in one go, for a machine with an NVIDIA GPU and this repository:
#   configure with the CUDA backend on, build every CUDA test and the CUDA benchmarks, run the
#   tests (ctest label "cuda"), the attention benchmarks and the end-to-end SmolLM2 benchmark
#   (DeviceLlama), and print a short table last.
# On a machine that shows a GPU (nvidia-smi -L lists one, or /dev/nvidia0 ... exists) nothing may
# skip: a skipped test or benchmark there fails the suite, as the programs themselves fail when
# CUDA cannot use a GPU the machine shows (kernels/cuda/device_probe.hpp). Skips are only for
# machines without a GPU.
# Meant to finish in under 8 minutes on a 16-core machine (each step has its own time limit).
# No model file needs to reach the GPU machine: the tests and benchmarks write the models they
# need with the project's GGUF writer (SmolLM2's shape, Llama-3-8B's in Q4_0, the Engine test's).
#
#   bench/gpu_suite.sh [build-dir]      (default: build-gpu next to this repository's sources)
# Environment: CUDA_HOME (default /usr/local/cuda), JOBS (default: all cores),
#              TINFER_CUDA_ARCHITECTURES (default: the project's "80;90a"),
#              TINFER_MODEL_PATH (default: scripts/fetch_model.sh's SmolLM2-135M-Instruct Q4_1;
#              without it, as on a GPU machine that receives only the repository, the model
#              test and the end-to-end benchmark write a model of its shape with the GGUF writer).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-$repo/build-gpu}
cuda_home=${CUDA_HOME:-/usr/local/cuda}
jobs=${JOBS:-$(nproc)}
log=$build/gpu_suite.log
mkdir -p "$build"
: > "$log"
export PATH=$cuda_home/bin:$PATH
model=${TINFER_MODEL_PATH:-$HOME/.cache/tinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf}
[[ -f $model ]] || echo "model not found at $model: the model test (all but its golden comparison) and the end-to-end benchmark run on a model of SmolLM2's shape they write with the GGUF writer"

status_configure=skipped status_build=skipped status_tests=skipped status_bench=skipped
status_e2e=skipped status_sdpa=skipped
tests_summary="not run"

step() {  # step <seconds> <description> <command...>: runs with a time limit, logs everything
    local limit=$1 what=$2
    shift 2
    echo "== $what" | tee -a "$log"
    local start=$SECONDS
    timeout --signal=TERM --kill-after=10 "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    echo "   rc=$rc after $((SECONDS - start)) s" | tee -a "$log"
    return $rc
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee -a "$log" ||
    echo "nvidia-smi not found" | tee -a "$log"
# The same test device_probe.hpp makes: a GPU node (nvidia0, nvidia1, ...; not nvidiactl) or a
# GPU in nvidia-smi's list.
gpu_machine=no
if compgen -G "/dev/nvidia[0-9]*" > /dev/null || nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
    gpu_machine=yes
fi
echo "machine shows a GPU: $gpu_machine (yes: no test or benchmark may skip)" | tee -a "$log"
skip_status() {  # skip_status <why>: what a skip counts as on this machine
    if [[ $gpu_machine == yes ]]; then echo "FAILED (skipped on a GPU machine: $1)"; else echo "skipped ($1)"; fi
}

cuda_options=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$cuda_home/bin/nvcc"
    "-DTINFER_MODEL_PATH=$model")
[[ -n ${TINFER_CUDA_ARCHITECTURES:-} ]] &&
    cuda_options+=("-DTINFER_CUDA_ARCHITECTURES=$TINFER_CUDA_ARCHITECTURES")
if step 120 "configure ($build)" cmake -S "$repo" -B "$build" -DTINFER_CUDA=ON \
    -DTINFER_BUILD_EXAMPLES=OFF "${cuda_options[@]}"; then
    status_configure=ok
else
    # A GPU machine without the host-side dependencies (Boost.Test, utf8proc) can still build
    # and run the CUDA tests and benchmarks: bench/cuda/standalone needs only CUDA and OpenMP.
    build=$build/standalone
    if step 120 "configure the CUDA-only project ($build)" cmake -S "$repo/bench/cuda/standalone" \
        -B "$build" "${cuda_options[@]}"; then
        status_configure="ok (CUDA-only fallback)"
    else
        status_configure=FAILED
    fi
fi

if [[ $status_configure == ok* ]]; then
    # Every test labelled "cuda" is a target of the same name (tinfer_add_cuda_test), plus the benchmarks.
    mapfile -t cuda_tests < <(cd "$build" && ctest -N -L cuda 2>/dev/null | awk '/Test +#/ {print $3}')
    targets=("${cuda_tests[@]}")
    # bench/cuda is there once bench/CMakeLists.txt adds it (if(TINFER_WITH_CUDA) add_subdirectory(cuda)).
    if [[ -d $build/bench/cuda ]]; then
        targets+=(cuda_attention_bench cuda_generate_bench)
    else
        echo "   bench/cuda is not part of the build: benchmarks skipped" | tee -a "$log"
    fi
    echo "   targets: ${targets[*]}" | tee -a "$log"
    if step 300 "build ${#targets[@]} CUDA targets with $jobs jobs" \
        cmake --build "$build" -j "$jobs" --target "${targets[@]}"; then
        status_build=ok
    else
        status_build=FAILED
    fi
fi

if [[ $status_build == ok ]]; then
    step 240 "CUDA tests" ctest --test-dir "$build" -L cuda --output-on-failure --timeout 200
    rc=$?
    skipped=$(grep -c "(Skipped)" "$log")
    tests_summary="$(grep -E "tests passed|tests failed" "$log" | tail -1), $skipped skipped"
    [[ $rc == 0 ]] && status_tests=ok || status_tests=FAILED
    if [[ $status_tests == ok && $skipped != 0 && $gpu_machine == yes ]]; then
        status_tests="FAILED ($skipped skipped on a GPU machine)"
    fi
    bench=$(find "$build" -name cuda_attention_bench -type f -perm -u+x | head -1)
    if [[ -n $bench ]]; then
        step 150 "attention benchmarks" "$bench"
        case $? in
            0) status_bench=ok ;;
            77) status_bench=$(skip_status "no CUDA device") ;;
            *) status_bench=FAILED ;;
        esac
    fi
    # PyTorch's SDPA on the same shapes (the GPU machine's image has PyTorch): a comparison,
    # not a test, so its absence is reported, not failed.
    step 120 "PyTorch SDPA on the attention benchmarks' shapes" python3 "$repo/bench/cuda/sdpa_reference.py"
    case $? in
        0) status_sdpa=ok ;;
        77) status_sdpa="n/a (no PyTorch or no device)" ;;
        *) status_sdpa=FAILED ;;
    esac
    generate=$(find "$build" -name cuda_generate_bench -type f -perm -u+x | head -1)
    if [[ -n $generate ]]; then
        step 240 "end-to-end benchmarks: SmolLM2, Llama-3-8B shape Q4_0 (DeviceLlama)" "$generate" "$model"
        case $? in
            0) status_e2e=ok ;;
            77) status_e2e=$(skip_status "no CUDA device or no model") ;;
            *) status_e2e=FAILED ;;
        esac
    fi
fi

value() {
    local found
    found=$(awk -v name="$1" '$1 == "RESULT" && $2 == name {print $3 " " $4}' "$log" | tail -1)
    echo "${found:-n/a}"
}
ratio() {  # ratio <numerator result> <denominator result>: their quotient in %, or n/a
    awk -v a="$1" -v b="$2" '$1 == "RESULT" && $2 == a {x = $3} $1 == "RESULT" && $2 == b {y = $3}
        END {if (x != "" && y > 0) printf "%.1f %%\n", 100 * x / y; else print "n/a"}' "$log"
}
echo
echo "================ tinfer GPU suite (full log: $log) ================"
printf '%-44s %s\n' "configure" "$status_configure" "build" "$status_build" \
    "tests (ctest -L cuda)" "$status_tests: ${tests_summary:-none}" "benchmarks" "$status_bench" \
    "end-to-end benchmark" "$status_e2e" "PyTorch SDPA reference" "$status_sdpa"
printf '%-44s %s\n' \
    "decode attention b64 4K 32q/8kv d128 bf16" "$(value decode_attention_ms)" \
    "  achieved K+V read bandwidth" "$(value decode_attention_gbs)" \
    "  cudaMemcpy D2D (read + write)" "$(value memcpy_d2d_gbs)" \
    "  decode / memcpy (target >= 80 %)" "$(value decode_attention_of_memcpy)" \
    "  PyTorch SDPA, contiguous KV" "$(value sdpa_decode_gbs)" \
    "  decode / SDPA (target >= 100 %)" "$(ratio decode_attention_gbs sdpa_decode_gbs)" \
    "prefill attention 4K d128 32 heads causal" "$(value prefill_attention_ms)" \
    "  prefill attention" "$(value prefill_attention_tflops)" \
    "  cuBLAS bf16 GEMM 8192^3" "$(value cublas_bf16_gemm_tflops)" \
    "  cuBLAS fp32 GEMM 8192^3" "$(value cublas_fp32_gemm_tflops)" \
    "  prefill / bf16 GEMM (target >= 30 %)" "$(value prefill_attention_of_bf16_gemm)" \
    "  PyTorch SDPA, causal" "$(value sdpa_prefill_tflops)" \
    "  prefill / SDPA" "$(ratio prefill_attention_tflops sdpa_prefill_tflops)" \
    "  prefill / fp32 GEMM" "$(value prefill_attention_of_fp32_gemm)" \
    "end-to-end SmolLM2 decode tg128, batch 1" "$(value e2e_decode_b1_tps)" \
    "end-to-end SmolLM2 decode tg128, batch 64" "$(value e2e_decode_b64_tps)" \
    "end-to-end SmolLM2 prefill pp512" "$(value e2e_prefill_pp512_tps)" \
    "  on tensor cores (bf16 prefill products)" "$(value e2e_prefill_pp512_tc_tps)" \
    "end-to-end SmolLM2 prefill 64 x 128" "$(value e2e_prefill_b64_tps)" \
    "end-to-end Llama-3-8B shape Q4_0 prefill pp512" "$(value e2e_8b_prefill_pp512_tps)" \
    "  on tensor cores (bf16 prefill products)" "$(value e2e_8b_prefill_pp512_tc_tps)" \
    "end-to-end Llama-3-8B shape Q4_0 decode, batch 1" "$(value e2e_8b_decode_b1_tps)" \
    "  of its weight-bandwidth roofline (target >= 50 %)" "$(value e2e_8b_decode_b1_of_roofline)" \
    "end-to-end Llama-3-8B shape Q4_0 decode, batch 64" "$(value e2e_8b_decode_b64_tps)" \
    "with CUDA graphs: SmolLM2 decode, batch 1" "$(value e2e_decode_b1_graphs_tps)" \
    "  SmolLM2 decode, batch 64" "$(value e2e_decode_b64_graphs_tps)" \
    "  Llama-3-8B shape decode, batch 1" "$(value e2e_8b_decode_b1_graphs_tps)" \
    "  Llama-3-8B shape decode, batch 64" "$(value e2e_8b_decode_b64_graphs_tps)"
grep '^BREAKDOWN' "$log" | sed 's/^BREAKDOWN //' 
[[ $status_configure == ok* && $status_build == ok && $status_tests == ok &&
    $status_bench != FAILED* && $status_e2e != FAILED* && $status_sdpa != FAILED* ]]
