#pragma once
// Token embedding: out[t] = dequantized row tokens[t] of the table. One thread block per token,
// one thread per 32-element group of the row.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/weights.cuh>

namespace tinfer::kernels::cuda {

template <int Hidden>
inline constexpr int embedding_threads = [] {
    constexpr int warp = 32;
    return ceil_div(Hidden / weight_group_elements, warp) * warp;
}();

template <DType W, int Hidden>
__global__ void __launch_bounds__(embedding_threads<Hidden>)
    embedding_kernel(WeightGroup<W> const* __restrict__ table,
                     std::int32_t const* __restrict__ tokens, float* __restrict__ out) {
    constexpr int groups_per_row = Hidden / weight_group_elements;
    int const group = static_cast<int>(threadIdx.x);
    if (group >= groups_per_row) return;
    int const token = tokens[blockIdx.x];
    float values[weight_group_elements];
    WeightRow<W>::dequantize(table[static_cast<std::size_t>(token) * groups_per_row + group],
                             values);
    float* target =
        out + static_cast<std::size_t>(blockIdx.x) * Hidden + group * weight_group_elements;
#pragma unroll
    for (int i = 0; i < weight_group_elements; i += 4)
        *reinterpret_cast<float4*>(target + i) =
            make_float4(values[i], values[i + 1], values[i + 2], values[i + 3]);
}

// As kernels::embedding: table.data in device memory ([vocab][Hidden] in W, as GGUF stores
// token_embd); tokens: [count] device ids, each in [0, table.rows) (the caller validated them
// on the host, where a bad id is a RequestError); out: [count][Hidden].
template <DType W, int Hidden>
requires DeviceWeightType<W>
void embedding(WeightMatrix const& table, std::int32_t const* tokens, int count, float* out,
               cudaStream_t stream = nullptr) {
    static_assert(Hidden % weight_group_elements == 0,
                  "embedding: hidden must be a multiple of 32 (one quantized block)");
    check_device_weights<W, Hidden>(table, "embedding table");
    if (count <= 0) return;
    check_before_launch("embedding_kernel");
    embedding_kernel<W, Hidden><<<count, embedding_threads<Hidden>, 0, stream>>>(
        reinterpret_cast<WeightGroup<W> const*>(table.data), tokens, out);
    check_launch("embedding_kernel");
}

}  // namespace tinfer::kernels::cuda
