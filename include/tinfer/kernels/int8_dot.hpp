#pragma once
// Integer dot products of quantized weight rows (Q4_0, Q4_1, Q8_0, read in place as GGUF stores
// them) with int8 activation rows (kernels/int8_activations.hpp).
//
// For weight block j with scale d_j and int8 activations with scale e_j:
//   Q4_1  w = d q + m  (q in 0..15):      w . x = d e sum(q x) + m * e sum(x)
//   Q4_0  w = d (q - 8):                  w . x = d e sum(q x) - 8 d * e sum(x)
//   Q8_0  w = d q (q in -128..127), run as unsigned q + 128 (VNNI multiplies unsigned by
//         signed bytes):                  w . x = d e sum((q + 128) x) - 128 d * e sum(x)
// The integer sums are exact (vpdpbusd: 4 byte products per int32 lane); e sum(x) is the
// activation row's precomputed `sum`. So every output is
//   sum over groups of [ float(S) * (d e) + offset * sum ]   in 16 float lanes,
// added up once at the end.
//
// AVX-512 (F, BW, VNNI, VBMI): a group of 4 weight blocks is two overlapping 64-byte loads
// and one byte permute (vpermt2b) that gathers the 64 nibble bytes in activation order; the
// blocks' f16 scales are gathered by a word permute straight into the lanes their sums occupy.
// A register tile of R weight rows x T tokens reuses each decoded group for T tokens.
//
// Batch invariance: each (row, token) accumulator receives the same operations in the same
// order whatever the tile shape, the batch or the thread, so outputs are bitwise the same for
// a token alone or in any batch. The portable version keeps this too (with its own order).
#include <algorithm>
#include <cstddef>
#include <cstdint>

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

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && \
    defined(__AVX512VBMI__)
inline constexpr bool int8_dot_vectorized = true;
#else
inline constexpr bool int8_dot_vectorized = false;
#endif

namespace detail {

// The constant the weight offset multiplies the block scale by (0: the offset is stored).
template <DType W>
constexpr float weight_offset_factor() {
    if constexpr (W == DType::q4_0) {
        return -8.0f;
    } else if constexpr (W == DType::q8_0) {
        return -128.0f;
    } else {
        return 0.0f;
    }
}

// Portable: one block at a time, the integer sum exact, in the same lane-free order for every
// (row, token).
template <DType W>
float int8_dot_portable(std::byte const* w_row, Int8Group const* x, int blocks) {
    using Block = quant::BlockOfT<W>;
    auto const* w = reinterpret_cast<Block const*>(w_row);
    float total = 0, offsets = 0;
    for (int b = 0; b < blocks; ++b) {
        Int8Group const& group = x[b / int8_group_blocks];
        int const j = b % int8_group_blocks;
        std::int8_t const* low = group.low + j * int8_half_block;
        std::int8_t const* high = group.high + j * int8_half_block;
        int sum = 0;
        for (int k = 0; k < int8_half_block; ++k) {
            if constexpr (W == DType::q8_0) {
                sum += w[b].qs[k] * low[k] + w[b].qs[k + int8_half_block] * high[k];
            } else {
                sum += (w[b].qs[k] & 0x0f) * low[k] + (w[b].qs[k] >> 4) * high[k];
            }
        }
        float const d = f16_to_float_branchless(w[b].d);
        float const e = group.scale[j * int8_lanes_per_block];
        total += static_cast<float>(sum) * (d * e);
        if constexpr (W == DType::q4_1) {
            offsets += f16_to_float_branchless(w[b].m) * group.sum[j * int8_lanes_per_block];
        } else if constexpr (W == DType::q4_0) {
            offsets += weight_offset_factor<W>() * d * group.sum[j * int8_lanes_per_block];
        }
    }
    return total + offsets;
}

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && \
    defined(__AVX512VBMI__)

// One group of up to 4 weight blocks, decoded for the integer products.
struct WeightGroup {
    __m512i low;    // unsigned bytes pairing with Int8Group::low
    __m512i high;   // unsigned bytes pairing with Int8Group::high
    __m512 scale;   // d_j in lanes 4j..4j+3
    __m512 offset;  // the offset term's weight factor, same lanes
};

template <std::size_t N>
struct ByteIndex {
    alignas(64) std::uint8_t values[N];
};

// Source byte of nibble byte 16j + k: block j's qs[k], counting from `origin`.
template <DType W>
consteval ByteIndex<64> nibble_index(int first_qs_byte, int origin) {
    ByteIndex<64> index{};
    for (int j = 0; j < int8_group_blocks; ++j)
        for (int k = 0; k < int8_half_block; ++k)
            index.values[j * int8_half_block + k] = static_cast<std::uint8_t>(
                j * static_cast<int>(sizeof(quant::BlockOfT<W>)) + first_qs_byte + k - origin);
    return index;
}

// Source 16-bit word of lane l's scale (word_in_block 0: d, 1: Q4_1's m).
template <DType W>
consteval ByteIndex<64> scale_word_index(int word_in_block) {
    ByteIndex<64> index{};  // 32 little-endian words; the upper 16 are unused
    for (int l = 0; l < int8_lanes; ++l) {
        int const word =
            l / int8_lanes_per_block * static_cast<int>(sizeof(quant::BlockOfT<W>) / 2) +
            word_in_block;
        index.values[2 * l] = static_cast<std::uint8_t>(word);
    }
    return index;
}

inline __m512i load_index(ByteIndex<64> const& index) {
    return _mm512_load_si512(static_cast<void const*>(index.values));
}

// Mask of the first `bytes` bytes of a 64-byte load (none when bytes <= 0).
inline __mmask64 first_bytes(int bytes) {
    if (bytes >= 64) return ~__mmask64{0};
    if (bytes <= 0) return 0;
    return (__mmask64{1} << bytes) - 1;
}

// Blocks [0, n) of the group starting at `p` (n <= 4; missing blocks read as zero). Masked
// loads never touch bytes past the group's last block, so the last row of a mapping is safe.
// full: n == 4, known at compile time, so the masks are constants.
template <DType W, bool full>
inline WeightGroup load_weight_group(std::byte const* p, int n) {
    constexpr int block_size = static_cast<int>(sizeof(quant::BlockOfT<W>));
    int const bytes = (full ? int8_group_blocks : n) * block_size;
    __m512i const nibble_mask = _mm512_set1_epi8(0x0f);
    WeightGroup g;
    if constexpr (W == DType::q4_0 || W == DType::q4_1) {
        constexpr int qs_offset = W == DType::q4_1 ? 4 : 2;
        static constexpr ByteIndex<64> qs_index = nibble_index<W>(qs_offset, 0);
        static constexpr ByteIndex<64> d_index = scale_word_index<W>(0);
        __m512i const a = _mm512_maskz_loadu_epi8(first_bytes(bytes), p);
        __m512i const b = _mm512_maskz_loadu_epi8(first_bytes(bytes - 64), p + 64);
        __m512i const qs = _mm512_permutex2var_epi8(a, load_index(qs_index), b);
        g.low = _mm512_and_si512(qs, nibble_mask);
        g.high = _mm512_and_si512(_mm512_srli_epi16(qs, 4), nibble_mask);
        g.scale = _mm512_cvtph_ps(
            _mm512_castsi512_si256(_mm512_permutexvar_epi16(load_index(d_index), a)));
        if constexpr (W == DType::q4_1) {
            static constexpr ByteIndex<64> m_index = scale_word_index<W>(1);
            g.offset = _mm512_cvtph_ps(
                _mm512_castsi512_si256(_mm512_permutexvar_epi16(load_index(m_index), a)));
        } else {
            g.offset = _mm512_mul_ps(g.scale, _mm512_set1_ps(weight_offset_factor<W>()));
        }
    } else {
        static_assert(W == DType::q8_0);
        // 4 blocks span 136 bytes: low halves come from bytes [0, 128), high halves from
        // [8, 136), each window two registers wide.
        constexpr int shift = 8;
        static constexpr ByteIndex<64> low_index = nibble_index<W>(2, 0);
        static constexpr ByteIndex<64> high_index = nibble_index<W>(2 + int8_half_block, shift);
        static constexpr ByteIndex<64> d_index = scale_word_index<W>(0);
        __m512i const a = _mm512_maskz_loadu_epi8(first_bytes(bytes), p);
        __m512i const b = _mm512_maskz_loadu_epi8(first_bytes(bytes - 64), p + 64);
        __m512i const a_shifted = _mm512_maskz_loadu_epi8(first_bytes(bytes - shift), p + shift);
        __m512i const b_shifted =
            _mm512_maskz_loadu_epi8(first_bytes(bytes - shift - 64), p + shift + 64);
        __m512i const to_unsigned = _mm512_set1_epi8(static_cast<char>(0x80));
        g.low =
            _mm512_xor_si512(_mm512_permutex2var_epi8(a, load_index(low_index), b), to_unsigned);
        g.high = _mm512_xor_si512(
            _mm512_permutex2var_epi8(a_shifted, load_index(high_index), b_shifted), to_unsigned);
        g.scale = _mm512_cvtph_ps(
            _mm512_castsi512_si256(_mm512_permutex2var_epi16(a, load_index(d_index), b)));
        // Blocks past n: their bytes read as zero, +128 each, against zero activations.
        g.offset = _mm512_mul_ps(g.scale, _mm512_set1_ps(weight_offset_factor<W>()));
    }
    return g;
}

// out[r][t] = w_rows[r] . x_rows[t] over `blocks` blocks.
template <DType W, int R, int T>
inline void int8_tile_avx512(std::byte const* const (&w_rows)[R],
                             Int8Group const* const (&x_rows)[T], int blocks, float (&out)[R][T]) {
    constexpr std::size_t group_bytes = int8_group_blocks * sizeof(quant::BlockOfT<W>);
    __m512 acc[R][T];
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
    auto const group = [&]<bool full>(int g, int n) {
        for (int r = 0; r < R; ++r) {
            WeightGroup const w = load_weight_group<W, full>(w_rows[r] + g * group_bytes, n);
            for (int t = 0; t < T; ++t) {
                Int8Group const& x = x_rows[t][g];
                __m512i sums =
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), w.low, _mm512_loadu_si512(x.low));
                sums = _mm512_dpbusd_epi32(sums, w.high, _mm512_loadu_si512(x.high));
                __m512 const scale = _mm512_mul_ps(w.scale, _mm512_loadu_ps(x.scale));
                acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[r][t]);
                acc[r][t] = _mm512_fmadd_ps(w.offset, _mm512_loadu_ps(x.sum), acc[r][t]);
            }
        }
    };
    int const full_groups = blocks / int8_group_blocks;
    for (int g = 0; g < full_groups; ++g) group.template operator()<true>(g, int8_group_blocks);
    if (int const rest = blocks % int8_group_blocks; rest != 0)
        group.template operator()<false>(full_groups, rest);
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t) out[r][t] = _mm512_reduce_add_ps(acc[r][t]);
}

#endif

}  // namespace detail

// out[r][t] = w_rows[r] . x_rows[t], each weight row `blocks` blocks of W.
template <DType W, int R, int T, Isa isa = Isa::native>
inline void int8_tile(std::byte const* const (&w_rows)[R], Int8Group const* const (&x_rows)[T],
                      int blocks, float (&out)[R][T]) {
    static_assert(has_int8_dot(W), "int8_tile: weights must be Q4_0, Q4_1 or Q8_0");
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__) && \
    defined(__AVX512VBMI__)
    if constexpr (isa == Isa::native) {
        detail::int8_tile_avx512<W, R, T>(w_rows, x_rows, blocks, out);
        return;
    }
#endif
    for (int r = 0; r < R; ++r)
        for (int t = 0; t < T; ++t)
            out[r][t] = detail::int8_dot_portable<W>(w_rows[r], x_rows[t], blocks);
}

}  // namespace tinfer::kernels
