#pragma once
// Rotary position embedding: pair i at position p turns by theta = p * base^(-2i / head_dim).
// The pair is (x[2i], x[2i+1]) (adjacent: the layout GGUF's converter leaves Llama's attn_q /
// attn_k in) or (x[i], x[i + head_dim/2]) (neox: Qwen2, Gemma), as kernels::apply_rope_row.
// The same two steps as kernels::rope_table / kernels::apply_rope: a (cos, sin) table computed
// in double and rounded once to float (a float angle loses whole radians at large positions),
// then 2 products and a sum per element, for every head of every row.
#include <cuda_runtime.h>

#include <cstddef>

#include <tinfer/config/model_config.hpp>
#include <tinfer/kernels/cuda/check.cuh>

namespace tinfer::kernels::cuda {

template <int HeadDim>
__global__ void __launch_bounds__(HeadDim / 2)
    rope_table_kernel(double base, int const* __restrict__ positions, float* __restrict__ cos_sin) {
    int const row = static_cast<int>(blockIdx.x);
    int const pair = static_cast<int>(threadIdx.x);
    double const inverse_frequency = pow(base, -2.0 * pair / HeadDim);
    double const angle = static_cast<double>(positions[row]) * inverse_frequency;
    double sine, cosine;
    sincos(angle, &sine, &cosine);
    float* out = cos_sin + static_cast<std::size_t>(row) * HeadDim + 2 * pair;
    out[0] = static_cast<float>(cosine);
    out[1] = static_cast<float>(sine);
}

// cos_sin: [rows][HeadDim / 2][2] (cos, sin) for the angle of each pair at positions[row].
template <int HeadDim>
void rope_table(double base, int const* positions, int rows, float* cos_sin,
                cudaStream_t stream = nullptr) {
    static_assert(HeadDim % 2 == 0, "rope: head_dim must be even (adjacent pairs rotate)");
    if (rows <= 0) return;
    check_before_launch("rope_table_kernel");
    rope_table_kernel<HeadDim><<<rows, HeadDim / 2, 0, stream>>>(base, positions, cos_sin);
    check_launch("rope_table_kernel");
}

// Heads of a row per thread block: a block of rope_threads threads covers whole heads.
inline constexpr int rope_threads = 256;

template <int HeadDim, RopePairing Pairing>
__global__ void __launch_bounds__(rope_threads)
    apply_rope_kernel(float* __restrict__ x, int rows, int heads, std::size_t row_stride,
                      float const* __restrict__ cos_sin) {
    constexpr int pairs = HeadDim / 2;
    int const index =
        static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);  // head * pairs + pair
    if (index >= heads * pairs) return;
    int const head = index / pairs;
    int const pair = index % pairs;
    // Rows stride over grid y, which holds at most 65,535 blocks (grid_limits.hpp): a prefill
    // of more tokens loops instead of failing to launch.
    for (int const row : strided_items(blockIdx.y, gridDim.y, rows)) {
        float2 const table = *reinterpret_cast<float2 const*>(
            cos_sin + static_cast<std::size_t>(row) * HeadDim + 2 * pair);
        float const c = table.x, s = table.y;
        float* head_values = x + static_cast<std::size_t>(row) * row_stride +
                             static_cast<std::size_t>(head) * HeadDim;
        if constexpr (Pairing == RopePairing::adjacent) {
            float* v = head_values + 2 * pair;
            float2 const pair_values = *reinterpret_cast<float2 const*>(v);
            *reinterpret_cast<float2*>(v) = make_float2(pair_values.x * c - pair_values.y * s,
                                                        pair_values.x * s + pair_values.y * c);
        } else {
            float const x0 = head_values[pair], x1 = head_values[pair + pairs];
            head_values[pair] = x0 * c - x1 * s;
            head_values[pair + pairs] = x0 * s + x1 * c;
        }
    }
}

// Rotates `heads` heads of each row in place: row r at x + r * row_stride, head h at
// + h * HeadDim (8-byte aligned); cos_sin as rope_table made it for the same rows.
template <int HeadDim, RopePairing Pairing = RopePairing::adjacent>
void apply_rope(float* x, int rows, int heads, std::size_t row_stride, float const* cos_sin,
                cudaStream_t stream = nullptr) {
    if (rows <= 0 || heads <= 0) return;
    dim3 const grid(ceil_div(heads * (HeadDim / 2), rope_threads), strided_grid_y(rows));
    check_before_launch("apply_rope_kernel");
    apply_rope_kernel<HeadDim, Pairing>
        <<<grid, rope_threads, 0, stream>>>(x, rows, heads, row_stride, cos_sin);
    check_launch("apply_rope_kernel");
}

// The model's RoPE on a [rows][heads][head_dim] query or key block.
template <ModelConfig C>
void apply_rope(float* x, int rows, int heads, float const* cos_sin,
                cudaStream_t stream = nullptr) {
    apply_rope<C.head_dim, C.arch.rope_pairing>(
        x, rows, heads, static_cast<std::size_t>(heads) * C.head_dim, cos_sin, stream);
}

}  // namespace tinfer::kernels::cuda
