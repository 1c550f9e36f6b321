#pragma once
// The gated FFN's activation: out = silu(gate) * up, element by element (batch invariant by
// construction: no element depends on another).
#include <cstddef>

#include <tinfer/kernels/activation_math.hpp>

namespace tinfer::kernels {

// gate, up, out: n floats each; out may alias gate or up.
inline void swiglu(float const* gate, float const* up, std::size_t n, float* out, int threads = 1) {
    // Threads only pay off once there are a few rows of an FFN's width to share.
    constexpr std::size_t parallel_from = 16 * 1024;
    // Named outside the pragma so compilers that ignore OpenMP (nvcc's host pass) see it used.
    bool const parallel = n >= parallel_from;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (std::size_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

}  // namespace tinfer::kernels
