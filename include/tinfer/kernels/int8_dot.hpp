#pragma once
// Integer products of quantized weights (Q4_0, Q4_1, Q8_0) with int8 activation rows
// (kernels/int8_activations.hpp), on weights repacked once into 4-row strips.
//
// For weight block j with scale d_j and int8 activations with scale e_j:
//   Q4_1  w = d q + m  (q in 0..15):      w . x = d e sum(q x) + m * e sum(x)
//   Q4_0  w = d (q - 8):                  w . x = d e sum(q x) - 8 d * e sum(x)
//   Q8_0  w = d q (q in -128..127), stored as unsigned q + 128 (VNNI multiplies unsigned by
//         signed bytes):                  w . x = d e sum((q + 128) x) - 128 d * e sum(x)
// The integer sums are exact (vpdpbusd: 4 byte products per int32 lane); e sum(x) is the
// activation row's precomputed `sum`.
//
// Strip layout (why: the GGUF's row-by-row blocks need a byte gather and two scale permutes
// per block group before any product; this layout needs none). Rows go in strips of 4, the last
// strip padded with zero rows. A strip is the row's blocks in groups of 4 (the last group may
// hold fewer), each group
//   quants   per block j: Q4_x: 64 bytes, row r's 16 nibble bytes at 16r (so one register holds
//            block j of all four rows, row r in 128-bit lane r); Q8_0: 128 bytes, the low halves
//            (elements 0..15, +128) of the four rows then the high halves
//   d[16]    f16 scales, d[4r + j] of row r block j (zero for blocks the group lacks)
//   m[16]    Q4_1 only: f16 minimums, same order
// A 512-bit vpdpbusd of block j with its 16 activation bytes broadcast to the four lanes leaves
// row r's partial sums in lanes 4r..4r+3; a 4x4 transpose-add of the group's four blocks gives
// lane 4r + j = row r's block-j sum, where d (loaded as is) and the activations' four scales
// (one 128-bit broadcast) line up without shuffles.
//
// Implementations: AVX-512 VNNI, AVX2 (+FMA, F16C), portable; `Isa::native` takes the best the
// compiler targets. Batch invariance: every (row, token) output receives the same operations in
// the same order whatever the token tile, the batch or the thread. All three do the same float
// operations in the same order (fused multiply-adds included), so their outputs are bitwise equal.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <tinfer/core/dtype.hpp>
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

inline constexpr int int8_strip_rows = 4;  // one 128-bit lane each

// Sizes of the strip layout for weights W.
template <DType W>
struct Int8StripFormat {
    static_assert(has_int8_dot(W), "Int8StripFormat: weights must be Q4_0, Q4_1 or Q8_0");
    static constexpr bool nibbles = W != DType::q8_0;
    static constexpr bool stores_minimum = W == DType::q4_1;
    // Bytes of one block's quants for the strip's four rows.
    static constexpr std::size_t block_bytes =
        int8_strip_rows * (nibbles ? int8_block_elements / 2 : int8_block_elements);
    static constexpr std::size_t scale_array_bytes =
        int8_strip_rows * int8_group_blocks * sizeof(std::uint16_t);
    static constexpr std::size_t scale_bytes = scale_array_bytes * (stores_minimum ? 2 : 1);
    // What Q4_0 and Q8_0 multiply d by for the offset term (Q4_1 stores it).
    static constexpr float offset_factor = W == DType::q4_0 ? -8.0f : -128.0f;

    static constexpr std::size_t group_bytes(int blocks_in_group) {
        return static_cast<std::size_t>(blocks_in_group) * block_bytes + scale_bytes;
    }
    static constexpr std::size_t strip_bytes(int cols) {
        int const blocks = cols / int8_block_elements;
        int const rest = blocks % int8_group_blocks;
        return static_cast<std::size_t>(blocks / int8_group_blocks) *
                   group_bytes(int8_group_blocks) +
               (rest != 0 ? group_bytes(rest) : 0);
    }
    static constexpr int strips(int rows) { return (rows + int8_strip_rows - 1) / int8_strip_rows; }
    static constexpr std::size_t matrix_bytes(int rows, int cols) {
        return static_cast<std::size_t>(strips(rows)) * strip_bytes(cols);
    }
};

// Bytes repack_int8_strips writes for a matrix of encoding `type`.
inline std::size_t int8_strip_matrix_bytes(DType type, int rows, int cols) {
    switch (type) {
        case DType::q4_0:
            return Int8StripFormat<DType::q4_0>::matrix_bytes(rows, cols);
        case DType::q4_1:
            return Int8StripFormat<DType::q4_1>::matrix_bytes(rows, cols);
        case DType::q8_0:
            return Int8StripFormat<DType::q8_0>::matrix_bytes(rows, cols);
        default:
            throw Error("int8 strips: " + std::string(name_of(type)) + " has no int8 product");
    }
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
        for (int first = 0; first < blocks; first += int8_group_blocks) {
            int const n = std::min(int8_group_blocks, blocks - first);
            std::uint16_t d[int8_strip_rows * int8_group_blocks] = {};
            std::uint16_t m[int8_strip_rows * int8_group_blocks] = {};
            std::memset(p, 0, Format::group_bytes(n));
            for (int r = 0; r < int8_strip_rows; ++r) {
                int const row = strip * int8_strip_rows + r;
                if (row >= w.rows) continue;  // padding rows: zero quants and scales
                auto const* source = reinterpret_cast<Block const*>(row_pointer<W>(w, row));
                for (int j = 0; j < n; ++j) {
                    Block const& block = source[first + j];
                    std::byte* quants = p + static_cast<std::size_t>(j) * Format::block_bytes;
                    if constexpr (Format::nibbles) {
                        std::memcpy(quants + 16 * r, block.qs, 16);
                    } else {
                        for (int k = 0; k < 16; ++k) {
                            quants[16 * r + k] =
                                std::byte(static_cast<std::uint8_t>(block.qs[k]) ^ 0x80u);
                            quants[64 + 16 * r + k] =
                                std::byte(static_cast<std::uint8_t>(block.qs[16 + k]) ^ 0x80u);
                        }
                    }
                    d[int8_group_blocks * r + j] = block.d;
                    if constexpr (Format::stores_minimum) m[int8_group_blocks * r + j] = block.m;
                }
            }
            p += static_cast<std::size_t>(n) * Format::block_bytes;
            std::memcpy(p, d, sizeof d);
            p += sizeof d;
            if constexpr (Format::stores_minimum) {
                std::memcpy(p, m, sizeof m);
                p += sizeof m;
            }
        }
    }
    return {W, w.rows, w.cols, out, WeightLayout::int8_strips};
}

inline WeightMatrix repack_int8_strips(WeightMatrix const& w, std::byte* out) {
    switch (w.type) {
        case DType::q4_0:
            return repack_int8_strips<DType::q4_0>(w, out);
        case DType::q4_1:
            return repack_int8_strips<DType::q4_1>(w, out);
        case DType::q8_0:
            return repack_int8_strips<DType::q8_0>(w, out);
        default:
            throw Error("int8 strips: " + std::string(name_of(w.type)) + " has no int8 product");
    }
}

namespace detail {

// Portable: the vector version's float operations, lane by lane. acc[r][j] is lane 4r + j.
template <DType W, int T>
void int8_strip_tile_portable(std::byte const* strip, int cols, Int8Row const (&x)[T],
                              float (&out)[int8_strip_rows][T]) {
    using Format = Int8StripFormat<W>;
    constexpr int R = int8_strip_rows, J = int8_group_blocks;
    float acc[T][R][J] = {};
    int const blocks = cols / int8_block_elements;
    std::byte const* p = strip;
    for (int first = 0; first < blocks; first += J) {
        int const n = std::min(J, blocks - first);
        auto const* quants = reinterpret_cast<std::uint8_t const*>(p);
        std::byte const* scales = p + static_cast<std::size_t>(n) * Format::block_bytes;
        float d[R][J], m[R][J];
        for (int r = 0; r < R; ++r) {
            for (int j = 0; j < J; ++j) {
                std::uint16_t bits;
                std::memcpy(&bits, scales + 2 * (J * r + j), 2);
                d[r][j] = f16_to_float_branchless(bits);
                if constexpr (Format::stores_minimum) {
                    std::memcpy(&bits, scales + Format::scale_array_bytes + 2 * (J * r + j), 2);
                    m[r][j] = f16_to_float_branchless(bits);
                } else {
                    m[r][j] = d[r][j] * Format::offset_factor;
                }
            }
        }
        for (int t = 0; t < T; ++t) {
            for (int r = 0; r < R; ++r) {
                for (int j = 0; j < J; ++j) {
                    int sum = 0;
                    if (j < n) {
                        std::uint8_t const* block = quants + j * Format::block_bytes;
                        std::int8_t const* xq = x[t].q + (first + j) * int8_block_elements;
                        for (int k = 0; k < 16; ++k) {
                            if constexpr (Format::nibbles) {
                                sum += (block[16 * r + k] & 0x0f) * xq[k] +
                                       (block[16 * r + k] >> 4) * xq[16 + k];
                            } else {
                                sum +=
                                    block[16 * r + k] * xq[k] + block[64 + 16 * r + k] * xq[16 + k];
                            }
                        }
                    }
                    float const scale = d[r][j] * x[t].scale[first + j];
                    acc[t][r][j] = std::fma(static_cast<float>(sum), scale, acc[t][r][j]);
                    acc[t][r][j] = std::fma(m[r][j], x[t].sum[first + j], acc[t][r][j]);
                }
            }
        }
        p += Format::group_bytes(n);
    }
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r)
            out[r][t] = (acc[t][r][0] + acc[t][r][1]) + (acc[t][r][2] + acc[t][r][3]);
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)

// Lane 4r + j of the result = the sum of lanes 4r..4r+3 of s[j] (exact: int32 adds).
inline __m512i transpose_add(__m512i s0, __m512i s1, __m512i s2, __m512i s3) {
    __m512i const u0 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s0, s1), _mm512_unpackhi_epi32(s0, s1));
    __m512i const u1 =
        _mm512_add_epi32(_mm512_unpacklo_epi32(s2, s3), _mm512_unpackhi_epi32(s2, s3));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(u0, u1), _mm512_unpackhi_epi64(u0, u1));
}

template <DType W, int T>
void int8_strip_tile_avx512(std::byte const* strip, int cols, Int8Row const (&x)[T],
                            float (&out)[int8_strip_rows][T]) {
    using Format = Int8StripFormat<W>;
    constexpr int J = int8_group_blocks;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    // One group of n blocks (n known at compile time: full groups, then the tail).
    auto const group = [&]<int n>(std::byte const* p, int first) {
        __m512i low[n], high[n];
        for (int j = 0; j < n; ++j) {
            std::byte const* quants = p + static_cast<std::size_t>(j) * Format::block_bytes;
            if constexpr (Format::nibbles) {
                __m512i const bytes = _mm512_loadu_si512(quants);
                __m512i const nibble = _mm512_set1_epi8(0x0f);
                low[j] = _mm512_and_si512(bytes, nibble);
                high[j] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
            } else {
                low[j] = _mm512_loadu_si512(quants);
                high[j] = _mm512_loadu_si512(quants + 64);
            }
        }
        std::byte const* scales = p + static_cast<std::size_t>(n) * Format::block_bytes;
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
            __m512i sums[J];
            for (int j = 0; j < J; ++j) {
                if (j < n) {
                    std::int8_t const* xq = x[t].q + (first + j) * int8_block_elements;
                    __m512i const x_low = _mm512_broadcast_i32x4(
                        _mm_loadu_si128(reinterpret_cast<__m128i const*>(xq)));
                    __m512i const x_high = _mm512_broadcast_i32x4(
                        _mm_loadu_si128(reinterpret_cast<__m128i const*>(xq + 16)));
                    sums[j] = _mm512_dpbusd_epi32(
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), low[j], x_low), high[j],
                        x_high);
                } else {
                    sums[j] = _mm512_setzero_si512();
                }
            }
            __m512i const block_sums = transpose_add(sums[0], sums[1], sums[2], sums[3]);
            __m512 const e = _mm512_broadcast_f32x4(_mm_loadu_ps(x[t].scale + first));
            __m512 const x_sum = _mm512_broadcast_f32x4(_mm_loadu_ps(x[t].sum + first));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(block_sums), _mm512_mul_ps(d, e), acc[t]);
            acc[t] = _mm512_fmadd_ps(m, x_sum, acc[t]);
        }
    };
    int const blocks = cols / int8_block_elements;
    int const full = blocks / J;
    std::byte const* p = strip;
    for (int g = 0; g < full; ++g, p += Format::group_bytes(J))
        group.template operator()<J>(p, J * g);
    switch (blocks % J) {
        case 1:
            group.template operator()<1>(p, J * full);
            break;
        case 2:
            group.template operator()<2>(p, J * full);
            break;
        case 3:
            group.template operator()<3>(p, J * full);
            break;
        default:
            break;
    }
    for (int t = 0; t < T; ++t) {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, acc[t]);
        for (int r = 0; r < int8_strip_rows; ++r)
            out[r][t] = (lanes[4 * r] + lanes[4 * r + 1]) + (lanes[4 * r + 2] + lanes[4 * r + 3]);
    }
}

#endif

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

inline __m256i transpose_add(__m256i s0, __m256i s1, __m256i s2, __m256i s3) {
    __m256i const u0 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(s0, s1), _mm256_unpackhi_epi32(s0, s1));
    __m256i const u1 =
        _mm256_add_epi32(_mm256_unpacklo_epi32(s2, s3), _mm256_unpackhi_epi32(s2, s3));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(u0, u1), _mm256_unpackhi_epi64(u0, u1));
}

// AVX2 without VNNI (most x86 laptops): a 256-bit register holds two rows of a block, so a strip
// is two halves (rows 0-1, rows 2-3) with the AVX-512 kernel's lane order in each. Byte products
// go through vpmaddubsw, which saturates at 16 bits: nibble sums (at most 4 * 15 * 127 per
// 16-bit lane) never reach it, and Q8_0 uses the sign trick (|w| times x with w's sign), one
// block half at a time, so each 16-bit sum stays within 2 * 128 * 127.
template <DType W, int T>
void int8_strip_tile_avx2(std::byte const* strip, int cols, Int8Row const (&x)[T],
                          float (&out)[int8_strip_rows][T]) {
    using Format = Int8StripFormat<W>;
    constexpr int J = int8_group_blocks, halves = 2;
    __m256 acc[T][halves];
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) acc[t][h] = _mm256_setzero_ps();
    __m256i const ones = _mm256_set1_epi16(1);
    // Exact int32 sums of rows (2h, 2h + 1) of block j times the block's activations.
    auto const block_sums = [&](std::byte const* quants, int h, std::int8_t const* xq) {
        __m256i const x_low =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<__m128i const*>(xq)));
        __m256i const x_high =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<__m128i const*>(xq + 16)));
        if constexpr (Format::nibbles) {
            __m256i const bytes =
                _mm256_loadu_si256(reinterpret_cast<__m256i const*>(quants + 32 * h));
            __m256i const nibble = _mm256_set1_epi8(0x0f);
            __m256i const pairs = _mm256_add_epi16(
                _mm256_maddubs_epi16(_mm256_and_si256(bytes, nibble), x_low),
                _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble),
                                     x_high));
            return _mm256_madd_epi16(pairs, ones);
        } else {
            // The strip holds q + 128; the sign trick needs q, and the kernel's integer sum is
            // sum((q + 128) x) = sum(q x) + 128 sum(x) (128 * x pairs also fit 16 bits).
            __m256i const shift = _mm256_set1_epi8(static_cast<char>(0x80));
            auto const half = [&](std::byte const* p, __m256i xs) {
                __m256i const w = _mm256_xor_si256(
                    _mm256_loadu_si256(reinterpret_cast<__m256i const*>(p)), shift);
                __m256i const products = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(xs, w)), ones);
                __m256i const offsets = _mm256_madd_epi16(_mm256_maddubs_epi16(shift, xs), ones);
                return _mm256_add_epi32(products, offsets);
            };
            return _mm256_add_epi32(half(quants + 32 * h, x_low),
                                    half(quants + 64 + 32 * h, x_high));
        }
    };
    auto const group = [&](std::byte const* p, int first, int n) {
        std::byte const* scales = p + static_cast<std::size_t>(n) * Format::block_bytes;
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
                __m256i sums[J];
                for (int j = 0; j < J; ++j) {
                    sums[j] =
                        j < n ? block_sums(p + static_cast<std::size_t>(j) * Format::block_bytes, h,
                                           x[t].q + (first + j) * int8_block_elements)
                              : _mm256_setzero_si256();
                }
                __m256i const totals = transpose_add(sums[0], sums[1], sums[2], sums[3]);
                __m256 const e =
                    _mm256_broadcast_ps(reinterpret_cast<__m128 const*>(x[t].scale + first));
                __m256 const x_sum =
                    _mm256_broadcast_ps(reinterpret_cast<__m128 const*>(x[t].sum + first));
                acc[t][h] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(totals), _mm256_mul_ps(d, e), acc[t][h]);
                acc[t][h] = _mm256_fmadd_ps(m, x_sum, acc[t][h]);
            }
        }
    };
    int const blocks = cols / int8_block_elements;
    std::byte const* p = strip;
    for (int first = 0; first < blocks; first += J) {
        int const n = std::min(J, blocks - first);
        group(p, first, n);
        p += Format::group_bytes(n);
    }
    for (int t = 0; t < T; ++t) {
        for (int h = 0; h < halves; ++h) {
            alignas(32) float lanes[8];
            _mm256_store_ps(lanes, acc[t][h]);
            for (int r = 0; r < 2; ++r)
                out[2 * h + r][t] =
                    (lanes[4 * r] + lanes[4 * r + 1]) + (lanes[4 * r + 2] + lanes[4 * r + 3]);
        }
    }
}

#endif

}  // namespace detail

// out[r][t] = row r of the strip . x[t], the strip in the layout above with `cols` columns.
template <DType W, int T, Isa isa = Isa::native>
inline void int8_strip_tile(std::byte const* strip, int cols, Int8Row const (&x)[T],
                            float (&out)[int8_strip_rows][T]) {
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
