#!/usr/bin/env bash
# Generates text with the default model, from a fresh machine: installs what is missing,
# fetches SmolLM2-135M-Instruct, builds examples/generate and runs it. Arguments go to generate
# (see `scripts/generate.sh --help`); without any, it answers a default chat prompt.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
model=$("$root/scripts/fetch_model.sh")
TINFER_CMAKE_ARGS="${TINFER_CMAKE_ARGS:-} -DTINFER_CUDA=OFF" TINFER_BUILD_DIR="${TINFER_BUILD_DIR:-$root/build-generate}" \
    "$root/scripts/build.sh" generate >/dev/null
generate="${TINFER_BUILD_DIR:-$root/build-generate}/examples/generate"
if [ $# -eq 0 ]; then
    # Greedy, so the first run on any machine prints the same answer.
    exec "$generate" --model "$model" --chat --temperature 0 \
        --prompt "What is a KV cache in a transformer, in two sentences?"
fi
exec "$generate" --model "$model" "$@"
