#pragma once
// Integer products of quantized weights (Q4_0, Q4_1, Q8_0) with int8 activation rows
// (kernels/int8_activations.hpp), on weights repacked once into 16-row strips.
//
// For weight block b with scale d_b and int8 activations with scale e_b:
//   Q4_1  w = d q + m  (q in 0..15):      w . x = d e sum(q x) + m * e sum(x)
//   Q4_0  w = d (q - 8):                  w . x = d e sum(q x) - 8 d * e sum(x)
//   Q8_0  w = d q (q in -128..127), stored as unsigned q + 128 (VNNI multiplies unsigned by
//         signed bytes):                  w . x = d e sum((q + 128) x) - 128 d * e sum(x)
// The integer sums are exact; e sum(x) is the activation row's precomputed `sum`.
//
// Strip layout. Rows go in strips of 16 (the last padded with zero rows), one row per 32-bit
// lane of a 512-bit register. A strip is its rows' blocks in order, each block
//   quants   registers of 16 rows x 4 bytes, lane r = row r's bytes 4k .. 4k+3:
//            Q4_x: 4 registers of the GGUF's nibble bytes qs[4k .. 4k+3] (low nibbles are
//            elements 4k.., high nibbles elements 16+4k..); Q8_0: 8 registers of q + 128
//   d[16]    f16 scales, row r's in lane r
//   m[16]    Q4_1 only: f16 minimums, same order
// (as many bytes as the 16 rows' GGUF blocks). vpdpbusd of a quants register with 4 activation
// bytes broadcast to every lane adds 4 products to each row's lane, so a block's 16 row sums
// come out in the lanes its scales were loaded into: no shuffles, no horizontal sums, and each
// activation value is loaded once per 16 rows. Why not the GGUF layout: its row-by-row blocks
// need byte gathers and scale permutes before any product, which made decode compute bound.
//
// Implementations: AVX-512 VNNI, AVX2 (+FMA, F16C), portable; Isa::native takes the best the
// compiler targets. Batch invariance: every (row, token) output is one lane receiving the same
// operations in the same order whatever the token tile, the batch or the thread. All three do
// the same float operations in the same order (fused multiply-adds included), so their outputs
// are bitwise equal.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/dtype.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/format/quant_blocks.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/weight_matrix.hpp>

#include <tinfer/core/simd_intrinsics.hpp>

namespace tinfer::kernels {

// Weight encodings with an integer dot product against int8 activations.
constexpr bool has_int8_dot(DType t) {
    return t == DType::q4_0 || t == DType::q4_1 || t == DType::q8_0;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
inline constexpr bool int8_dot_vectorized = true;
#else
inline constexpr bool int8_dot_vectorized = false;
#endif

inline constexpr int int8_strip_rows = 16;  // one 32-bit lane each

// Sizes of the strip layout for weights W.
template <DType W>
struct Int8StripFormat {
    static_assert(has_int8_dot(W), "Int8StripFormat: weights must be Q4_0, Q4_1 or Q8_0");
    static constexpr bool nibbles = W != DType::q8_0;
    static constexpr bool stores_minimum = W == DType::q4_1;
    static constexpr int lane_bytes = 4;  // quant bytes per row per register
    static constexpr int registers = (nibbles ? 16 : 32) / lane_bytes;
    static constexpr std::size_t register_bytes = int8_strip_rows * lane_bytes;
    static constexpr std::size_t scale_array_bytes = int8_strip_rows * sizeof(std::uint16_t);
    static constexpr std::size_t block_bytes =
        registers * register_bytes + scale_array_bytes * (stores_minimum ? 2 : 1);
    // What Q4_0 and Q8_0 multiply d by for the offset term (Q4_1 stores it).
    static constexpr float offset_factor = W == DType::q4_0 ? -8.0f : -128.0f;

    static constexpr std::size_t strip_bytes(int cols) {
        return static_cast<std::size_t>(cols / int8_block_elements) * block_bytes;
    }
    static constexpr int strips(int rows) { return (rows + int8_strip_rows - 1) / int8_strip_rows; }
    static constexpr std::size_t matrix_bytes(int rows, int cols) {
        return static_cast<std::size_t>(strips(rows)) * strip_bytes(cols);
    }
};
static_assert(Int8StripFormat<DType::q4_1>::block_bytes ==
              int8_strip_rows * sizeof(quant::BlockOfT<DType::q4_1>));
static_assert(Int8StripFormat<DType::q4_0>::block_bytes ==
              int8_strip_rows * sizeof(quant::BlockOfT<DType::q4_0>));
static_assert(Int8StripFormat<DType::q8_0>::block_bytes ==
              int8_strip_rows * sizeof(quant::BlockOfT<DType::q8_0>));

// Calls body.template operator()<W>() for the int8-capable encoding `type` (tinfer::Error for
// any other, listing these three).
template <class Body>
decltype(auto) dispatch_int8_weight_type(DType type, Body&& body) {
    return dispatch<DType::q4_0, DType::q4_1, DType::q8_0>(
        type, std::forward<Body>(body), [](DType a, DType b) { return a == b; },
        "int8 strip weight dtype");
}

// Bytes repack_int8_strips writes for a matrix of encoding `type`.
inline std::size_t int8_strip_matrix_bytes(DType type, int rows, int cols) {
    return dispatch_int8_weight_type(
        type, [&]<DType W>() { return Int8StripFormat<W>::matrix_bytes(rows, cols); });
}

// Writes the strip layout of `w` (GGUF layout) to `out` (int8_strip_matrix_bytes bytes) and
// returns the matrix viewing it.
template <DType W>
WeightMatrix repack_int8_strips(WeightMatrix const& w, std::byte* out) {
    check_weight_matrix<W>(w, "int8 strips");
    if (w.layout != WeightLayout::gguf) throw Error("int8 strips: the matrix is already repacked");
    using Format = Int8StripFormat<W>;
    using Block = quant::BlockOfT<W>;
    int const blocks = w.cols / int8_block_elements;
    for (int strip = 0; strip < Format::strips(w.rows); ++strip) {
        std::byte* p = out + static_cast<std::size_t>(strip) * Format::strip_bytes(w.cols);
        for (int b = 0; b < blocks; ++b, p += Format::block_bytes) {
            std::memset(p, 0, Format::block_bytes);  // padding rows: zero quants and scales
            std::byte* scales = p + Format::registers * Format::register_bytes;
            for (int r = 0; r < int8_strip_rows; ++r) {
                int const row = strip * int8_strip_rows + r;
                if (row >= w.rows) break;
                Block const& block = reinterpret_cast<Block const*>(row_pointer<W>(w, row))[b];
                for (int k = 0; k < Format::registers; ++k) {
                    std::byte* lane = p + k * Format::register_bytes + r * Format::lane_bytes;
                    for (int i = 0; i < Format::lane_bytes; ++i) {
                        auto const byte =
                            static_cast<std::uint8_t>(block.qs[k * Format::lane_bytes + i]);
                        lane[i] = std::byte(Format::nibbles ? byte : byte ^ 0x80u);
                    }
                }
                std::memcpy(scales + 2 * r, &block.d, 2);
                if constexpr (Format::stores_minimum)
                    std::memcpy(scales + Format::scale_array_bytes + 2 * r, &block.m, 2);
            }
        }
    }
    return {W, w.rows, w.cols, out, WeightLayout::int8_strips};
}

inline WeightMatrix repack_int8_strips(WeightMatrix const& w, std::byte* out) {
    return dispatch_int8_weight_type(w.type,
                                     [&]<DType W>() { return repack_int8_strips<W>(w, out); });
}

namespace detail {

// A block's f16 scale array entry r.
inline float strip_scale(std::byte const* scales, int r) {
    std::uint16_t bits;
    std::memcpy(&bits, scales + 2 * r, 2);
    return f16_to_float_branchless(bits);
}

// Portable: the vector version's float operations, lane by lane.
template <DType W, int T>
void int8_strip_tile_portable(std::byte const* strip, int cols, Int8Row const (&x)[T],
                              float (&out)[T][int8_strip_rows]) {
    using Format = Int8StripFormat<W>;
    constexpr int R = int8_strip_rows, lane = Format::lane_bytes;
    float acc[T][R] = {};
    int const blocks = cols / int8_block_elements;
    for (int b = 0; b < blocks; ++b) {
        std::byte const* p = strip + static_cast<std::size_t>(b) * Format::block_bytes;
        auto const* quants = reinterpret_cast<std::uint8_t const*>(p);
        std::byte const* scales = p + Format::registers * Format::register_bytes;
        for (int t = 0; t < T; ++t) {
            std::int8_t const* xq = x[t].q + b * int8_block_elements;
            for (int r = 0; r < R; ++r) {
                int sum = 0;
                for (int k = 0; k < Format::registers; ++k) {
                    std::uint8_t const* bytes = quants + k * Format::register_bytes + r * lane;
                    for (int i = 0; i < lane; ++i) {
                        if constexpr (Format::nibbles) {
                            sum += (bytes[i] & 0x0f) * xq[k * lane + i] +
                                   (bytes[i] >> 4) * xq[16 + k * lane + i];
                        } else {
                            sum += bytes[i] * xq[k * lane + i];
                        }
                    }
                }
                float const d = strip_scale(scales, r);
                float const m = Format::stores_minimum
                                    ? strip_scale(scales + Format::scale_array_bytes, r)
                                    : d * Format::offset_factor;
                acc[t][r] = std::fma(static_cast<float>(sum), d * x[t].scale[b], acc[t][r]);
                acc[t][r] = std::fma(m, x[t].sum[b], acc[t][r]);
            }
        }
    }
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) out[t][r] = acc[t][r];
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

template <DType W, int T>
void int8_strip_tile_avx512(std::byte const* strip, int cols, Int8Row const (&x)[T],
                            float (&out)[T][int8_strip_rows]) {
    using Format = Int8StripFormat<W>;
    constexpr int K = Format::registers;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    __m512i const nibble = _mm512_set1_epi8(0x0f);
    int const blocks = cols / int8_block_elements;
    for (int b = 0; b < blocks; ++b) {
        std::byte const* p = strip + static_cast<std::size_t>(b) * Format::block_bytes;
        // Q4: low[k] pairs with elements 4k.., high[k] with 16 + 4k..; Q8: low[k] with 4k...
        __m512i low[K], high[Format::nibbles ? K : 1];
        for (int k = 0; k < K; ++k) {
            __m512i const bytes = _mm512_loadu_si512(p + k * Format::register_bytes);
            if constexpr (Format::nibbles) {
                low[k] = _mm512_and_si512(bytes, nibble);
                high[k] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
            } else {
                low[k] = bytes;
            }
        }
        std::byte const* scales = p + K * Format::register_bytes;
        __m512 const d =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<__m256i const*>(scales)));
        __m512 m;
        if constexpr (Format::stores_minimum) {
            m = _mm512_cvtph_ps(_mm256_loadu_si256(
                reinterpret_cast<__m256i const*>(scales + Format::scale_array_bytes)));
        } else {
            m = _mm512_mul_ps(d, _mm512_set1_ps(Format::offset_factor));
        }
        for (int t = 0; t < T; ++t) {
            std::int8_t const* xq = x[t].q + b * int8_block_elements;
            auto const four = [&](int i) {  // activation bytes i .. i+3 in every lane
                std::int32_t v;
                std::memcpy(&v, xq + i, 4);
                return _mm512_set1_epi32(v);
            };
            __m512i sums = _mm512_setzero_si512();
            for (int k = 0; k < K; ++k) {
                sums = _mm512_dpbusd_epi32(sums, low[k], four(Format::lane_bytes * k));
                if constexpr (Format::nibbles)
                    sums = _mm512_dpbusd_epi32(sums, high[k], four(16 + Format::lane_bytes * k));
            }
            __m512 const scale = _mm512_mul_ps(d, _mm512_set1_ps(x[t].scale[b]));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[t]);
            acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(x[t].sum[b]), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

// AVX2 without VNNI (most x86 laptops): a 256-bit register holds 8 rows, so a strip is two
// halves with the AVX-512 lane order in each. Byte products go through vpmaddubsw, whose 16-bit
// sums saturate: nibble products are added there (8 pairs of at most 15 * 127 each: 30480, in
// range), Q8_0's signed weights go through the sign trick (|w| times x with w's sign, at most
// 2 * 128 * 127 per 16-bit lane) and are widened at once, and the +128 shift's 128 sum(x) is
// added as an integer, so the int32 sums are exactly the VNNI ones.
template <DType W, int T>
void int8_strip_tile_avx2(std::byte const* strip, int cols, Int8Row const (&x)[T],
                          float (&out)[T][int8_strip_rows]) {
    using Format = Int8StripFormat<W>;
    constexpr int K = Format::registers, halves = 2;
    __m256 acc[T][halves];
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) acc[t][h] = _mm256_setzero_ps();
    __m256i const ones = _mm256_set1_epi16(1);
    __m256i const nibble = _mm256_set1_epi8(0x0f);
    __m256i const shift = _mm256_set1_epi8(static_cast<char>(0x80));
    int const blocks = cols / int8_block_elements;
    for (int b = 0; b < blocks; ++b) {
        std::byte const* p = strip + static_cast<std::size_t>(b) * Format::block_bytes;
        std::byte const* scales = p + K * Format::register_bytes;
        // Q8_0's shift term 128 sum(x) per token, the same for both halves.
        int shift_terms[T] = {};
        if constexpr (!Format::nibbles) {
            for (int t = 0; t < T; ++t) {
                std::int8_t const* xq = x[t].q + b * int8_block_elements;
                for (int i = 0; i < int8_block_elements; ++i) shift_terms[t] += 128 * xq[i];
            }
        }
        for (int h = 0; h < halves; ++h) {
            __m256 const d =
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<__m128i const*>(scales + 16 * h)));
            __m256 m;
            if constexpr (Format::stores_minimum) {
                m = _mm256_cvtph_ps(_mm_loadu_si128(
                    reinterpret_cast<__m128i const*>(scales + Format::scale_array_bytes + 16 * h)));
            } else {
                m = _mm256_mul_ps(d, _mm256_set1_ps(Format::offset_factor));
            }
            for (int t = 0; t < T; ++t) {
                std::int8_t const* xq = x[t].q + b * int8_block_elements;
                auto const four = [&](int i) {
                    std::int32_t v;
                    std::memcpy(&v, xq + i, 4);
                    return _mm256_set1_epi32(v);
                };
                __m256i sums;
                if constexpr (Format::nibbles) {
                    __m256i pairs = _mm256_setzero_si256();
                    for (int k = 0; k < K; ++k) {
                        __m256i const bytes = _mm256_loadu_si256(reinterpret_cast<__m256i const*>(
                            p + k * Format::register_bytes + 32 * h));
                        pairs = _mm256_add_epi16(
                            pairs,
                            _mm256_maddubs_epi16(_mm256_and_si256(bytes, nibble), four(4 * k)));
                        pairs = _mm256_add_epi16(
                            pairs, _mm256_maddubs_epi16(
                                       _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble),
                                       four(16 + 4 * k)));
                    }
                    sums = _mm256_madd_epi16(pairs, ones);
                } else {
                    sums = _mm256_setzero_si256();
                    for (int k = 0; k < K; ++k) {
                        __m256i const w = _mm256_xor_si256(  // signed q
                            _mm256_loadu_si256(reinterpret_cast<__m256i const*>(
                                p + k * Format::register_bytes + 32 * h)),
                            shift);
                        __m256i const xs = four(4 * k);
                        sums = _mm256_add_epi32(
                            sums, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w),
                                                                         _mm256_sign_epi8(xs, w)),
                                                    ones));
                    }
                    sums = _mm256_add_epi32(sums, _mm256_set1_epi32(shift_terms[t]));
                }
                __m256 const scale = _mm256_mul_ps(d, _mm256_set1_ps(x[t].scale[b]));
                acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[t][h]);
                acc[t][h] = _mm256_fmadd_ps(m, _mm256_set1_ps(x[t].sum[b]), acc[t][h]);
            }
        }
    }
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) _mm256_storeu_ps(out[t] + 8 * h, acc[t][h]);
}

#endif

}  // namespace detail

// out[t][r] = row r of the strip . x[t], the strip in the layout above with `cols` columns.
template <DType W, int T, Isa isa = Isa::native>
inline void int8_strip_tile(std::byte const* strip, int cols, Int8Row const (&x)[T],
                            float (&out)[T][int8_strip_rows]) {
    static_assert(has_int8_dot(W), "int8_strip_tile: weights must be Q4_0, Q4_1 or Q8_0");
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
    if constexpr (isa == Isa::native) {
        detail::int8_strip_tile_avx512<W, T>(strip, cols, x, out);
        return;
    }
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    if constexpr (isa == Isa::native || isa == Isa::avx2) {
        detail::int8_strip_tile_avx2<W, T>(strip, cols, x, out);
        return;
    }
#endif
    detail::int8_strip_tile_portable<W, T>(strip, cols, x, out);
}

}  // namespace tinfer::kernels
