#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what is missing, fetches both real
# models, builds everything (CUDA too where nvcc exists) and runs every test with CTest.
# Arguments go to ctest (e.g. -L unit, -R gguf).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
"$root/scripts/fetch_model.sh" >/dev/null
"$root/scripts/fetch_model.sh" gemma3 >/dev/null
start=$(date +%s)
"$root/scripts/build.sh"
echo "test: build took $(( $(date +%s) - start )) s"
cd "${TINFER_BUILD_DIR:-$root/build}"
# A fresh build has no timings of earlier runs, so CTest would start tests in the order they are
# declared and a long one could start last; seed it with a CI run's (the longest start first).
if [ ! -f Testing/Temporary/CTestCostData.txt ]; then
    mkdir -p Testing/Temporary
    grep -v '^#' "$root/tests/ctest_costs.txt" > Testing/Temporary/CTestCostData.txt
fi
ctest --output-on-failure -j "${TINFER_JOBS:-$(nproc)}" "$@"
