#pragma once
// y = x W^T with W quantized: W is [out][in] as GGUF stores it (in contiguous, in 32-element
// blocks), x is [tokens][in], y is [tokens][out]; blocks are dequantized on the fly with the
// host's arithmetic (weights.cuh).
//
// Two kernels, chosen by the number of tokens:
//  - decode (few tokens): memory bound on W, so each weight block is read once and used for
//    every token. One warp per output row; lanes stride over the row's blocks; the per-token
//    dot products are combined with cub::WarpReduce.
//  - prefill (many tokens): compute bound, a tiled GEMM. A thread block computes a
//    [tile_tokens x tile_outputs] tile of y; per step it stages one 32-wide slice of x and the
//    matching dequantized block of each of its W rows in shared memory, and every thread
//    accumulates a small register tile from them.
#include <cuda_runtime.h>

#include <cstddef>

#include <cub/warp/warp_reduce.cuh>

#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/weights.cuh>

namespace tinfer::kernels::cuda {

struct LinearDecodeShape {
    static constexpr int warp = 32;
    static constexpr int warps = 8;  // output rows per thread block
    static constexpr int threads = warp * warps;
    // Tokens one launch serves with the weight-streaming kernel; more go to the GEMM, where
    // reuse of each dequantized block across tokens pays for the tiling.
    static constexpr int max_tokens = 8;
};

struct LinearGemmShape {
    static constexpr int tile_tokens = 64;
    static constexpr int tile_outputs = 64;
    static constexpr int tile_inputs = weight_group_elements;  // one block per W row per step
    static constexpr int thread_tokens = 4;
    static constexpr int thread_outputs = 4;
    static constexpr int threads_along_tokens = tile_tokens / thread_tokens;
    static constexpr int threads_along_outputs = tile_outputs / thread_outputs;
    static constexpr int threads = threads_along_tokens * threads_along_outputs;
    // Rows of the shared tiles are padded so a float4 stays aligned and consecutive rows
    // start in different banks.
    static constexpr int padding = 4;
    static_assert(threads >= tile_outputs, "one thread per W row dequantizes its block");
    static_assert(tile_tokens * tile_inputs % threads == 0, "x tile loads evenly");
};

template <DType W, int In>
__global__ void __launch_bounds__(LinearDecodeShape::threads)
    linear_decode_kernel(WeightGroup<W> const* __restrict__ weight, float const* __restrict__ x,
                         float* __restrict__ y, int tokens, int outputs) {
    using Shape = LinearDecodeShape;
    constexpr int groups_per_row = In / weight_group_elements;
    using WarpReduce = cub::WarpReduce<float>;
    __shared__ typename WarpReduce::TempStorage reduce_storage[Shape::warps];

    int const warp_id = static_cast<int>(threadIdx.x) / Shape::warp;
    int const lane = static_cast<int>(threadIdx.x) % Shape::warp;
    int const row = static_cast<int>(blockIdx.x) * Shape::warps + warp_id;
    if (row >= outputs) return;  // the whole warp leaves together

    float sums[Shape::max_tokens] = {};
    WeightGroup<W> const* row_groups = weight + static_cast<std::size_t>(row) * groups_per_row;
    for (int group = lane; group < groups_per_row; group += Shape::warp) {
        float w[weight_group_elements];
        WeightRow<W>::dequantize(row_groups[group], w);
#pragma unroll
        for (int t = 0; t < Shape::max_tokens; ++t) {
            if (t >= tokens) break;
            float const* xs = x + static_cast<std::size_t>(t) * In + group * weight_group_elements;
#pragma unroll
            for (int i = 0; i < weight_group_elements; i += 4) {
                float4 const v = *reinterpret_cast<float4 const*>(xs + i);
                sums[t] += w[i] * v.x + w[i + 1] * v.y + w[i + 2] * v.z + w[i + 3] * v.w;
            }
        }
    }
#pragma unroll
    for (int t = 0; t < Shape::max_tokens; ++t) {
        if (t >= tokens) break;
        float const total = WarpReduce(reduce_storage[warp_id]).Sum(sums[t]);
        if (lane == 0) y[static_cast<std::size_t>(t) * outputs + row] = total;
        __syncwarp();  // the temp storage is reused by the next token's reduction
    }
}

template <DType W, int In>
__global__ void __launch_bounds__(LinearGemmShape::threads)
    linear_gemm_kernel(WeightGroup<W> const* __restrict__ weight, float const* __restrict__ x,
                       float* __restrict__ y, int tokens, int outputs) {
    using Shape = LinearGemmShape;
    constexpr int groups_per_row = In / weight_group_elements;
    // Stored k-major so a thread reads its 4 consecutive tokens / outputs as one float4.
    __shared__ alignas(16) float x_tile[Shape::tile_inputs][Shape::tile_tokens + Shape::padding];
    __shared__ alignas(16) float w_tile[Shape::tile_inputs][Shape::tile_outputs + Shape::padding];

    int const thread = static_cast<int>(threadIdx.x);
    int const thread_token = thread / Shape::threads_along_outputs;   // 0 .. 15
    int const thread_output = thread % Shape::threads_along_outputs;  // 0 .. 15
    int const first_token = static_cast<int>(blockIdx.y) * Shape::tile_tokens;
    int const first_output = static_cast<int>(blockIdx.x) * Shape::tile_outputs;

    float acc[Shape::thread_tokens][Shape::thread_outputs] = {};
    for (int group = 0; group < groups_per_row; ++group) {
        int const k0 = group * weight_group_elements;
        // x slice: [tile_tokens][32] -> x_tile[k][token]; consecutive threads read along k.
        constexpr int x_loads = Shape::tile_tokens * Shape::tile_inputs / Shape::threads;
#pragma unroll
        for (int i = 0; i < x_loads; ++i) {
            int const index = thread + i * Shape::threads;
            int const token = index / Shape::tile_inputs;
            int const k = index % Shape::tile_inputs;
            int const global_token = first_token + token;
            x_tile[k][token] = global_token < tokens
                                   ? x[static_cast<std::size_t>(global_token) * In + k0 + k]
                                   : 0.0f;
        }
        if (thread < Shape::tile_outputs) {
            int const output = first_output + thread;
            float w[weight_group_elements];
            if (output < outputs) {
                WeightRow<W>::dequantize(
                    weight[static_cast<std::size_t>(output) * groups_per_row + group], w);
            } else {
#pragma unroll
                for (int k = 0; k < weight_group_elements; ++k) w[k] = 0.0f;
            }
#pragma unroll
            for (int k = 0; k < weight_group_elements; ++k) w_tile[k][thread] = w[k];
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < Shape::tile_inputs; ++k) {
            float4 const xv =
                *reinterpret_cast<float4 const*>(&x_tile[k][thread_token * Shape::thread_tokens]);
            float4 const wv =
                *reinterpret_cast<float4 const*>(&w_tile[k][thread_output * Shape::thread_outputs]);
            float const xs[] = {xv.x, xv.y, xv.z, xv.w};
            float const ws[] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
            for (int i = 0; i < Shape::thread_tokens; ++i)
#pragma unroll
                for (int j = 0; j < Shape::thread_outputs; ++j) acc[i][j] += xs[i] * ws[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < Shape::thread_tokens; ++i) {
        int const token = first_token + thread_token * Shape::thread_tokens + i;
        if (token >= tokens) continue;
#pragma unroll
        for (int j = 0; j < Shape::thread_outputs; ++j) {
            int const output = first_output + thread_output * Shape::thread_outputs + j;
            if (output < outputs) y[static_cast<std::size_t>(token) * outputs + output] = acc[i][j];
        }
    }
}

// As kernels::linear: y [tokens][w.rows] = x [tokens][In] . W^T, with w.data in device memory
// (GGUF layout, w.cols == In); x rows 16-byte aligned; y does not alias x.
template <DType W, int In>
requires DeviceWeightType<W>
void linear(WeightMatrix const& w, float const* x, int tokens, float* y,
            cudaStream_t stream = nullptr) {
    static_assert(In % weight_group_elements == 0,
                  "linear: the input dimension must be a multiple of 32 (one quantized block)");
    check_device_weights<W, In>(w, "linear weights");
    int const outputs = w.rows;
    if (tokens <= 0 || outputs <= 0) return;
    auto const* groups = reinterpret_cast<WeightGroup<W> const*>(w.data);
    if (tokens <= LinearDecodeShape::max_tokens) {
        int const blocks = ceil_div(outputs, LinearDecodeShape::warps);
        check_before_launch("linear_decode_kernel");
        linear_decode_kernel<W, In>
            <<<blocks, LinearDecodeShape::threads, 0, stream>>>(groups, x, y, tokens, outputs);
        check_launch("linear_decode_kernel");
    } else {
        dim3 const grid(ceil_div(outputs, LinearGemmShape::tile_outputs),
                        ceil_div(tokens, LinearGemmShape::tile_tokens));
        check_grid(grid, "linear_gemm_kernel");
        check_before_launch("linear_gemm_kernel");
        linear_gemm_kernel<W, In>
            <<<grid, LinearGemmShape::threads, 0, stream>>>(groups, x, y, tokens, outputs);
        check_launch("linear_gemm_kernel");
    }
}

}  // namespace tinfer::kernels::cuda
