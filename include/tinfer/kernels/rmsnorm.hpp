#pragma once
// RMS normalisation of each row: out = x / sqrt(mean(x^2) + eps) * weight, as Llama applies it
// before attention, before the FFN and before the output projection. Rows are independent and
// each row's sum of squares uses kernels::dot's fixed order, so results are batch invariant.
#include <cmath>
#include <cstddef>

#include <tinfer/kernels/activation_math.hpp>

namespace tinfer::kernels {

// One row: out = x / sqrt(mean(x^2) + eps) * weight (out may alias x).
inline void rmsnorm_row(Extent auto width, float const* x, float const* weight, float eps,
                        float* out) {
    int const n = width;
    float const mean_square = sum_of_squares(width, x) / static_cast<float>(n);
    float const scale = 1.0f / std::sqrt(mean_square + eps);
#pragma omp simd
    for (int k = 0; k < n; ++k) out[k] = x[k] * scale * weight[k];
}

template <int width>
inline void rmsnorm_row(float const* x, float const* weight, float eps, float* out) {
    static_assert(width > 0, "rmsnorm width must be positive");
    rmsnorm_row(StaticExtent<width>{}, x, weight, eps, out);
}

// x, out: [rows][width] (out may alias x); weight: [width].
inline void rmsnorm(Extent auto width, float const* x, float const* weight, float eps, int rows,
                    float* out, int threads = 1) {
    auto const stride = static_cast<std::size_t>(static_cast<int>(width));
#pragma omp parallel for num_threads(threads) schedule(static) if (rows > 1)
    for (int row = 0; row < rows; ++row) {
        rmsnorm_row(width, x + static_cast<std::size_t>(row) * stride, weight, eps,
                    out + static_cast<std::size_t>(row) * stride);
    }
}

template <int width>
void rmsnorm(float const* x, float const* weight, float eps, int rows, float* out,
             int threads = 1) {
    static_assert(width > 0, "rmsnorm width must be positive");
    rmsnorm(StaticExtent<width>{}, x, weight, eps, rows, out, threads);
}

}  // namespace tinfer::kernels
