#!/usr/bin/env bash
# What each explicit kernel instantiation costs: nvcc time and device code.
#
# For every entry of the instantiation list -- each attention shape of
# include/tinfer/kernels/cuda/instantiations.cuh (compiled_attention_shapes::*) x each KV codec
# the device attention kernels accept (DeviceKvCodec) x {prefill attention, split-KV decode
# attention}, and the quantized linear kernel (decode + GEMM kernels, one launcher) per weight
# type -- the script writes a tiny translation unit that instantiates just that kernel (through
# its host launcher, in a function that is never run), compiles it with nvcc exactly as the
# project does (-O3 -std=c++20 --expt-relaxed-constexpr --Werror all-warnings, sm_80 + sm_90a),
# and measures:
#   - the wall time and the CPU time (user + system, nvcc and its children, from
#     /usr/bin/time) of the nvcc command, and the device part of the wall time per architecture
#     (cicc + ptxas, from `nvcc --time`); on a busy machine the CPU time is the steadier figure;
#   - the size of the cubin per architecture (kept with `nvcc --keep`) and of the object's
#     .nv_fatbin section, i.e. the device code that lands in a binary;
#   - registers, static shared memory, stack and spills per kernel and architecture
#     (`--resource-usage`), and the dynamic shared memory the launcher asks for (prefill).
# Every figure except the per-kernel resources is given minus a baseline translation unit with
# the same #includes and no instantiation, so it is the cost of that one instantiation.
# Prints two markdown tables on stdout (progress goes to stderr).
#
# A measuring tool, not a test: it is not registered with CMake/CTest. About 42 nvcc runs of
# ~7 s each on a 2-core machine (~5-6 minutes); no GPU needed.
#
#   bench/cuda/instantiation_cost.sh
# Environment (all optional):
#   CUDA_HOME        default /usr/local/cuda (nvcc is $CUDA_HOME/bin/nvcc)
#   SHAPES           attention shapes, names from compiled_attention_shapes (default: all)
#   CODECS           KV codecs among f32 f16 bf16 fp8_e4m3 fp8_e5m2 int8 (default: all six)
#   WEIGHTS          linear weight types among q4_0 q4_1 q8_0 f16 bf16 f32
#                    (default: q4_0 q4_1 q8_0 f16 bf16)
#   LINEAR_IN        the linear kernels' input dimension template argument (default 4096, the
#                    hidden size of llama3_8b)
#   RUNS             compiles per instantiation, the one with least CPU time counts (default 1)
#   BASELINE_RUNS    compiles of the baseline, the one with least CPU time counts (default 3)
#   KEEP_TMP=1       keep the temporary directory (its path goes to stderr)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
nvcc=$cuda_home/bin/nvcc
[[ -x $nvcc ]] || { echo "nvcc not found at $nvcc (set CUDA_HOME)" >&2; exit 1; }
for tool in /usr/bin/time objcopy od size c++filt awk; do
    command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done

list=$repo/include/tinfer/kernels/cuda/instantiations.cuh
default_shapes=$(grep -oP 'inline constexpr AttentionShape \K\w+' "$list" | tr '\n' ' ')
shapes=${SHAPES:-$default_shapes}
codecs=${CODECS:-f32 f16 bf16 fp8_e4m3 fp8_e5m2 int8}
weights=${WEIGHTS:-q4_0 q4_1 q8_0 f16 bf16}
linear_in=${LINEAR_IN:-4096}
runs=${RUNS:-1}
baseline_runs=${BASELINE_RUNS:-3}
archs=(80 90a)

flags=(-O3 -std=c++20 --expt-relaxed-constexpr --Werror all-warnings -I"$repo/include")
for a in "${archs[@]}"; do flags+=(-gencode "arch=compute_$a,code=sm_$a"); done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tinfer_instantiation_cost.XXXXXX")
if [[ ${KEEP_TMP:-0} == 1 ]]; then
    echo "temporary files in $tmp" >&2
else
    trap 'rm -rf "$tmp"' EXIT
fi

codec_type() {
    case $1 in
        f32) echo tinfer::kv::Fp32Codec ;;
        f16) echo tinfer::kv::Fp16Codec ;;
        bf16) echo tinfer::kv::Bf16Codec ;;
        fp8_e4m3) echo tinfer::kv::Fp8E4M3Codec ;;
        fp8_e5m2) echo tinfer::kv::Fp8E5M2Codec ;;
        int8) echo tinfer::kv::Int8Codec ;;
        *) echo "unknown codec $1" >&2; exit 1 ;;
    esac
}

# The same includes in every translation unit, the baseline included.
prologue() {
    cat <<'EOF'
#include <tinfer/kernels/cuda/decode_attention.cuh>
#include <tinfer/kernels/cuda/instantiations.cuh>
#include <tinfer/kernels/cuda/linear.cuh>
#include <tinfer/kernels/cuda/prefill_attention.cuh>
#include <tinfer/kv/codec.hpp>

namespace k = tinfer::kernels::cuda;
// Facts read back from the object file: head_dim, group, dynamic shared memory bytes.
#define TINFER_INFO(a, b, c)                                                                 \
    extern "C" __attribute__((used, section(".tinfer_info"))) const long long tinfer_info[] = { \
        static_cast<long long>(a), static_cast<long long>(b), static_cast<long long>(c)}
EOF
}

write_attention_tu() {  # <file> <prefill|decode> <shape> <codec>
    local file=$1 kind=$2 shape=$3 codec
    codec=$(codec_type "$4")
    {
        prologue
        cat <<EOF
namespace {
constexpr auto shape = k::compiled_attention_shapes::$shape;
using Codec = $codec;
static_assert(k::DeviceKvCodec<Codec, shape.head_dim>);
}  // namespace
EOF
        if [[ $kind == prefill ]]; then
            cat <<'EOF'
TINFER_INFO(shape.head_dim, shape.group,
            (k::PrefillAttentionShape<Codec, shape.head_dim, shape.group>::shared_bytes));
void instantiate(k::PagedKvLayer const& layer, k::PrefillAttentionArguments const& arguments) {
    k::prefill_attention<Codec, shape.head_dim, shape.group>(layer, arguments);
}
EOF
        else
            cat <<'EOF'
TINFER_INFO(shape.head_dim, shape.group, 0);
void instantiate(k::PagedKvLayer const& layer, k::DecodeAttentionArguments const& arguments) {
    k::decode_attention<Codec, shape.head_dim, shape.group>(layer, arguments);
}
EOF
        fi
    } > "$file"
}

write_linear_tu() {  # <file> <weight dtype>
    local file=$1
    {
        prologue
        cat <<EOF
TINFER_INFO(0, 0, 0);
void instantiate(tinfer::kernels::WeightMatrix const& w, float const* x, int tokens, float* y) {
    k::linear<tinfer::DType::$2, $linear_in>(w, x, tokens, y);
}
EOF
    } > "$file"
}

write_baseline_tu() {
    { prologue; echo 'TINFER_INFO(0, 0, 0);'; } > "$1"
}

# measure <name> <runs>: compiles $tmp/<name>.cu; writes $tmp/<name>.facts (one line:
# wall_ms cpu_ms dev_80_ms dev_90a_ms cubin_80 cubin_90a fatbin head_dim group dynamic_smem) and
# $tmp/<name>.kernels (kernel arch registers static_smem stack spill_stores spill_loads).
measure() {
    local name=$1 n=$2 best="" i
    for ((i = 0; i < n; ++i)); do
        local dir=$tmp/$name.run$i
        mkdir -p "$dir"
        local start end
        start=$(date +%s%N)
        if ! /usr/bin/time -f '%U %S' -o "$dir/rusage" "$nvcc" "${flags[@]}" --resource-usage --keep --keep-dir "$dir" --time "$dir/time.csv" \
            -c "$tmp/$name.cu" -o "$dir/tu.o" > "$dir/ptxas.log" 2>&1; then
            cat "$dir/ptxas.log" >&2
            echo "nvcc failed on $tmp/$name.cu" >&2
            exit 1
        fi
        end=$(date +%s%N)
        local wall=$(((end - start) / 1000000)) cpu
        cpu=$(awk '{ printf "%d", ($1 + $2) * 1000 }' "$dir/rusage")
        local device=()
        local a
        for a in "${archs[@]}"; do
            device+=("$(awk -F' , ' -v arch="$a" '
                ($2 ~ /^cicc/ || $2 ~ /^ptxas/) {
                    x = $5; gsub(/ |compute_|sm_/, "", x); if (x == arch) t += $7 }
                END { printf "%d", t }' "$dir/time.csv")")
        done
        local cubins=()
        for a in "${archs[@]}"; do
            cubins+=("$(stat -c %s "$dir/$name.compute_$a.cubin")")
        done
        local fatbin
        fatbin=$(size -A "$dir/tu.o" | awk '$1 == ".nv_fatbin" { print $2 }')
        objcopy -O binary --only-section=.tinfer_info "$dir/tu.o" "$dir/info.bin"
        local info
        info=$(od -An -t d8 -v "$dir/info.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
        echo "$wall $cpu ${device[*]} ${cubins[*]} ${fatbin:-0} $info" > "$dir/facts"
        # ptxas -v: "Compiling entry function 'X' for 'sm_80'", then the stack/spill line and
        # "Used N registers, ... M bytes smem ...".
        awk '
            /Compiling entry function/ {
                match($0, /function .[^'\'']+/); fn = substr($0, RSTART + 10, RLENGTH - 10)
                match($0, /for .sm_[0-9a-z]+/); arch = substr($0, RSTART + 5, RLENGTH - 5)
                stack = 0; stores = 0; loads = 0 }
            /bytes stack frame/ && fn != "" {
                for (i = 1; i <= NF; ++i) {
                    if ($(i + 1) == "bytes" && $(i + 2) == "stack") stack = $i
                    if ($(i + 2) == "spill" && $(i + 3) ~ /^stores/) stores = $i
                    if ($(i + 2) == "spill" && $(i + 3) ~ /^loads/) loads = $i } }
            /Used [0-9]+ registers/ && fn != "" {
                regs = 0; smem = 0
                for (i = 1; i <= NF; ++i) {
                    if ($(i + 1) ~ /^registers/) regs = $i
                    if ($(i + 1) == "bytes" && $(i + 2) ~ /^smem/) smem = $i }
                print fn, arch, regs, smem, stack, stores, loads; fn = "" }
        ' "$dir/ptxas.log" > "$dir/kernels"
        if [[ -z $best ]] || (($(cut -d' ' -f2 "$dir/facts") < $(cut -d' ' -f2 "$tmp/$name.facts"))); then
            cp "$dir/facts" "$tmp/$name.facts"
            cp "$dir/kernels" "$tmp/$name.kernels"
            best=$i
        fi
        rm -rf "$dir"
    done
}

names=()
labels=()
add() { names+=("$1"); labels+=("$2"); }
for shape in $shapes; do
    for codec in $codecs; do
        for kind in prefill decode; do
            name=${kind}_${shape}_${codec}
            write_attention_tu "$tmp/$name.cu" "$kind" "$shape" "$codec"
            add "$name" "$kind attention, $shape, $codec"
        done
    done
done
for w in $weights; do
    write_linear_tu "$tmp/linear_$w.cu" "$w"
    add "linear_$w" "linear $w (in $linear_in)"
done

total=$((${#names[@]} + 1))
started=$(date +%s)
echo "[1/$total] baseline (${baseline_runs} runs)" >&2
write_baseline_tu "$tmp/baseline.cu"
measure baseline "$baseline_runs"
read -r b_wall b_cpu b_d80 b_d90 b_c80 b_c90 b_fat _ < "$tmp/baseline.facts"
for i in "${!names[@]}"; do
    echo "[$((i + 2))/$total] ${labels[$i]}" >&2
    measure "${names[$i]}" "$runs"
done
elapsed=$(($(date +%s) - started))

kb() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1024 }'; }
sec() { awk -v m="$1" 'BEGIN { printf "%.2f", m / 1000 }'; }

echo "nvcc: $("$nvcc" --version | grep -o 'release [0-9.]*, V[0-9.]*')," \
    "flags: ${flags[*]/#-I*/-Iinclude}"
echo "baseline TU (same includes, no instantiation): $(sec "$b_wall") s wall, $(sec "$b_cpu") s CPU," \
    "cicc+ptxas $(sec "$b_d80") s sm_80 / $(sec "$b_d90") s sm_90a," \
    "cubins $b_c80 / $b_c90 B, .nv_fatbin $b_fat B; $total compiles took ${elapsed} s"
echo
echo "| instantiation | head_dim, group | nvcc CPU (s) | nvcc wall (s) | cicc+ptxas sm_80 (s) | cicc+ptxas sm_90a (s) | cubin sm_80 (KiB) | cubin sm_90a (KiB) | fatbin (KiB) |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
sum_wall=0 sum_cpu=0 sum_fat=0
for i in "${!names[@]}"; do
    read -r wall cpu d80 d90 c80 c90 fat hd grp _ < "$tmp/${names[$i]}.facts"
    shape_cell="-"
    ((hd > 0)) && shape_cell="$hd, $grp"
    sum_wall=$((sum_wall + wall - b_wall))
    sum_cpu=$((sum_cpu + cpu - b_cpu))
    sum_fat=$((sum_fat + fat - b_fat))
    echo "| ${labels[$i]} | $shape_cell | $(sec $((cpu - b_cpu))) | $(sec $((wall - b_wall))) | $(sec $((d80 - b_d80))) |" \
        "$(sec $((d90 - b_d90))) | $(kb $((c80 - b_c80))) | $(kb $((c90 - b_c90))) |" \
        "$(kb $((fat - b_fat))) |"
done
echo "| **all of the above** | | $(sec "$sum_cpu") | $(sec "$sum_wall") | | | | | $(kb "$sum_fat") |"
echo
echo "| instantiation | kernel | registers sm_80 / sm_90a | static smem (B) | dynamic smem (B) | stack (B) | spill stores+loads (B) sm_80 / sm_90a |"
echo "|---|---|---:|---:|---:|---:|---:|"
for i in "${!names[@]}"; do
    read -r _ _ _ _ _ _ _ _ _ dyn _ < "$tmp/${names[$i]}.facts"
    # One row per kernel: the sm_80 and sm_90a lines side by side.
    c++filt < "$tmp/${names[$i]}.kernels" | awk -v label="${labels[$i]}" -v dyn="$dyn" '
        {   # demangled: "ns::kernel<targs>(args) sm_80 regs smem stack stores loads"
            n = NF; loads = $n; stores = $(n - 1); stack = $(n - 2); smem = $(n - 3)
            regs = $(n - 4); arch = $(n - 5)
            name = $0; sub(/\(.*/, "", name); sub(/<.*/, "", name); sub(/.*::/, "", name)
            if (!(name in seen)) { seen[name] = 1; order[++count] = name }
            r[name, arch] = regs; s[name] = smem; st[name] = stack
            sp[name, arch] = stores + loads }
        END {
            for (j = 1; j <= count; ++j) {
                x = order[j]
                d = (x ~ /^prefill_attention_kernel/) ? dyn : 0
                printf "| %s | `%s` | %s / %s | %s | %s | %s | %s / %s |\n", label, x,
                    r[x, "sm_80"], r[x, "sm_90a"], s[x], d, st[x], sp[x, "sm_80"], sp[x, "sm_90a"] } }'
done
