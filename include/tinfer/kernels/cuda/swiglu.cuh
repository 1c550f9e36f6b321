#pragma once
// SwiGLU's gating: out = silu(gate) * up with silu(x) = x / (1 + exp(-x)), elementwise.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include <tinfer/kernels/cuda/check.cuh>

namespace tinfer::kernels::cuda {

inline constexpr int swiglu_threads = 256;

// The host's formula (kernels::silu); e^-x overflowing to inf gives the limit -0.
__device__ inline float silu(float x) {
    return x / (1.0f + expf(-x));
}

__global__ void __launch_bounds__(swiglu_threads)
    swiglu_kernel(float const* gate, float const* up, float* out, std::int64_t elements) {
    // out may be gate or up (the device model gates in place): no __restrict__, which would
    // promise the compiler they never overlap. DeviceElement i is read before it is written, by the
    // same thread.
    std::int64_t const stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < elements; i += stride)
        out[i] = silu(gate[i]) * up[i];
}

// gate, up, out: n floats each; out may alias gate or up. As kernels::swiglu.
inline void swiglu(float const* gate, float const* up, std::size_t n, float* out,
                   cudaStream_t stream = nullptr) {
    auto const elements = static_cast<std::int64_t>(n);
    if (elements <= 0) return;
    // A grid-stride loop: enough blocks to fill the device, not one per element.
    constexpr std::int64_t max_blocks = 4096;
    std::int64_t const wanted = ceil_div<std::int64_t>(elements, swiglu_threads);
    int const blocks = static_cast<int>(wanted < max_blocks ? wanted : max_blocks);
    check_before_launch("swiglu_kernel");
    swiglu_kernel<<<blocks, swiglu_threads, 0, stream>>>(gate, up, out, elements);
    check_launch("swiglu_kernel");
}

}  // namespace tinfer::kernels::cuda
