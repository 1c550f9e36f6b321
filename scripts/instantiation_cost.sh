#!/usr/bin/env bash
# What each kernel instantiation costs to compile (issue 16): bench/instantiation_cost.cpp once
# per part and form, as the benchmarks are built (g++ -O3 -march=native -fopenmp, C++20), one
# compile at a time; prints compile seconds and the object's code bytes (size's text column).
# usage: scripts/instantiation_cost.sh   (prints a markdown table)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cxx=${CXX:-g++}
flags=(-std=c++20 -O3 -march=native -fopenmp -I"$root/include" -c)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
names=("nothing (the headers: the baseline)" "attention (prefill and decode)" "RMSNorm row" "RoPE rotation" "whole forward pass, both models")
echo "| part | form | instantiations | compile s | code bytes |"
echo "|---|---|---:|---:|---:|"
for part in 0 1 2 3 4; do
    forms="1 0"
    [ $part = 0 ] && forms=0
    for form in $forms; do
        object="$work/part$part-$form.o"
        start=$EPOCHREALTIME
        "$cxx" "${flags[@]}" -DTINFER_PART=$part -DTINFER_STATIC=$form \
            "$root/bench/instantiation_cost.cpp" -o "$object"
        end=$EPOCHREALTIME
        seconds=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.1f", b - a }')
        text=$(size "$object" | awk 'NR == 2 { print $1 }')
        case "$part-$form" in
            0-0) count=0 ;;
            1-1) count="3 (SmolLM2; Gemma sliding, global)" ;;
            1-0) count=1 ;;
            2-1) count="3 (widths 576, 640, 256)" ;;
            2-0) count=1 ;;
            3-1) count="2 (d64 adjacent, d256 NeoX)" ;;
            3-0) count="2 (one per pairing)" ;;
            4-1) count="2 models, StaticShapes" ;;
            4-0) count="2 models, DynamicShapes" ;;
        esac
        form_name=$([ $form = 1 ] && echo static || echo dynamic)
        [ $part = 0 ] && form_name=-
        echo "| ${names[$part]} | $form_name | $count | $seconds | $text |"
    done
done
