#pragma once
// RMS normalisation of each row: out = x / sqrt(mean(x^2) + eps) * weight, as Llama applies it
// before attention, before the FFN and before the output projection. Rows are independent and
// each row's sum of squares uses kernels::dot's fixed order, so results are batch invariant.
#include <cmath>
#include <cstddef>

#include <tinfer/kernels/activation_math.hpp>

namespace tinfer::kernels {

// One row: out = x / sqrt(mean(x^2) + eps) * weight (out may alias x).
template <int width>
inline void rmsnorm_row(float const* x, float const* weight, float eps, float* out) {
    static_assert(width > 0, "rmsnorm width must be positive");
    float const mean_square = sum_of_squares<width>(x) / static_cast<float>(width);
    float const scale = 1.0f / std::sqrt(mean_square + eps);
#pragma omp simd
    for (int k = 0; k < width; ++k) out[k] = x[k] * scale * weight[k];
}

// x, out: [rows][width] (out may alias x); weight: [width].
template <int width>
void rmsnorm(float const* x, float const* weight, float eps, int rows, float* out,
             int threads = 1) {
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 1)
    for (int row = 0; row < rows; ++row) {
        rmsnorm_row<width>(x + static_cast<std::size_t>(row) * width, weight, eps,
                           out + static_cast<std::size_t>(row) * width);
    }
}

}  // namespace tinfer::kernels
