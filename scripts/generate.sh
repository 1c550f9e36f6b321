#!/usr/bin/env bash
# Generates text with a real model, from a fresh machine: installs what is missing, fetches the
# model, builds examples/generate and runs it. Arguments go to generate (see
# `scripts/generate.sh --help`); without any, the default model answers a default chat prompt.
#   --model smollm2 | gemma3 | FILE.gguf   the model (default smollm2: SmolLM2-135M-Instruct);
#                                          a name is fetched and cached by scripts/fetch_model.sh
#   --device cuda                          run on the GPU: the build then includes the CUDA
#                                          backend (nvcc needed; otherwise it is left out, which
#                                          keeps the first build short)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
args=()
model=
cuda=OFF
while [ $# -gt 0 ]; do
    case "$1" in
        -m|--model) model=$2; shift 2 ;;
        --model=*) model=${1#--model=}; shift ;;
        --device) [ "${2:-}" = cuda ] && cuda=ON; args+=("$1" "${2:-}"); shift 2 ;;
        --device=cuda) cuda=ON; args+=("$1"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done
case "${model:-smollm2}" in
    smollm2|gemma3) model=$("$root/scripts/fetch_model.sh" "${model:-smollm2}") ;;
esac
build_dir=${TINFER_BUILD_DIR:-$root/build-generate}
[ "$cuda" = ON ] && build_dir=${TINFER_BUILD_DIR:-$root/build-generate-cuda}
TINFER_CMAKE_ARGS="${TINFER_CMAKE_ARGS:-} -DTINFER_CUDA=$cuda" TINFER_BUILD_DIR="$build_dir" \
    "$root/scripts/build.sh" generate >/dev/null
generate="$build_dir/examples/generate"
if [ ${#args[@]} -eq 0 ]; then
    # Greedy, so the first run on any machine prints the same answer.
    exec "$generate" --model "$model" --chat --temperature 0 \
        --prompt "What is a KV cache in a transformer, in two sentences?"
fi
exec "$generate" --model "$model" "${args[@]}"
