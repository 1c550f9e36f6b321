#!/usr/bin/env bash
# Installs the Debian packages tinfer's build, tests and examples need. Safe to rerun: it
# installs only what is missing.
set -euo pipefail
packages=(cmake g++ clang libclang-rt-14-dev clang-16 libclang-rt-16-dev libomp-dev
          libboost-test-dev libutf8proc-dev libcli11-dev nlohmann-json3-dev libcpp-httplib-dev
          openmpi-bin libopenmpi-dev python3 python3-pip python3-jsonschema python3-jinja2
          gnuplot-nox libopenblas-dev libsimde-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
"$(dirname "${BASH_SOURCE[0]}")/python_deps.sh"
