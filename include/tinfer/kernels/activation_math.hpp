#pragma once
// Scalar building blocks shared by the host kernels. The fixed-order reductions here are what
// makes every kernel batch invariant: a sum over n elements always adds element i into partial
// sum i % reduction_lanes, in increasing i, and combines the partial sums in one fixed tree. The
// order depends only on n, never on how many rows a call processes or which thread runs it.
#include <cmath>
#include <limits>

namespace tinfer::kernels {

// Partial sums of every dot product and sum of squares: one AVX-512 register, or two AVX2 ones.
inline constexpr int reduction_lanes = 16;

// Square root usable in constant expressions, for constants derived from the config
// (1/sqrt(head_dim)); Newton's iteration converges to the correctly rounded double.
consteval double constexpr_sqrt(double x) {
    if (x <= 0) return 0;
    double guess = x < 1 ? 1 : x;
    for (int i = 0; i < 200; ++i) {
        double const next = 0.5 * (guess + x / guess);
        if (next == guess) break;
        guess = next;
    }
    return guess;
}

// Combines the partial sums pairwise: (0+8, 1+9, ...), then halves again down to one.
inline float sum_lanes(float const (&lanes)[reduction_lanes]) {
    float level[reduction_lanes];
    for (int l = 0; l < reduction_lanes; ++l) level[l] = lanes[l];
    for (int width = reduction_lanes / 2; width > 0; width /= 2) {
        for (int l = 0; l < width; ++l) level[l] += level[l + width];
    }
    return level[0];
}

// a . b over n elements in the fixed order described above.
template <int n>
inline float dot(float const* a, float const* b) {
    float lanes[reduction_lanes] = {};
    constexpr int full = n - n % reduction_lanes;
    for (int k = 0; k < full; k += reduction_lanes) {
#pragma omp simd
        for (int l = 0; l < reduction_lanes; ++l) lanes[l] += a[k + l] * b[k + l];
    }
    for (int k = full; k < n; ++k) lanes[k - full] += a[k] * b[k];
    return sum_lanes(lanes);
}

// Sum of x[i]^2 over n elements, same order as dot.
template <int n>
inline float sum_of_squares(float const* x) {
    return dot<n>(x, x);
}

// SiLU(x) = x * sigmoid(x) = x / (1 + e^-x); for very negative x, e^-x overflows to infinity
// and the quotient is the correct limit -0.
inline float silu(float x) {
    return x / (1.0f + std::exp(-x));
}

inline constexpr float negative_infinity = -std::numeric_limits<float>::infinity();

}  // namespace tinfer::kernels
