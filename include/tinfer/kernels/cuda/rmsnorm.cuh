#pragma once
// RMSNorm on the device: out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, one thread block
// per row. The row lives in registers between the reduction and the scaling, so x is read once.
#include <cuda_runtime.h>

#include <cub/block/block_reduce.cuh>

#include <tinfer/config/model_config.hpp>
#include <tinfer/kernels/cuda/check.cuh>

namespace tinfer::kernels::cuda {

template <int Hidden>
struct RmsNormShape {
    static_assert(Hidden > 0, "rmsnorm: hidden must be positive");
    static constexpr int warp = 32;
    static constexpr int max_threads = 256;
    // Enough threads that each holds a few elements, never more warps than the row fills.
    static constexpr int threads = [] {
        int t = ceil_div(Hidden, warp) * warp;
        return t < max_threads ? t : max_threads;
    }();
    static constexpr int elements_per_thread = ceil_div(Hidden, threads);
};

template <int Hidden>
__global__ void __launch_bounds__(RmsNormShape<Hidden>::threads)
    rmsnorm_kernel(float const* x, float const* __restrict__ weight, float* out, float eps) {
    // x and out may be the same rows (no __restrict__ on either: promising the compiler they do
    // not overlap would make an in-place call undefined). Each thread reads its elements into
    // registers before the block-wide reduction and writes only those same elements after it,
    // so in place is exact.
    using Shape = RmsNormShape<Hidden>;
    using Reduce = cub::BlockReduce<float, Shape::threads>;
    __shared__ typename Reduce::TempStorage reduce_storage;
    __shared__ float inverse_rms;

    std::size_t const row_offset = static_cast<std::size_t>(blockIdx.x) * Hidden;
    float values[Shape::elements_per_thread];
    float sum_of_squares = 0;
#pragma unroll
    for (int i = 0; i < Shape::elements_per_thread; ++i) {
        int const column = static_cast<int>(threadIdx.x) + i * Shape::threads;
        values[i] = column < Hidden ? x[row_offset + column] : 0.0f;
        sum_of_squares += values[i] * values[i];
    }
    float const total = Reduce(reduce_storage).Sum(sum_of_squares);
    if (threadIdx.x == 0) inverse_rms = rsqrtf(total / static_cast<float>(Hidden) + eps);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < Shape::elements_per_thread; ++i) {
        int const column = static_cast<int>(threadIdx.x) + i * Shape::threads;
        if (column < Hidden) out[row_offset + column] = values[i] * inverse_rms * weight[column];
    }
}

// x, out: [rows][Hidden] (out may alias x); weight: [Hidden]. As kernels::rmsnorm.
template <int Hidden>
void rmsnorm(float const* x, float const* weight, float eps, int rows, float* out,
             cudaStream_t stream = nullptr) {
    if (rows <= 0) return;
    check_before_launch("rmsnorm_kernel");
    rmsnorm_kernel<Hidden><<<rows, RmsNormShape<Hidden>::threads, 0, stream>>>(x, weight, out, eps);
    check_launch("rmsnorm_kernel");
}

// The model's norm: hidden and eps from the config.
template <ModelConfig C>
void rmsnorm(float const* x, float const* weight, int rows, float* out,
             cudaStream_t stream = nullptr) {
    rmsnorm<C.hidden>(x, weight, static_cast<float>(C.norm_eps), rows, out, stream);
}

}  // namespace tinfer::kernels::cuda
