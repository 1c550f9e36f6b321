#pragma once
// Activations quantized on the fly to int8, one scale per block of 32 elements (as llama.cpp's
// Q8 activations), so that matrix products with quantized weights run as integer dot products
// (kernels/int8_dot.hpp). Which activations a forward pass uses is a compile-time precision
// policy: precision::Float32Activations (exact products, the default) or
// precision::Int8Activations (about 4x less activation traffic and VNNI integer products).
//
// Layout of one quantized row. Elements go in groups of 4 blocks (128 elements), each group
// 256 bytes laid out for the 512-bit inner loop: a register of 64 bytes then pairs with the
// low nibbles (elements 0..15) of four weight blocks and the next with their high nibbles
// (elements 16..31), and every block's int32 partial sums land in 4 lanes of their own (lanes
// 4j..4j+3), where the scale vectors below line up with them without shuffles:
//   low[64]    block j's elements 0..15 in bytes 16j .. 16j+15
//   high[64]   block j's elements 16..31 in bytes 16j .. 16j+15
//   scale[16]  block j's scale d_j in lanes 4j .. 4j+3
//   sum[16]    d_j * (sum of block j's int8 values) in lane 4j, zero in the other three lanes:
//              the term that weight offsets (Q4_1's minimum, Q4_0's -8) multiply
// A row whose block count is not a multiple of 4 ends in a partial group padded with zeros,
// which contribute exactly zero to any product.
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

namespace tinfer::precision {

// Activations stay float32: every matrix product is a float dot product of the exactly
// decoded weights.
struct Float32Activations {
    static constexpr char const* name = "f32";
};

// Activations entering a matrix with Q4_0, Q4_1 or Q8_0 weights are quantized to int8 per
// block of 32; other weight encodings keep float32 activations.
struct Int8Activations {
    static constexpr char const* name = "int8";
};

template <class P>
concept ActivationPrecision =
    std::same_as<P, Float32Activations> || std::same_as<P, Int8Activations>;

}  // namespace tinfer::precision

namespace tinfer::kernels {

inline constexpr int int8_block_elements = 32;
inline constexpr int int8_group_blocks = 4;  // blocks whose products share one 512-bit register
inline constexpr int int8_half_block = int8_block_elements / 2;
inline constexpr int int8_lanes = 16;  // int32 (and float) lanes of a 512-bit register
inline constexpr int int8_lanes_per_block = int8_lanes / int8_group_blocks;

struct Int8Group {
    std::int8_t low[int8_group_blocks * int8_half_block];
    std::int8_t high[int8_group_blocks * int8_half_block];
    float scale[int8_lanes];
    float sum[int8_lanes];
};
static_assert(sizeof(Int8Group) == 256, "an Int8Group is four 64-byte registers");

constexpr int int8_groups(int cols) {
    int const blocks = cols / int8_block_elements;
    return (blocks + int8_group_blocks - 1) / int8_group_blocks;
}

// Bytes of one quantized row of `cols` elements (a multiple of 32).
constexpr std::size_t int8_row_bytes(int cols) {
    return static_cast<std::size_t>(int8_groups(cols)) * sizeof(Int8Group);
}

// Quantized activation rows as linear reads them: row t at data + t * stride bytes.
struct Int8Rows {
    std::byte const* data = nullptr;
    std::size_t stride = 0;
    Int8Group const* row(int t) const {
        return reinterpret_cast<Int8Group const*>(data + static_cast<std::size_t>(t) * stride);
    }
};

namespace detail {

// Writes block j of `group` from 32 floats; both versions produce the same bytes and floats.
inline void quantize_block_portable(float const* x, Int8Group& group, int j) {
    float amax = 0;
    for (int k = 0; k < int8_block_elements; ++k) amax = std::max(amax, std::abs(x[k]));
    float const d = amax / 127.0f;
    float const inverse = d != 0 ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int k = 0; k < int8_block_elements; ++k) {
        int const q = static_cast<int>(std::nearbyint(x[k] * inverse));
        sum += q;
        std::int8_t* half = k < int8_half_block ? group.low : group.high;
        half[j * int8_half_block + k % int8_half_block] = static_cast<std::int8_t>(q);
    }
    for (int l = 0; l < int8_lanes_per_block; ++l) {
        group.scale[j * int8_lanes_per_block + l] = d;
        group.sum[j * int8_lanes_per_block + l] = l == 0 ? d * static_cast<float>(sum) : 0.0f;
    }
}

#if defined(__AVX512F__) && defined(__AVX512BW__)
inline void quantize_block_avx512(float const* x, Int8Group& group, int j) {
    __m512 const first = _mm512_loadu_ps(x);
    __m512 const second = _mm512_loadu_ps(x + int8_half_block);
    float const amax =
        _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(first), _mm512_abs_ps(second)));
    float const d = amax / 127.0f;
    float const inverse = d != 0 ? 1.0f / d : 0.0f;
    // cvtps rounds to nearest even (the default MXCSR mode), as std::nearbyint does.
    __m512i const q_first = _mm512_cvtps_epi32(_mm512_mul_ps(first, _mm512_set1_ps(inverse)));
    __m512i const q_second = _mm512_cvtps_epi32(_mm512_mul_ps(second, _mm512_set1_ps(inverse)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(group.low + j * int8_half_block),
                     _mm512_cvtepi32_epi8(q_first));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(group.high + j * int8_half_block),
                     _mm512_cvtepi32_epi8(q_second));
    int const sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q_first, q_second));
    for (int l = 0; l < int8_lanes_per_block; ++l) {
        group.scale[j * int8_lanes_per_block + l] = d;
        group.sum[j * int8_lanes_per_block + l] = l == 0 ? d * static_cast<float>(sum) : 0.0f;
    }
}
#endif

}  // namespace detail

// Which implementation a kernel runs: the best the compiler targets, or the portable one
// (tests run both).
enum class Isa { native, portable };

// Quantizes one row of `cols` floats (a multiple of 32) into int8_row_bytes(cols) bytes at out.
template <Isa isa = Isa::native>
void quantize_row_int8(float const* x, int cols, std::byte* out) {
    int const blocks = cols / int8_block_elements;
    auto* groups = reinterpret_cast<Int8Group*>(out);
    if (blocks % int8_group_blocks != 0) {
        std::memset(static_cast<void*>(groups + blocks / int8_group_blocks), 0, sizeof(Int8Group));
    }
    for (int b = 0; b < blocks; ++b) {
        Int8Group& group = groups[b / int8_group_blocks];
        float const* block = x + static_cast<std::size_t>(b) * int8_block_elements;
#if defined(__AVX512F__) && defined(__AVX512BW__)
        if constexpr (isa == Isa::native) {
            detail::quantize_block_avx512(block, group, b % int8_group_blocks);
            continue;
        }
#endif
        detail::quantize_block_portable(block, group, b % int8_group_blocks);
    }
}

// The float value element k of a quantized row stands for (d_j * q), for tests and tools.
inline float int8_row_value(Int8Group const* row, int k) {
    int const b = k / int8_block_elements, j = b % int8_group_blocks;
    int const within = k % int8_block_elements;
    Int8Group const& group = row[b / int8_group_blocks];
    std::int8_t const* half = within < int8_half_block ? group.low : group.high;
    return group.scale[j * int8_lanes_per_block] *
           static_cast<float>(half[j * int8_half_block + within % int8_half_block]);
}

}  // namespace tinfer::kernels
