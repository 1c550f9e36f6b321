#!/usr/bin/env bash
# Builds the GGUF fuzz target with libFuzzer + ASan + UBSan and runs it for
# TINFER_FUZZ_SECONDS (default 60) on a seed corpus of small valid files. Fails on any crash
# or sanitizer report; exits 77 (skipped) when no clang++ with libFuzzer is available.
# usage: run_fuzz.sh <project source dir> <work dir>
set -uo pipefail

source_dir=$1
work_dir=$2
cxx=${TINFER_FUZZ_CXX:-clang++}
seconds=${TINFER_FUZZ_SECONDS:-60}
include="-I${source_dir}/include"

if ! command -v "$cxx" >/dev/null 2>&1; then
    echo "SKIP: $cxx not found; the GGUF fuzz test needs clang++ with libFuzzer"
    exit 77
fi
mkdir -p "$work_dir/corpus" "$work_dir/seeds"

# A trivial fuzzer first: when it fails to link, the libFuzzer runtime is missing (skip);
# when the real target then fails to build, that is a genuine failure.
probe="$work_dir/probe.cpp"
printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const*, std::size_t) { return 0; }' >"$probe"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe" -o "$work_dir/probe" 2>"$work_dir/probe.log"; then
    echo "SKIP: $cxx cannot link -fsanitize=fuzzer,address,undefined:"
    cat "$work_dir/probe.log"
    exit 77
fi

echo "building gguf_fuzz with $cxx"
"$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    $include "${source_dir}/tests/fuzz/gguf_fuzz.cpp" -o "$work_dir/gguf_fuzz" || exit 1
"$cxx" -std=c++20 -O1 $include "${source_dir}/tests/fuzz/gguf_fuzz_seeds.cpp" \
    -o "$work_dir/gguf_fuzz_seeds" || exit 1

# Seeds: the writer's small files and the golden file gguf-py wrote.
"$work_dir/gguf_fuzz_seeds" "$work_dir/seeds" || exit 1
cp "${source_dir}"/tests/data/gguf/golden_v3.gguf "$work_dir/seeds/" 2>/dev/null || true

log="$work_dir/fuzz.log"
# New inputs go to corpus/ (in the build tree); seeds/ is read only.
"$work_dir/gguf_fuzz" -max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$work_dir/" "$work_dir/corpus" "$work_dir/seeds" >"$log" 2>&1
status=$?
tail -n 25 "$log"
runs=$(grep -Eo 'Done [0-9]+ runs' "$log" | grep -Eo '[0-9]+' | tail -n 1)
echo "gguf_fuzz: ${runs:-0} executions in ${seconds} s (exit status $status)"
if [ "$status" -ne 0 ]; then
    echo "FAIL: the fuzzer found a crash; the reproducer (crash-*/leak-*/timeout-*) is in $work_dir"
    exit 1
fi
[ -n "$runs" ] || { echo "FAIL: no 'Done N runs' line from libFuzzer"; exit 1; }
exit 0
