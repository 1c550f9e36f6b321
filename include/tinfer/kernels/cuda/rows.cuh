#pragma once
// Small row operations the device forward pass composes the kernels with:
//  - add_in_place: y += x elementwise (the residual connection: the host adds a projection's
//    float result to the hidden state the same way, one rounding per element);
//  - gather_rows: out[i] = x[rows[i]], the rows whose hidden state becomes logits.
#include <cuda_runtime.h>

#include <cassert>
#include <cstddef>
#include <cstdint>

#include <tinfer/kernels/cuda/check.cuh>

namespace tinfer::kernels::cuda {

inline constexpr int row_op_threads = 256;

__global__ void __launch_bounds__(row_op_threads)
    add_in_place_kernel(float* __restrict__ y, float const* __restrict__ x, std::int64_t elements) {
    std::int64_t const stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < elements; i += stride)
        y[i] += x[i];
}

// y, x: n floats each, not overlapping.
inline void add_in_place(float* y, float const* x, std::size_t n, cudaStream_t stream = nullptr) {
    auto const elements = static_cast<std::int64_t>(n);
    if (elements <= 0) return;
    check_before_launch("add_in_place_kernel");
    add_in_place_kernel<<<grid_stride_blocks(elements, row_op_threads), row_op_threads, 0,
                          stream>>>(y, x, elements);
    check_launch("add_in_place_kernel");
}

template <int Width>
__global__ void __launch_bounds__(row_op_threads)
    gather_rows_kernel(float const* __restrict__ x, int const* __restrict__ rows, int source_rows,
                       float* __restrict__ out) {
    int const row = rows[blockIdx.x];
    assert(row >= 0 && row < source_rows);  // the host planned the ids (model/cuda/step_plan.hpp)
    (void)source_rows;
    float const* from = x + static_cast<std::size_t>(row) * Width;
    float* to = out + static_cast<std::size_t>(blockIdx.x) * Width;
    for (int i = static_cast<int>(threadIdx.x); i < Width; i += row_op_threads) to[i] = from[i];
}

// out: [count][Width] = x [source_rows][Width] at rows[0 .. count-1] (device ids, each in
// [0, source_rows)); out does not overlap x.
template <int Width>
void gather_rows(float const* x, int const* rows, int count, int source_rows, float* out,
                 cudaStream_t stream = nullptr) {
    if (count <= 0) return;
    check_before_launch("gather_rows_kernel");
    gather_rows_kernel<Width><<<count, row_op_threads, 0, stream>>>(x, rows, source_rows, out);
    check_launch("gather_rows_kernel");
}

// x[i] = op(i, x[i]) over a whole activation block, grid-stride (enough blocks to fill the
// device, not one per element): the architecture parts' elementwise steps, each an Op below.
template <class Op>
__global__ void __launch_bounds__(row_op_threads)
    map_in_place_kernel(float* x, std::int64_t elements, Op op) {
    std::int64_t const stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < elements; i += stride)
        x[i] = op(i, x[i]);
}

template <class Op>
void map_in_place(float* x, std::int64_t elements, Op op, char const* kernel, cudaStream_t stream) {
    if (elements <= 0) return;
    check_before_launch(kernel);
    map_in_place_kernel<<<grid_stride_blocks(elements, row_op_threads), row_op_threads, 0,
                          stream>>>(x, elements, op);
    check_launch(kernel);
}

// One exact rounding each (an addition, a product), as on the host.
struct AddRowBias {
    float const* bias;
    int width;
    __device__ float operator()(std::int64_t i, float v) const { return v + bias[i % width]; }
};
struct Scale {
    float factor;
    __device__ float operator()(std::int64_t, float v) const { return v * factor; }
};
struct SoftCap {
    float cap;
    __device__ float operator()(std::int64_t, float v) const { return cap * tanhf(v / cap); }
};

// x [rows][width] += bias [width] on every row (Qwen2's Q, K and V biases).
inline void add_row_bias(float* x, float const* bias, int rows, int width,
                         cudaStream_t stream = nullptr) {
    map_in_place(x, static_cast<std::int64_t>(rows) * width, AddRowBias{bias, width},
                 "add_row_bias", stream);
}

// x[i] *= factor for n floats (Gemma's embedding scale).
inline void scale_in_place(float* x, float factor, std::size_t n, cudaStream_t stream = nullptr) {
    map_in_place(x, static_cast<std::int64_t>(n), Scale{factor}, "scale_in_place", stream);
}

// x[i] = cap * tanh(x[i] / cap) for n floats (final logit soft-capping), as the host's.
inline void soft_cap(float* x, float cap, std::size_t n, cudaStream_t stream = nullptr) {
    map_in_place(x, static_cast<std::int64_t>(n), SoftCap{cap}, "soft_cap", stream);
}

}  // namespace tinfer::kernels::cuda
