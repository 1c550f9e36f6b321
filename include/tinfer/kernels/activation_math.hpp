#pragma once
// Scalar building blocks shared by the host kernels. The fixed-order reductions here are what
// makes every kernel batch invariant: a sum over n elements always adds element i into partial
// sum i % reduction_lanes, in increasing i, and combines the partial sums in one fixed tree. The
// order depends only on n, never on how many rows a call processes or which thread runs it.
#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>

#include <tinfer/core/extent.hpp>
#include <tinfer/core/simd_intrinsics.hpp>

namespace tinfer::kernels {

// Partial sums of every dot product and sum of squares: one AVX-512 register, or two AVX2 ones.
inline constexpr int reduction_lanes = 16;

// Square root usable in constant expressions, for constants derived from the config
// (1/sqrt(head_dim)); Newton's iteration converges to the correctly rounded double. Also
// called at run time where the dimension is a DynamicExtent, so both forms scale alike.
constexpr double constexpr_sqrt(double x) {
    if (x <= 0) return 0;
    double guess = x < 1 ? 1 : x;
    for (int i = 0; i < 200; ++i) {
        double const next = 0.5 * (guess + x / guess);
        if (next == guess) break;
        guess = next;
    }
    return guess;
}

// Combines the partial sums pairwise: (0+8, 1+9, ...), then halves again down to one. Where the
// build's floor has AVX-512, in one register: each level adds lane l + width into lane l by a
// shuffle, the additions sum_lanes' loop makes, where the scalar tree was fifteen dependent
// loads and adds (a fifth of prefill attention's softmax step, with max_lanes).
inline float sum_lanes(float const (&lanes)[reduction_lanes]) {
#if TINFER_X86_TARGETS && defined(__AVX512F__)
    __m512 level = _mm512_loadu_ps(lanes);
    level = _mm512_add_ps(level, _mm512_shuffle_f32x4(level, level, _MM_SHUFFLE(3, 2, 3, 2)));
    level = _mm512_add_ps(level, _mm512_shuffle_f32x4(level, level, _MM_SHUFFLE(1, 1, 1, 1)));
    level = _mm512_add_ps(level, _mm512_shuffle_ps(level, level, _MM_SHUFFLE(3, 2, 3, 2)));
    level = _mm512_add_ps(level, _mm512_shuffle_ps(level, level, _MM_SHUFFLE(1, 1, 1, 1)));
    return _mm512_cvtss_f32(level);
#elif TINFER_X86_TARGETS && defined(__AVX2__)
    __m256 const level8 = _mm256_add_ps(_mm256_loadu_ps(lanes), _mm256_loadu_ps(lanes + 8));
    __m128 level = _mm_add_ps(_mm256_castps256_ps128(level8), _mm256_extractf128_ps(level8, 1));
    level = _mm_add_ps(level, _mm_movehl_ps(level, level));
    level = _mm_add_ss(level, _mm_shuffle_ps(level, level, _MM_SHUFFLE(1, 1, 1, 1)));
    return _mm_cvtss_f32(level);
#else
    float level[reduction_lanes];
    for (int l = 0; l < reduction_lanes; ++l) level[l] = lanes[l];
    for (int width = reduction_lanes / 2; width > 0; width /= 2) {
        for (int l = 0; l < width; ++l) level[l] += level[l + width];
    }
    return level[0];
#endif
}

// The largest of the lanes (exact in any order).
inline float max_lanes(float const (&lanes)[reduction_lanes]) {
#if TINFER_X86_TARGETS && defined(__AVX512F__)
    return _mm512_reduce_max_ps(_mm512_loadu_ps(lanes));
#else
    return *std::max_element(lanes, lanes + reduction_lanes);
#endif
}

#if TINFER_X86_TARGETS && defined(__AVX2__) && !defined(__AVX512F__)
// sum_lanes' tree below its first level for four rows: h_i is row i's level-8 sums (lane l +
// lane l + 8); lane i of the result row i's sum, bitwise sum_lanes'. In registers: through a
// stored array, the four sums read back as one vector missed store forwarding.
inline __m128 sum_level8_rows4_avx2(__m256 h0, __m256 h1, __m256 h2, __m256 h3) {
    // Level 4: rows 2i (low 128 bits) and 2i + 1 (high), four sums each.
    __m256 const quarter0 =
        _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), _mm256_permute2f128_ps(h0, h1, 0x31));
    __m256 const quarter1 =
        _mm256_add_ps(_mm256_permute2f128_ps(h2, h3, 0x20), _mm256_permute2f128_ps(h2, h3, 0x31));
    // Level 2: low 128 bits rows 0 and 2, high rows 1 and 3, two sums each.
    __m256 const pair =
        _mm256_add_ps(_mm256_shuffle_ps(quarter0, quarter1, _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm256_shuffle_ps(quarter0, quarter1, _MM_SHUFFLE(3, 2, 3, 2)));
    // Level 1: lanes 0, 1 and 4, 5 hold rows 0, 2 and 1, 3.
    __m256 const sums = _mm256_add_ps(_mm256_shuffle_ps(pair, pair, _MM_SHUFFLE(2, 0, 2, 0)),
                                      _mm256_shuffle_ps(pair, pair, _MM_SHUFFLE(3, 1, 3, 1)));
    __m256 const ordered =
        _mm256_permutevar8x32_ps(sums, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return _mm256_castps256_ps128(ordered);
}
#endif

// out[r] = sum_lanes(lanes[r]) for R rows, bitwise. Where the build's floor has AVX-512 (these
// float kernels follow -march, docs/performance.md), 16 rows take the tree level by level on
// whole registers: each level adds the pairs sum_lanes adds (lane l and lane l + width), for
// two, four, eight, then sixteen rows packed in one register, so 30 shuffles and 15 additions
// reduce 16 rows where each row alone took its four dependent levels and the extraction of its
// lanes (attention's decode scores: one reduction per key, 64 products for SmolLM2's head).
// With AVX2 the same levels run on 8-lane registers, four rows at a time: the scalar tree, with
// dot_rows<16> spilling its lanes, took 39 cycles a key on a Zen 3, 7.2 so at eight rows.
template <int R>
inline void sum_lanes_rows(float const (&lanes)[R][reduction_lanes], float (&out)[R]) {
#if TINFER_X86_TARGETS && defined(__AVX512F__)
    if constexpr (R == 16) {
        // Level 8: rows 2i and 2i + 1 into one register, lanes 0-7 and 8-15.
        __m512 half[8];
        for (int i = 0; i < 8; ++i) {
            __m512 const a = _mm512_loadu_ps(lanes[2 * i]), b = _mm512_loadu_ps(lanes[2 * i + 1]);
            half[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
        }
        // Level 4: quarter q of quarter[i] is row 4i + q's four partial sums.
        __m512 quarter[4];
        for (int i = 0; i < 4; ++i) {
            __m512 const a = half[2 * i], b = half[2 * i + 1];
            quarter[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
        }
        // Level 2, within each quarter: rows q and 4 + q (then 8 + q and 12 + q), two each.
        __m512 pair[2];
        for (int i = 0; i < 2; ++i) {
            __m512 const a = quarter[2 * i], b = quarter[2 * i + 1];
            pair[i] = _mm512_add_ps(_mm512_shuffle_ps(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm512_shuffle_ps(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
        }
        // Level 1: lane 4q + k holds row q + 4k's sum; one permutation puts row r at lane r.
        __m512 const sums =
            _mm512_add_ps(_mm512_shuffle_ps(pair[0], pair[1], _MM_SHUFFLE(2, 0, 2, 0)),
                          _mm512_shuffle_ps(pair[0], pair[1], _MM_SHUFFLE(3, 1, 3, 1)));
        __m512i const lane_of_row =
            _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
        _mm512_storeu_ps(out, _mm512_permutexvar_ps(lane_of_row, sums));
        return;
    }
#elif TINFER_X86_TARGETS && defined(__AVX2__)
    if constexpr (R % 4 == 0) {
        // The same levels on 8-lane registers, four rows at a time (eight would be the 16
        // registers of their level-8 sums alone).
        for (int first = 0; first < R; first += 4) {
            // Level 8: lane l + lane l + 8 of each row, one register a row.
            auto const half = [&](int i) {
                return _mm256_add_ps(_mm256_loadu_ps(lanes[first + i]),
                                     _mm256_loadu_ps(lanes[first + i] + 8));
            };
            _mm_storeu_ps(out + first, sum_level8_rows4_avx2(half(0), half(1), half(2), half(3)));
        }
        return;
    }
#endif
    for (int r = 0; r < R; ++r) out[r] = sum_lanes(lanes[r]);
}

// a . b over n elements in the fixed order described above.
inline float dot(Extent auto n, float const* a, float const* b) {
    int const size = n;
    float lanes[reduction_lanes] = {};
    int const full = size - size % reduction_lanes;
    for (int k = 0; k < full; k += reduction_lanes) {
#pragma omp simd
        for (int l = 0; l < reduction_lanes; ++l) lanes[l] += a[k + l] * b[k + l];
    }
    for (int k = full; k < size; ++k) lanes[k - full] += a[k] * b[k];
    return sum_lanes(lanes);
}

template <int n>
inline float dot(float const* a, float const* b) {
    return dot(StaticExtent<n>{}, a, b);
}

#if TINFER_X86_TARGETS && defined(__AVX2__) && !defined(__AVX512F__)
// dot(n, a, b + r * stride) for rows r = 0..3 in lanes 0..3, n a multiple of 16, bitwise dot's:
// the same products and additions in the same order (a multiply and an add, contracted as
// dot's). The four rows' 8 lane-sum registers, the shared row's two and the products fit
// AVX2's 16; eight rows' 16 lane sums spilled (7.2 cycles a key on a Zen 3, 64 dimensions).
inline __m128 dot_rows4_avx2(Extent auto n, float const* a, float const* b, std::size_t stride) {
    int const size = n;
    __m256 low[4], high[4];
    for (int r = 0; r < 4; ++r) low[r] = high[r] = _mm256_setzero_ps();
    for (int k = 0; k < size; k += reduction_lanes) {
        __m256 const a_low = _mm256_loadu_ps(a + k), a_high = _mm256_loadu_ps(a + k + 8);
        // Unrolled, or GCC keeps the lane sums on the stack.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 4
#endif
        for (int r = 0; r < 4; ++r) {
            low[r] =
                _mm256_add_ps(low[r], _mm256_mul_ps(a_low, _mm256_loadu_ps(b + r * stride + k)));
            high[r] = _mm256_add_ps(high[r],
                                    _mm256_mul_ps(a_high, _mm256_loadu_ps(b + r * stride + k + 8)));
        }
    }
    return sum_level8_rows4_avx2(_mm256_add_ps(low[0], high[0]), _mm256_add_ps(low[1], high[1]),
                                 _mm256_add_ps(low[2], high[2]), _mm256_add_ps(low[3], high[3]));
}
#endif

// out[r] = dot(n, a, b + r * stride) for R rows at once, each bitwise dot's result: the same
// lane sums in the same order, in R independent chains (one dot alone waits on its
// multiply-add latency, 4 cycles per 16 lanes; 8 chains keep two FMA units busy). Attention's
// scores are a query against many keys.
template <int R>
inline void dot_rows(Extent auto n, float const* a, float const* b, std::size_t stride,
                     float (&out)[R]) {
    int const size = n;
#if TINFER_X86_TARGETS && defined(__AVX2__) && !defined(__AVX512F__)
    if constexpr (R % 4 == 0) {
        if (size % reduction_lanes == 0) {
            for (int first = 0; first < R; first += 4)
                _mm_storeu_ps(out + first, dot_rows4_avx2(n, a, b + first * stride, stride));
            return;
        }
    }
#endif
    float lanes[R][reduction_lanes] = {};
    int const full = size - size % reduction_lanes;
    for (int k = 0; k < full; k += reduction_lanes) {
        // Unrolled, so that the R rows' lane sums stay in registers (rolled, GCC kept them on
        // the stack: a load, a multiply-add and a store per row and step). nvcc's front end
        // does not know the pragma, and the host code of CUDA files takes no x86 targets.
#if TINFER_X86_TARGETS && defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 16
#endif
        for (int r = 0; r < R; ++r) {
#pragma omp simd
            for (int l = 0; l < reduction_lanes; ++l)
                lanes[r][l] += a[k + l] * b[r * stride + k + l];
        }
    }
    for (int r = 0; r < R; ++r)
        for (int k = full; k < size; ++k) lanes[r][k - full] += a[k] * b[r * stride + k];
    sum_lanes_rows<R>(lanes, out);
}

// Sum of x[i]^2 over n elements, same order as dot.
inline float sum_of_squares(Extent auto n, float const* x) {
    return dot(n, x, x);
}

template <int n>
inline float sum_of_squares(float const* x) {
    return dot(StaticExtent<n>{}, x, x);
}

inline constexpr float negative_infinity = -std::numeric_limits<float>::infinity();

// condition ? a : b, both already computed, as bits. GCC keeps a float `?:` whose arms hold
// arithmetic as a branch (moving the arithmetic into the arm, where under the default
// -ftrapping-math it may not run speculatively), and a loop with a branch does not vectorize,
// even under `omp simd`: fast_exp2, silu and gelu_tanh ran one element at a time, a division
// each (the gated FFN's activation 5% of a SmolLM2 decode step on a Zen 3), as did attention's
// softmax weights. The same values as the `?:`, NaN included.
inline float select(bool condition, float a, float b) {
    std::uint32_t const mask = 0u - static_cast<std::uint32_t>(condition);
    return std::bit_cast<float>((std::bit_cast<std::uint32_t>(a) & mask) |
                                (std::bit_cast<std::uint32_t>(b) & ~mask));
}

// 2^x for x <= 0 (softmax weights: a score minus the running maximum), vectorizable where the
// libm call is not. x = n + f with n = round(x), f in [-1/2, 1/2]; 2^f by its Taylor series to
// degree 6 (relative error below 1.3e-7, about one float ulp), times 2^n set in the exponent
// bits. Below -126 (a weight under the smallest normal float, or -inf) the result is 0.
inline float fast_exp2(float x) {
    constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
    float const clamped = select(x < -127.0f, -127.0f, x);  // std::max(x, -127)
    float const shifted = clamped + round_magic;
    float const n = shifted - round_magic;
    float const f = clamped - n;
    constexpr float c1 = 0.693147180559945f, c2 = 0.240226506959101f, c3 = 0.0555041086648216f,
                    c4 = 0.00961812910762848f, c5 = 0.00133335581464284f,
                    c6 = 0.000154035303933816f;
    float const power = 1.0f + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * c6)))));
    auto const exponent = static_cast<std::uint32_t>(static_cast<int>(n) + 127) << 23;
    float const result = power * std::bit_cast<float>(exponent);
    return select(x < -126.0f, 0.0f, result);
}

// SiLU(x) = x * sigmoid(x), through fast_exp2 so that a row's loop vectorizes (libm's expf is a
// call per element: 3.7% of a SmolLM2 decode step). With e = e^-|x| = 2^(-log2(e) |x|) <= 1:
// sigmoid(|x|) = 1 / (1 + e), sigmoid(-|x|) = e / (1 + e). Rounding log2(e) |x| moves e by
// about |x| float epsilons relatively, which reaches the result only where x < 0 (there silu is
// under 0.28 in size); very negative x gives e = 0 and the limit -0.
inline float silu(float x) {
    constexpr float minus_log2e = -1.4426950408889634f;
    float const e = fast_exp2(minus_log2e * std::abs(x));
    float const sigmoid_abs = 1.0f / (1.0f + e);
    return select(x < 0, x * (e * sigmoid_abs), x * sigmoid_abs);
}

// GELU with the tanh approximation, as Gemma's FFN (and llama.cpp's ggml_gelu) computes it:
// 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3). tanh through fast_exp2 so the loop
// over a row vectorizes (libm's tanh does not: Gemma's pp512 went 239 -> 278 t/s on 1 thread):
// tanh(|u|) = (1 - e) / (1 + e) with e = exp(-2|u|) <= 1, within a few float ulps of tanhf.
inline float gelu_tanh(float x) {
    constexpr float sqrt_2_over_pi = 0.7978845608028654f;
    constexpr float cubic = 0.044715f;
    constexpr float minus_two_log2e = -2.0f * 1.4426950408889634f;
    float const u = sqrt_2_over_pi * x * (1.0f + cubic * x * x);
    float const e = fast_exp2(minus_two_log2e * std::abs(u));
    float const magnitude = (1.0f - e) / (1.0f + e);
    float const tanh_u = select(u < 0, -magnitude, magnitude);
    return 0.5f * x * (1.0f + tanh_u);
}

// The gate's activation in a gated FFN, as a type a kernel is instantiated for.
struct SiluGate {
    static float apply(float x) { return silu(x); }
};
struct GeluTanhGate {
    static float apply(float x) { return gelu_tanh(x); }
};
template <class A>
concept GateActivation = requires(float x) {
    { A::apply(x) } -> std::same_as<float>;
};

}  // namespace tinfer::kernels
