#pragma once
// The gated FFN's activation: out = silu(gate) * up, element by element (batch invariant by
// construction: no element depends on another).
#include <cstddef>

#include <tinfer/kernels/activation_math.hpp>

namespace tinfer::kernels {

namespace detail {
inline void swiglu_with_team(float const* gate, float const* up, std::size_t n, float* out,
                             int team) {
#pragma omp parallel for num_threads(team) schedule(static)
    for (std::size_t i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}
}  // namespace detail

// gate, up, out: n floats each; out may alias gate or up.
inline void swiglu(float const* gate, float const* up, std::size_t n, float* out, int threads = 1) {
    // Threads only pay off once there are a few rows of an FFN's width to share. (Decided in
    // code rather than in the pragma, which compilers without OpenMP never read.)
    constexpr std::size_t parallel_from = 16 * 1024;
    detail::swiglu_with_team(gate, up, n, out, n >= parallel_from ? threads : 1);
}

}  // namespace tinfer::kernels
