#pragma once
// Activations quantized on the fly to int8, one scale per block of 32 elements (as llama.cpp's
// Q8 activations), so that matrix products with quantized weights run as integer dot products
// (kernels/int8_dot.hpp). Which activations a forward pass uses is a compile-time precision
// policy: kernels::Float32Activations (exact products, the default) or
// kernels::Int8Activations (about 4x less activation traffic and VNNI integer products).
//
// Layout of one quantized row of `cols` elements (a multiple of 32), blocks = cols / 32:
//   q[cols]         int8 values in element order (block b at bytes 32b .. 32b+31)
//   scale[blocks]   d_b, block b's scale
//   sum[blocks]     d_b * (sum of block b's int8 values): the term weight offsets (Q4_1's
//                   minimum, Q4_0's -8, Q8_0's -128 after its +128 shift, a K-quant
//                   sub-block's minimum) multiply
// padded to a multiple of 64 bytes. The integer kernels broadcast 4 values of q at a time and
// one scale and sum per block (kernels/int8_dot.hpp).
//
// Quantization: d = max|x| / 127 and q = round-to-nearest-even(x / d) (x times 1/d), the
// vector and portable versions producing the same bytes. Each row depends on itself only, so
// quantized activations keep the forward pass batch invariant.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <tinfer/core/simd_intrinsics.hpp>
#include <tinfer/kernels/isa.hpp>

namespace tinfer::kernels {

// Activations stay float32: every matrix product is a float dot product of the exactly
// decoded weights.
struct Float32Activations {
    static constexpr char const* name = "f32";
};

// Activations entering a matrix whose weights have an integer dot product
// (kernels::has_int8_dot: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants) are quantized to int8
// per block of 32; other weight encodings keep float32 activations.
struct Int8Activations {
    static constexpr char const* name = "int8";
};

template <class P>
concept ActivationPrecision =
    std::same_as<P, Float32Activations> || std::same_as<P, Int8Activations>;

}  // namespace tinfer::kernels

namespace tinfer::kernels {

inline constexpr int int8_block_elements = 32;
// Bytes of one quantized row of `cols` elements (a multiple of 32).
constexpr std::size_t int8_row_bytes(int cols) {
    std::size_t const blocks = static_cast<std::size_t>(cols / int8_block_elements);
    std::size_t const bytes = static_cast<std::size_t>(cols) + 2 * sizeof(float) * blocks;
    return (bytes + 63) / 64 * 64;
}

// One quantized row, its parts located.
struct Int8Row {
    std::int8_t const* q;
    float const* scale;
    float const* sum;
};

inline Int8Row int8_row(std::byte const* row, int cols) {
    auto const* scale = reinterpret_cast<float const*>(row + cols);
    return {reinterpret_cast<std::int8_t const*>(row), scale, scale + cols / int8_block_elements};
}

// Quantized activation rows as linear reads them: row t at data + t * stride bytes.
struct Int8Rows {
    std::byte const* data = nullptr;
    std::size_t stride = 0;
    Int8Row row(int t, int cols) const {
        return int8_row(data + static_cast<std::size_t>(t) * stride, cols);
    }
};

namespace detail {

// Writes block b of a row (q: the row's values, scale and sum its arrays) from 32 floats; both
// versions produce the same bytes and floats.
inline void quantize_block_portable(float const* x, std::int8_t* q, float* scale, float* sum,
                                    int b) {
    float amax = 0;
    for (int k = 0; k < int8_block_elements; ++k) amax = std::max(amax, std::abs(x[k]));
    float const d = amax / 127.0f;
    float const inverse = d != 0 ? 1.0f / d : 0.0f;
    int total = 0;
    for (int k = 0; k < int8_block_elements; ++k) {
        int const value = static_cast<int>(std::nearbyint(x[k] * inverse));
        total += value;
        q[b * int8_block_elements + k] = static_cast<std::int8_t>(value);
    }
    scale[b] = d;
    sum[b] = d * static_cast<float>(total);
}

// The parts of a row being written, as int8_row lays them out (int8_row_bytes(cols) at out).
struct QuantizedRowParts {
    std::int8_t* q;
    float* scale;
    float* sum;
    int blocks;
};
inline QuantizedRowParts quantized_row_parts(std::byte* out, int cols) {
    auto* scale = reinterpret_cast<float*>(out + cols);
    int const blocks = cols / int8_block_elements;
    return {reinterpret_cast<std::int8_t*>(out), scale, scale + blocks, blocks};
}

inline void quantize_row_portable(float const* x, int cols, std::byte* out) {
    QuantizedRowParts const row = quantized_row_parts(out, cols);
    for (int b = 0; b < row.blocks; ++b)
        quantize_block_portable(x + b * int8_block_elements, row.q, row.scale, row.sum, b);
}

#if TINFER_X86_TARGETS
TINFER_BEGIN_TARGET_AVX512
inline void quantize_block_avx512(float const* x, std::int8_t* q, float* scale, float* sum, int b) {
    __m512 const first = _mm512_loadu_ps(x);
    __m512 const second = _mm512_loadu_ps(x + int8_block_elements / 2);
    float const amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(first), _mm512_abs_ps(second)));
    float const d = amax / 127.0f;
    float const inverse = d != 0 ? 1.0f / d : 0.0f;
    // cvtps rounds to nearest even (the default MXCSR mode), as std::nearbyint does.
    __m512i const q_first = _mm512_cvtps_epi32(_mm512_mul_ps(first, _mm512_set1_ps(inverse)));
    __m512i const q_second = _mm512_cvtps_epi32(_mm512_mul_ps(second, _mm512_set1_ps(inverse)));
    std::int8_t* out = q + b * int8_block_elements;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(q_first));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + int8_block_elements / 2),
                     _mm512_cvtepi32_epi8(q_second));
    scale[b] = d;
    sum[b] = d * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q_first, q_second)));
}

// Its own row loop: a function of the region inlines only into one of the region.
inline void quantize_row_avx512(float const* x, int cols, std::byte* out) {
    QuantizedRowParts const row = quantized_row_parts(out, cols);
    for (int b = 0; b < row.blocks; ++b)
        quantize_block_avx512(x + b * int8_block_elements, row.q, row.scale, row.sum, b);
}
TINFER_END_TARGET_AVX512

TINFER_BEGIN_TARGET_AVX2
// The sum of the eight int32 lanes of v, in lane 0 of the result (exact: integers).
inline __m128i sum_epi32_lanes_256(__m256i v) {
    __m128i const quads = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    __m128i const halves = _mm_add_epi32(quads, _mm_unpackhi_epi64(quads, quads));
    return _mm_add_epi32(halves, _mm_shuffle_epi32(halves, 1));
}

// The same on four 8-lane registers. The portable loop's std::nearbyint per element kept GCC
// from vectorizing it: 3-4 cycles an element on a Zen 3, 1.5-2.6% of a SmolLM2 decode step.
inline void quantize_block_avx2(float const* x, std::int8_t* q, float* scale, float* sum, int b) {
    __m256 const sign = _mm256_set1_ps(-0.0f);
    __m256 values[4];
    __m256 amax8 = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
        values[i] = _mm256_loadu_ps(x + 8 * i);
        // max(|x|, amax): a NaN lane keeps amax, as std::max(amax, |x|) does.
        amax8 = _mm256_max_ps(_mm256_andnot_ps(sign, values[i]), amax8);
    }
    __m128 amax4 = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    amax4 = _mm_max_ps(amax4, _mm_movehl_ps(amax4, amax4));
    amax4 = _mm_max_ss(amax4, _mm_shuffle_ps(amax4, amax4, _MM_SHUFFLE(1, 1, 1, 1)));
    float const amax = _mm_cvtss_f32(amax4);
    float const d = amax / 127.0f;
    float const inverse = d != 0 ? 1.0f / d : 0.0f;
    // cvtps rounds to nearest even (the default MXCSR mode), as std::nearbyint does.
    __m256i integers[4];
    for (int i = 0; i < 4; ++i)
        integers[i] = _mm256_cvtps_epi32(_mm256_mul_ps(values[i], _mm256_set1_ps(inverse)));
    // Packing works within 128-bit lanes: 32-bit pairs (0, 1) and (2, 3) into 16-bit, then into
    // bytes, leave the dwords of 4-element groups in the order 0 2 4 6 1 3 5 7; one
    // permutation restores 0 .. 7.
    __m256i const bytes = _mm256_packs_epi16(_mm256_packs_epi32(integers[0], integers[1]),
                                             _mm256_packs_epi32(integers[2], integers[3]));
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(q + b * int8_block_elements),
        _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    __m256i const total8 = _mm256_add_epi32(_mm256_add_epi32(integers[0], integers[1]),
                                            _mm256_add_epi32(integers[2], integers[3]));
    scale[b] = d;
    sum[b] = d * static_cast<float>(_mm_cvtsi128_si32(sum_epi32_lanes_256(total8)));
}

// Its own row loop too.
inline void quantize_row_avx2(float const* x, int cols, std::byte* out) {
    QuantizedRowParts const row = quantized_row_parts(out, cols);
    for (int b = 0; b < row.blocks; ++b)
        quantize_block_avx2(x + b * int8_block_elements, row.q, row.scale, row.sum, b);
}
TINFER_END_TARGET_AVX2
#endif

}  // namespace detail

// Quantizes one row of `cols` floats (a multiple of 32) into int8_row_bytes(cols) bytes at out.
// Isa::native: the version chosen at start-up (kernels/isa.hpp).
template <Isa isa = Isa::native>
void quantize_row_int8(float const* x, int cols, std::byte* out) {
    if constexpr (isa == Isa::native) {
        with_running_isa([&]<Isa chosen>() { quantize_row_int8<chosen>(x, cols, out); });
#if TINFER_X86_TARGETS
    } else if constexpr (isa == Isa::avx512) {
        detail::quantize_row_avx512(x, cols, out);
    } else if constexpr (isa == Isa::avx2) {
        detail::quantize_row_avx2(x, cols, out);
#endif
    } else {
        detail::quantize_row_portable(x, cols, out);
    }
}

// The float value element k of a quantized row stands for (d_j * q), for tests and tools.
inline float int8_row_value(Int8Row row, int k) {
    return row.scale[k / int8_block_elements] * static_cast<float>(row.q[k]);
}

}  // namespace tinfer::kernels
