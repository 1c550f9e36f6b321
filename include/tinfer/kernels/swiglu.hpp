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
    // Decided in code, not in the pragma, so compilers that ignore OpenMP see the threshold used.
    int const team = n >= parallel_from ? threads : 1;
#pragma omp parallel for num_threads(team) schedule(static)
    for (std::size_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

}  // namespace tinfer::kernels
