#!/usr/bin/env bash
# Installs the Python packages the test suite's Python parts need, with pip for the current
# user's python3. Safe to rerun: pip skips what is already installed.
#   openai  the official client, run against examples/serve by tests/server (that test is
#           skipped, exit 77, without it)
#   numpy   the float64 reference forward pass, tests/reference/llama_reference.py, that the
#           synthetic-model tests run on GGUF files of their own (its --logits mode)
#   gguf    llama.cpp's reader and dequantizer, which that reference reads the files with
#   jsonschema  validates the server's structured output against its schema (tests/server)
set -euo pipefail
packages=(openai numpy gguf jsonschema)
missing=()
for p in "${packages[@]}"; do
    python3 -c "import $p" 2>/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "python_deps: installing ${missing[*]}"
    # A Debian-managed python3 refuses plain pip installs (PEP 668); the suite's needs are
    # small and self-contained, so install beside the system packages there.
    python3 -m pip install --quiet "${missing[@]}" 2>/dev/null ||
        python3 -m pip install --quiet --break-system-packages "${missing[@]}"
fi
