#pragma once
// The gated FFN's activation: out = act(gate) * up elementwise, act silu (SwiGLU: Llama) or
// the tanh approximation of GELU (GeGLU: Gemma), each the host's formula (activation_math.hpp).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include <tinfer/config/model_config.hpp>
#include <tinfer/kernels/cuda/check.cuh>

namespace tinfer::kernels::cuda {

inline constexpr int swiglu_threads = 256;

// kernels::silu's formula: e = 2^(-log2(e) |x|), x / (1 + e) or x e / (1 + e) by the sign
// (exp2f for the host's polynomial 2^x: both within about one float ulp).
__device__ inline float silu(float x) {
    constexpr float minus_log2e = -1.4426950408889634f;
    float const e = exp2f(minus_log2e * fabsf(x));
    float const sigmoid_abs = 1.0f / (1.0f + e);
    return x < 0 ? x * (e * sigmoid_abs) : x * sigmoid_abs;
}

// kernels::gelu_tanh's formula: tanh(u) as (1 - e) / (1 + e) with e = 2^(-2 log2(e) |u|), the
// sign restored (exp2f for the host's polynomial 2^x: both within about one float ulp).
__device__ inline float gelu_tanh(float x) {
    constexpr float sqrt_2_over_pi = 0.7978845608028654f;
    constexpr float cubic = 0.044715f;
    constexpr float minus_two_log2e = -2.0f * 1.4426950408889634f;
    float const u = sqrt_2_over_pi * x * (1.0f + cubic * x * x);
    float const e = exp2f(minus_two_log2e * fabsf(u));
    float const magnitude = (1.0f - e) / (1.0f + e);
    float const tanh_u = u < 0 ? -magnitude : magnitude;
    return 0.5f * x * (1.0f + tanh_u);
}

template <GatedActivation Activation>
__global__ void __launch_bounds__(swiglu_threads)
    gated_activation_kernel(float const* gate, float const* up, float* out, std::int64_t elements) {
    // out may be gate or up (the device layer gates in place): no __restrict__, which would
    // promise the compiler they never overlap. Element i is read before the same thread writes it.
    std::int64_t const stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < elements; i += stride) {
        float const g = gate[i];
        if constexpr (Activation == GatedActivation::silu) {
            out[i] = silu(g) * up[i];
        } else {
            out[i] = gelu_tanh(g) * up[i];
        }
    }
}

// out = act(gate) * up for n floats; out may alias gate or up.
template <GatedActivation Activation>
void gated_activation(float const* gate, float const* up, std::size_t n, float* out,
                      cudaStream_t stream = nullptr) {
    auto const elements = static_cast<std::int64_t>(n);
    if (elements <= 0) return;
    check_before_launch("gated_activation_kernel");
    gated_activation_kernel<Activation>
        <<<grid_stride_blocks(elements, swiglu_threads), swiglu_threads, 0, stream>>>(gate, up, out,
                                                                                      elements);
    check_launch("gated_activation_kernel");
}

// SwiGLU's gate: out = silu(gate) * up for n floats; out may alias gate or up.
inline void swiglu(float const* gate, float const* up, std::size_t n, float* out,
                   cudaStream_t stream = nullptr) {
    gated_activation<GatedActivation::silu>(gate, up, n, out, stream);
}

}  // namespace tinfer::kernels::cuda
