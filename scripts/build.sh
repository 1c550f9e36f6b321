#!/usr/bin/env bash
# Configures and builds tinfer (tests, examples, benchmarks) in ./build. Extra arguments go to
# the build (e.g. a target name). Safe to rerun: it rebuilds only what changed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${TINFER_BUILD_DIR:-$root/build}
jobs=${TINFER_JOBS:-$(nproc)}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
      -DTINFER_MODEL_PATH="$("$root/scripts/fetch_model.sh")" \
      -DTINFER_GEMMA3_PATH="$("$root/scripts/fetch_model.sh" gemma3)" ${TINFER_CMAKE_ARGS:-} >/dev/null
if [ $# -gt 0 ]; then
    cmake --build "$build" -j "$jobs" --target "$@"
else
    cmake --build "$build" -j "$jobs"
fi
