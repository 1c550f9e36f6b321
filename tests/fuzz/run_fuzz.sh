#!/usr/bin/env bash
# Builds one fuzz target with libFuzzer + ASan + UBSan (-fno-sanitize-recover=undefined) and
# runs it for TINFER_FUZZ_SECONDS (default 60) on its seed corpus. Fails on any crash, sanitizer
# report, failed check, uncaught exception or hang (-timeout). Where clang++ with a libFuzzer
# runtime that builds the project's C++20, or a model file the target needs, is missing, it
# exits 77 (skipped) - unless CI=true, where that is a failure: CI installs what it needs.
# usage: run_fuzz.sh <target> <project source dir> <work dir>
#   target: gguf_fuzz, tokenizer_bpe_fuzz, tokenizer_sentencepiece_fuzz, chat_template_fuzz,
#           openai_request_fuzz, http_request_fuzz (tests/fuzz/<target>.cpp)
# env: TINFER_FUZZ_SECONDS, TINFER_FUZZ_CXX (default: clang++-16, else clang++),
#      TINFER_MODEL_PATH (SmolLM2), TINFER_GEMMA3_PATH (Gemma 3), CI
set -uo pipefail

target=$1
source_dir=$2
work_dir=$3
seconds=${TINFER_FUZZ_SECONDS:-60}
fuzz_dir="$source_dir/tests/fuzz"

# Missing tools or data: a skip on a developer's machine, a failure in CI.
unavailable() {
    if [ "${CI:-}" = "true" ]; then
        echo "FAIL ($target): $1 (CI=true: a missing dependency fails the run)"
        exit 1
    fi
    echo "SKIP ($target): $1"
    exit 77
}

# What each target needs: the model files it reads (environment variable names) and the
# longest input worth trying.
models=()
max_len=4096
case "$target" in
    gguf_fuzz) max_len=16384 ;;
    tokenizer_bpe_fuzz) models=(TINFER_MODEL_PATH) ;;
    tokenizer_sentencepiece_fuzz) models=(TINFER_GEMMA3_PATH) ;;
    chat_template_fuzz) models=(TINFER_MODEL_PATH TINFER_GEMMA3_PATH) ;;
    openai_request_fuzz) max_len=8192 ;;
    http_request_fuzz) max_len=20000 ;;  # room for a header over the 16 KiB limit
    *)
        echo "FAIL: unknown fuzz target '$target'"
        exit 1
        ;;
esac

# clang 14 (Debian 12's default) cannot instantiate libstdc++ 12's std::ranges, which the
# tokenizer and sampling headers use: prefer clang 16 (scripts/setup.sh installs it).
if [ -n "${TINFER_FUZZ_CXX:-}" ]; then
    cxx=$TINFER_FUZZ_CXX
elif command -v clang++-16 >/dev/null 2>&1; then
    cxx=clang++-16
else
    cxx=clang++
fi
command -v "$cxx" >/dev/null 2>&1 || unavailable "$cxx not found; fuzzing needs clang++ with libFuzzer"

for variable in "${models[@]}"; do
    path=${!variable:-}
    [ -n "$path" ] || unavailable "$variable is not set (the model file this target reads)"
    [ -f "$path" ] || unavailable "$variable=$path does not exist (scripts/fetch_model.sh fetches it)"
done

mkdir -p "$work_dir/corpus"
# A trivial fuzzer that uses std::ranges first: when it fails to build, the toolchain is
# missing or too old (unavailable); when the real target then fails to build, that is a bug.
probe="$work_dir/probe.cpp"
printf '%s\n' '#include <algorithm>' '#include <cstddef>' '#include <cstdint>' '#include <vector>' \
    'extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* d, std::size_t n) {' \
    '    std::vector<std::uint8_t> v(d, d + n);' \
    '    std::ranges::sort(v);' \
    '    return static_cast<int>(std::ranges::unique(v).size() > n);' \
    '}' >"$probe"
if ! "$cxx" -std=c++20 -fsanitize=fuzzer,address,undefined "$probe" -o "$work_dir/probe" \
    2>"$work_dir/probe.log"; then
    head -n 20 "$work_dir/probe.log"
    unavailable "$cxx cannot build a C++20 libFuzzer target with -fsanitize=fuzzer,address,undefined (clang 14 cannot build libstdc++ 12's std::ranges: scripts/setup.sh installs clang-16)"
fi

# -gline-tables-only: file:line in the sanitizers' reports without full debug info, which made
# each build ~10% longer (25.5 s against 23.0 s for gguf_fuzz).
flags=(-std=c++20 -O1 -gline-tables-only -fsanitize=fuzzer,address,undefined
       -fno-sanitize-recover=undefined
       "-I$source_dir/include" "-I$source_dir/examples/serve" "-I$fuzz_dir"
       "-DTINFER_TEST_DATA_DIR=\"$source_dir/tests/data\"")
binary="$work_dir/$target"
# Rebuilt only when the target or a header it includes changed since (the compiler's own
# dependency list), so a rerun on a developer's machine starts at once.
stale=1
if [ -x "$binary" ] && [ -f "$binary.d" ]; then
    stale=0
    [ "${BASH_SOURCE[0]}" -nt "$binary" ] && stale=1
    for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$binary.d"); do
        if [ ! -e "$dep" ] || [ "$dep" -nt "$binary" ]; then
            stale=1
            break
        fi
    done
fi
if [ "$stale" -eq 1 ]; then
    echo "building $target with $cxx"
    start=$(date +%s)
    "$cxx" "${flags[@]}" -MMD -MF "$binary.d" "$fuzz_dir/$target.cpp" -lutf8proc -pthread \
        -o "$binary" || { echo "FAIL: $target does not build"; exit 1; }
    echo "$target: built in $(( $(date +%s) - start )) s"
fi

# Seeds: the committed corpus; the GGUF target's are written by the project's own GGUF writer
# and the golden file gguf-py wrote.
seeds="$fuzz_dir/corpus/$target"
if [ "$target" = gguf_fuzz ]; then
    seeds="$work_dir/seeds"
    mkdir -p "$seeds"
    "$cxx" -std=c++20 -O1 "-I$source_dir/include" "$fuzz_dir/gguf_fuzz_seeds.cpp" \
        -o "$work_dir/gguf_fuzz_seeds" || exit 1
    "$work_dir/gguf_fuzz_seeds" "$seeds" || exit 1
    cp "$source_dir"/tests/data/gguf/golden_v3.gguf "$seeds/" 2>/dev/null || true
fi
[ -n "$(ls -A "$seeds" 2>/dev/null)" ] || { echo "FAIL: no seeds in $seeds"; exit 1; }
dict=()
[ -f "$fuzz_dir/$target.dict" ] && dict=("-dict=$fuzz_dir/$target.dict")

# Reports with file:line: clang 16's runtime does not find Debian's unversioned symbolizer.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
    for symbolizer in llvm-symbolizer-16 llvm-symbolizer; do
        if command -v "$symbolizer" >/dev/null 2>&1; then
            export ASAN_SYMBOLIZER_PATH=$(command -v "$symbolizer")
            break
        fi
    done
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

log="$work_dir/fuzz.log"
rm -f "$work_dir"/crash-* "$work_dir"/leak-* "$work_dir"/timeout-* "$work_dir"/oom-*
# New inputs go to corpus/ (in the build tree); the seeds are read only.
"$binary" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work_dir/" "${dict[@]}" \
    "$work_dir/corpus" "$seeds" >"$log" 2>&1
status=$?
grep -v '^"' "$log" | tail -n 25  # without the recommended-dictionary lines
runs=$(grep -Eo 'Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -n 1)
# A run that stopped at a crash prints no 'Done' line; its statistics still count the inputs.
executed=${runs:-$(grep -Eo 'number_of_executed_units: *[0-9]+' "$log" | grep -Eo '[0-9]+$' | tail -n 1)}
crashes=$(find "$work_dir" -maxdepth 1 \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
    -o -name 'oom-*' \) | wc -l)
echo "$target: ${executed:-0} executions in ${seconds} s, $crashes crashes (exit status $status)"
if [ "$status" -ne 0 ]; then
    echo "FAIL: the fuzzer found a crash; the reproducer (crash-*/leak-*/timeout-*/oom-*) is in" \
        "$work_dir; rerun it with: $binary <file>"
    exit 1
fi
[ -n "$runs" ] || { echo "FAIL: no 'Done N runs' line from libFuzzer"; exit 1; }
exit 0
