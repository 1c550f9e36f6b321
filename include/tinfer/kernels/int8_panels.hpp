#pragma once
// Prefill on AVX-512: a 16-row strip of int8-capable weights (kernels/int8_dot.hpp) decoded once
// per chunk of tokens into a panel of plain unsigned bytes and float factors, which every token
// tile of the chunk then multiplies without unpacking anything.
//
// Why: the strip kernels unpack a block's nibbles, fifth bits and K-quant scales again for every
// tile of 4 tokens. That suits decode (1-3 tokens, where the strips stream from memory at the
// file's bits per weight), but in prefill the unpacking costs as much as the products for the
// formats with high bits: Q5_0 (two thirds of Gemma 3's matrix products) ran at half Q4_0's
// rate, Q6_K at a third (bench/int8_linear_bench). A panel is decoded once per strip per chunk
// (about 100 tokens at 2048 columns) into thread scratch (int8_panel_bytes: 20-22 bytes per
// column), and then every format runs the same inner step: 8 vpdpbusd per block and token.
//
// Panel layout, per activation block of 32 elements (a legacy block, a Q4_K / Q5_K sub-block,
// or two Q6_K sub-blocks of 16):
//   values  8 registers of 16 rows x 4 bytes: lane r of register k = row r's values of
//           elements 4k .. 4k+3, unsigned (Q4: 0..15, Q5: 0..31, Q8_0: q + 128, Q6_K: 0..63)
//   scale   16 floats: d (legacy formats, Q6_K), d s_j (Q4_K, Q5_K)
//   offset  16 floats, what multiplies e sum(x): m (Q4_1, Q5_1), c d (Q4_0, Q5_0),
//           -(dmin m_j) (Q4_K, Q5_K), unused by Q8_0 (its sums start at -128 sum(x)); Q6_K
//           instead: its two sub-blocks' int8 scales c_0, c_1, 16 int32 each
// The factors are the ones the strip kernels compute (the same float products of the same
// values), and the products do the strip kernels' float operations in their order (a negated
// minimum in a fused multiply-add is their fused negative multiply-add, exactly), so a panel's
// outputs are the strips' bits: decode and prefill, and a token alone or in any batch, agree
// bitwise (tests/kernels/int8_linear_test.cpp checks every format).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/dtype.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/int8_dot.hpp>
#include <tinfer/kernels/isa.hpp>

#include <tinfer/core/simd_intrinsics.hpp>

namespace tinfer::kernels {

// Sizes of a panel for weights W.
template <DType W>
struct Int8PanelFormat {
    static_assert(has_int8_dot(W), "Int8PanelFormat: weights must have an int8 dot product");
    static constexpr bool q6_k = W == DType::q6_k;
    static constexpr std::size_t values_bytes = 8 * 64;
    static constexpr std::size_t scale_offset = values_bytes;
    static constexpr std::size_t factors_offset = scale_offset + 64;  // offset, or c_0 and c_1
    static constexpr std::size_t block_bytes = factors_offset + (q6_k ? 128 : 64);
    static constexpr std::size_t bytes(int cols) {
        return static_cast<std::size_t>(cols / int8_block_elements) * block_bytes;
    }
};

// Bytes of the largest panel of `cols` columns (Q6_K's), and of the Q6_K chunk sums
// (int8_panel_sums) of `tokens` tokens.
constexpr std::size_t int8_panel_bytes(int cols) {
    return Int8PanelFormat<DType::q6_k>::bytes(cols);
}
constexpr std::size_t int8_panel_sums_bytes(int cols, int tokens) {
    return static_cast<std::size_t>(tokens) * static_cast<std::size_t>(cols / 16) * sizeof(int);
}

// Blocks a panel's columns are multiplied in: 512 columns, 10-11 KiB of panel, so that a slice
// of two panels (a gated pair) and the token tile's activations stay in a 48 KiB L1 while every
// tile of the chunk sweeps it (whole 2048-column panels, 40 KiB, measured 0.65x the rate of
// 512-column ones in bench/int8_linear_bench). A slice's sums carry to the next through
// `partial` unchanged, so each output sees the same operations in the same order.
inline constexpr int int8_panel_slice_blocks = 16;

// Floats of `partial` that int8_panel_products needs for `panels` panels and `tokens` tokens.
constexpr std::size_t int8_panel_partial_floats(int panels, int tokens) {
    return static_cast<std::size_t>(panels) * static_cast<std::size_t>(tokens) * int8_strip_rows;
}

// Q6_K's offset terms for a chunk of tokens: sums[t * (cols / 16) + s] = -32 x (sum of the 16
// int8 activations of sub-block s of token t), what the strip kernel recomputes per strip.
inline void int8_panel_sums(Int8Rows x, int cols, int first, int last, int* sums) {
    int const per_token = cols / 16;
    for (int t = first; t < last; ++t) {
        std::int8_t const* q = x.row(t, cols).q;
        int* out = sums + static_cast<std::size_t>(t - first) * per_token;
        for (int b = 0; b < cols / int8_block_elements; ++b) {
            int pair[2];
#if TINFER_X86_TARGETS
            detail::sums_of_16_sse(q + b * int8_block_elements, pair);
#else
            detail::sums_of_16_portable(q + b * int8_block_elements, pair);
#endif
            out[2 * b] = -32 * pair[0];
            out[2 * b + 1] = -32 * pair[1];
        }
    }
}

#if TINFER_X86_TARGETS
namespace detail {
TINFER_BEGIN_TARGET_AVX512

inline void store_512(std::byte* p, __m512i v) {
    _mm512_storeu_si512(p, v);
}
inline void store_512(std::byte* p, __m512 v) {
    _mm512_storeu_ps(reinterpret_cast<float*>(p), v);
}
// -v, exactly (the sign bit flipped; 0 - v would turn -0 into +0).
inline __m512 negate_512(__m512 v) {
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32(static_cast<int>(0x80000000u))));
}

// The panel of a strip of `cols` columns: each block's values unpacked as the strip kernels
// unpack them (kernels/int8_dot.hpp), stored instead of multiplied.
template <DType W>
void decode_int8_panel_avx512(std::byte const* strip, int cols, std::byte* panel) {
    using Format = Int8StripFormat<W>;
    using Panel = Int8PanelFormat<W>;
    __m512i const nibble = _mm512_set1_epi8(0x0f);
    __m512i const fifth = _mm512_set1_epi8(0x10);
    if constexpr (W == DType::q4_k || W == DType::q5_k) {
        for (int sb = 0; sb < cols / Format::block_elements; ++sb) {
            std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
            __m512 const d = load_halves_512(p + Format::scales_offset);
            __m512 const dmin =
                load_halves_512(p + Format::scales_offset + Format::scale_array_bytes);
            __m512i const packed[3] = {load_512(p + Format::scale_register_offset),
                                       load_512(p + Format::scale_register_offset + 64),
                                       load_512(p + Format::scale_register_offset + 128)};
            for (int pair = 0; pair < 4; ++pair) {
                for (int k = 0; k < 8; ++k) {
                    __m512i const bytes = load_512(p + (8 * pair + k) * Format::register_bytes);
                    __m512i q[2] = {_mm512_and_si512(bytes, nibble),
                                    _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble)};
                    if constexpr (W == DType::q5_k) {
                        __m512i const qh = shift_right_16(
                            load_512(p + Format::high_offset + k * Format::register_bytes),
                            2 * pair);
                        q[0] = _mm512_or_si512(q[0],
                                               _mm512_and_si512(_mm512_slli_epi16(qh, 4), fifth));
                        q[1] = _mm512_or_si512(q[1],
                                               _mm512_and_si512(_mm512_slli_epi16(qh, 3), fifth));
                    }
                    for (int half = 0; half < 2; ++half) {
                        std::size_t const b = static_cast<std::size_t>(sb) * 8 + 2 * pair + half;
                        store_512(panel + b * Panel::block_bytes + k * 64, q[half]);
                    }
                }
                for (int half = 0; half < 2; ++half) {
                    int const j = 2 * pair + half;
                    std::byte* out =
                        panel + (static_cast<std::size_t>(sb) * 8 + j) * Panel::block_bytes;
                    __m512i scale_bits, min_bits;
                    scale_min_lanes(packed, j, scale_bits, min_bits);
                    store_512(out + Panel::scale_offset,
                              _mm512_mul_ps(d, _mm512_cvtepi32_ps(scale_bits)));
                    store_512(out + Panel::factors_offset,
                              negate_512(_mm512_mul_ps(dmin, _mm512_cvtepi32_ps(min_bits))));
                }
            }
        }
    } else if constexpr (W == DType::q6_k) {
        __m512i const top = _mm512_set1_epi8(0x30);
        for (int sb = 0; sb < cols / Format::block_elements; ++sb) {
            std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
            __m512 const d = load_halves_512(p + Format::scales_offset);
            for (int h = 0; h < 2; ++h) {
                for (int m = 0; m < 4; ++m) {
                    std::byte* out =
                        panel + (static_cast<std::size_t>(sb) * 8 + 4 * h + m) * Panel::block_bytes;
                    for (int k = 0; k < 8; ++k) {
                        __m512i const bytes =
                            load_512(p + (16 * h + 8 * (m % 2) + k) * Format::register_bytes);
                        __m512i const qh =
                            shift_right_16(load_512(p + Format::high_offset +
                                                    (8 * h + k) * Format::register_bytes),
                                           2 * m);
                        store_512(out + k * 64,
                                  _mm512_or_si512(
                                      _mm512_and_si512(m < 2 ? bytes : _mm512_srli_epi16(bytes, 4),
                                                       nibble),
                                      _mm512_and_si512(_mm512_slli_epi16(qh, 4), top)));
                    }
                    for (int s = 0; s < 2; ++s) {
                        int const sub = 8 * h + 2 * m + s;
                        __m512i const packed = load_512(p + Format::scale_register_offset +
                                                        (sub / 4) * Format::register_bytes);
                        store_512(
                            out + Panel::factors_offset + 64 * s,
                            _mm512_srai_epi32(
                                _mm512_sll_epi32(packed, _mm_cvtsi32_si128(24 - 8 * (sub % 4))),
                                24));
                    }
                    store_512(out + Panel::scale_offset, d);
                }
            }
        }
    } else {
        constexpr int K = Format::registers;
        for (int b = 0; b < cols / int8_block_elements; ++b) {
            std::byte const* p = strip + static_cast<std::size_t>(b) * Format::block_bytes;
            std::byte* out = panel + static_cast<std::size_t>(b) * Panel::block_bytes;
            for (int k = 0; k < K; ++k) {
                __m512i const bytes = load_512(p + k * Format::register_bytes);
                if constexpr (Format::nibbles) {
                    __m512i low = _mm512_and_si512(bytes, nibble);
                    __m512i high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
                    if constexpr (Format::high_bits) {
                        __m512i const qh = load_512(p + Format::high_offset);
                        low =
                            _mm512_or_si512(low, _mm512_and_si512(shift_left_16(qh, 4 - k), fifth));
                        high =
                            _mm512_or_si512(high, _mm512_and_si512(shift_right_16(qh, k), fifth));
                    }
                    store_512(out + k * 64, low);         // elements 4k ..
                    store_512(out + (4 + k) * 64, high);  // elements 16 + 4k ..
                } else {
                    store_512(out + k * 64, bytes);
                }
            }
            std::byte const* scales = p + Format::scales_offset;
            __m512 const d = load_halves_512(scales);
            store_512(out + Panel::scale_offset, d);
            if constexpr (Format::offset_term)
                store_512(out + Panel::factors_offset,
                          Format::stores_minimum
                              ? load_halves_512(scales + Format::scale_array_bytes)
                              : _mm512_mul_ps(d, _mm512_set1_ps(Format::offset_factor)));
        }
    }
}

// One token's float steps on a block's integer sums `total` (16 rows): the scale products, then
// the offset term. The VNNI panel tile and the AMX one (same integers) both end here, so that
// both give the strip kernels' bits.
template <DType W>
inline __m512 panel_block_float_steps(std::byte const* block, __m512 scale, float x_scale,
                                      float x_sum, __m512i total, __m512 acc) {
    using Panel = Int8PanelFormat<W>;
    __m512 const token_scale = _mm512_mul_ps(scale, _mm512_set1_ps(x_scale));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), token_scale, acc);
    if constexpr (Int8StripFormat<W>::offset_term)
        acc = _mm512_fmadd_ps(
            _mm512_loadu_ps(reinterpret_cast<float const*>(block + Panel::factors_offset)),
            _mm512_set1_ps(x_sum), acc);
    return acc;
}

// Blocks [b0, b1) of the panel times x[t], added to `in` (T x 16 floats, token-major; null:
// from zero) and written to `out` (the same shape; may be `in`). q6_sums[t]: token t's
// int8_panel_sums row (Q6_K only). Two chains of integer sums per token and block, so that a
// block's 8 dependent vpdpbusd do not wait on one another's latency.
template <DType W, int T>
void int8_panel_tile_avx512(std::byte const* panel, int b0, int b1, Int8Row const (&x)[T],
                            int const* const (&q6_sums)[T], float const* in, float* out) {
    using Panel = Int8PanelFormat<W>;
    __m512 acc[T];
    for (int t = 0; t < T; ++t)
        acc[t] = in ? _mm512_loadu_ps(in + int8_strip_rows * t) : _mm512_setzero_ps();
    for (int b = b0; b < b1; ++b) {
        std::byte const* p = panel + static_cast<std::size_t>(b) * Panel::block_bytes;
        __m512i w[8];
        for (int k = 0; k < 8; ++k) w[k] = load_512(p + k * 64);
        __m512 const scale =
            _mm512_loadu_ps(reinterpret_cast<float const*>(p + Panel::scale_offset));
        for (int t = 0; t < T; ++t) {
            std::int8_t const* xq = x[t].q + b * int8_block_elements;
            if constexpr (Panel::q6_k) {
                __m512 const token_scale = _mm512_mul_ps(scale, _mm512_set1_ps(x[t].scale[b]));
                __m512i s0 = _mm512_set1_epi32(q6_sums[t][2 * b]);
                __m512i s1 = _mm512_set1_epi32(q6_sums[t][2 * b + 1]);
                for (int k = 0; k < 4; ++k) {
                    s0 = _mm512_dpbusd_epi32(s0, w[k], four_512(xq + 4 * k));
                    s1 = _mm512_dpbusd_epi32(s1, w[4 + k], four_512(xq + 16 + 4 * k));
                }
                __m512i const total = _mm512_add_epi32(
                    _mm512_mullo_epi32(s0, load_512(p + Panel::factors_offset)),
                    _mm512_mullo_epi32(s1, load_512(p + Panel::factors_offset + 64)));
                acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), token_scale, acc[t]);
            } else {
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
                if constexpr (!Int8StripFormat<W>::nibbles) s0 = q8_unshift_512(xq);
                for (int k = 0; k < 8; k += 2) {
                    s0 = _mm512_dpbusd_epi32(s0, w[k], four_512(xq + 4 * k));
                    s1 = _mm512_dpbusd_epi32(s1, w[k + 1], four_512(xq + 4 * k + 4));
                }
                acc[t] = panel_block_float_steps<W>(p, scale, x[t].scale[b], x[t].sum[b],
                                                    _mm512_add_epi32(s0, s1), acc[t]);
            }
        }
    }
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + int8_strip_rows * t, acc[t]);
}

TINFER_END_TARGET_AVX512

#if TINFER_AMX_TARGETS
// AMX (where amx_int8_ready): 16 tokens at once. Per block, one tdpbsud multiplies the tokens'
// 32 signed activation bytes (tile A: 16 rows, the tokens' rows x.stride apart) by the panel
// block's values (tile B: its 8 registers as they are, which is AMX's layout for K = 32: row k
// holds each weight row's elements 4k .. 4k+3) into C, 16 tokens x 16 rows of int32 sums: the
// same integers as int8_panel_tile_avx512's two vpdpbusd chains (integer sums do not depend on
// their order; Q8_0's -128 sum(x) is added to them). The float steps then run on C's rows in
// that kernel's order, so the outputs are its bits. Not Q6_K, whose two sub-blocks of 16 each
// have their own integer scale.
inline constexpr int amx_tile_tokens = 16;

TINFER_BEGIN_TARGET_AMX
// Tiles 0 and 3: C (16 x 64 bytes), 1 and 4: A (16 x 32), 2 and 5: B (8 x 64). Loaded by
// each int8_panel_products call, since a thread's tile configuration is its own and other code
// may change it.
struct alignas(64) AmxPanelTiles {
    std::uint8_t palette = 1, start_row = 0, reserved[14] = {};
    std::uint16_t bytes_per_row[16] = {64, 32, 64, 64, 32, 64};
    std::uint8_t rows[16] = {16, 16, 8, 16, 16, 8};
};

// The float steps of block b on its C rows `sums` (panel_block_float_steps, as the VNNI tile).
template <DType W>
inline void amx_block_steps(std::byte const* p, int b, Int8Row const (&x)[amx_tile_tokens],
                            std::int32_t const (&sums)[amx_tile_tokens][int8_strip_rows],
                            __m512 (&acc)[amx_tile_tokens]) {
    using Panel = Int8PanelFormat<W>;
    __m512 const scale = _mm512_loadu_ps(reinterpret_cast<float const*>(p + Panel::scale_offset));
#pragma GCC unroll 16
    for (int t = 0; t < amx_tile_tokens; ++t) {
        __m512i total = _mm512_load_si512(sums[t]);
        if constexpr (!Int8StripFormat<W>::nibbles)
            total = _mm512_add_epi32(q8_unshift_512(x[t].q + b * int8_block_elements), total);
        acc[t] = panel_block_float_steps<W>(p, scale, x[t].scale[b], x[t].sum[b], total, acc[t]);
    }
}

// Two blocks per round (C in tiles 0 and 3, A in 1 and 4, B in 2 and 5), so that the second
// block's tile product runs while the first block's float steps do. Every token loop is
// unrolled so that the sixteen accumulators become registers: as an array, GCC 12 kept them on
// the stack (each tile store is an asm that clobbers memory), a load and a store around each of
// their multiply-adds. Alternated repetition by repetition in one process (Xeon guest, pp512):
// SmolLM2 1.09-1.12x the tokens/s at one thread, 1.11x at two; Gemma 3 1.06x and 1.06x.
// Issuing the next block's product before this block's float steps added nothing (0.98-1.00).
template <DType W>
void int8_panel_tile_amx(std::byte const* panel, int b0, int b1, Int8Row const (&x)[16],
                         std::size_t x_stride, float const* in, float* out) {
    using Panel = Int8PanelFormat<W>;
    static_assert(!Panel::q6_k, "int8_panel_tile_amx: Q6_K stays on the VNNI panels");
    constexpr int T = amx_tile_tokens;
    alignas(64) std::int32_t sums[2][T][int8_strip_rows];
    __m512 acc[T];
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t)
        acc[t] = in ? _mm512_loadu_ps(in + int8_strip_rows * t) : _mm512_setzero_ps();
    auto const block = [&](int b) {
        return panel + static_cast<std::size_t>(b) * Panel::block_bytes;
    };
    auto const activations = [&](int b) { return x[0].q + b * int8_block_elements; };
    long const stride = static_cast<long>(x_stride);
    constexpr long sums_stride = int8_strip_rows * sizeof(std::int32_t);
    int b = b0;
    for (; b + 2 <= b1; b += 2) {
        _tile_zero(0);
        _tile_zero(3);
        _tile_loadd(1, activations(b), stride);
        _tile_loadd(2, block(b), 64);
        _tile_loadd(4, activations(b + 1), stride);
        _tile_loadd(5, block(b + 1), 64);
        _tile_dpbsud(0, 1, 2);
        _tile_dpbsud(3, 4, 5);
        _tile_stored(0, sums[0], sums_stride);
        amx_block_steps<W>(block(b), b, x, sums[0], acc);
        _tile_stored(3, sums[1], sums_stride);
        amx_block_steps<W>(block(b + 1), b + 1, x, sums[1], acc);
    }
    if (b < b1) {
        _tile_zero(0);
        _tile_loadd(1, activations(b), stride);
        _tile_loadd(2, block(b), 64);
        _tile_dpbsud(0, 1, 2);
        _tile_stored(0, sums[0], sums_stride);
        amx_block_steps<W>(block(b), b, x, sums[0], acc);
    }
#pragma GCC unroll 16
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out + int8_strip_rows * t, acc[t]);
}

inline void load_amx_panel_tiles() {
    static AmxPanelTiles const tiles;
    _tile_loadconfig(&tiles);
}
TINFER_END_TARGET_AMX
#endif
}  // namespace detail

// Decodes strip `strip` of the int8-strip matrix w into `panel` (Int8PanelFormat<W>::bytes).
template <DType W>
void decode_int8_panel(WeightMatrix const& w, int strip, std::byte* panel) {
    std::byte const* p =
        w.data + static_cast<std::size_t>(strip) * Int8StripFormat<W>::strip_bytes(w.cols);
    detail::decode_int8_panel_avx512<W>(p, w.cols, panel);
}

// Panels (one, or a gated pair, of the same strip) times tokens [first, last) of x:
// emit(t0, out) per tile of 4 tokens and one tile of the 1-3 left, out[P][T][16] the products of
// panel P. sums: the chunk's int8_panel_sums from token `first` (Q6_K); partial:
// int8_panel_partial_floats(P, last - first) floats.
template <DType W, int P, class Emit>
void int8_panel_products(std::byte const* const (&panels)[P], int cols, Int8Rows x, int first,
                         int last, int const* sums, float* partial, Emit&& emit) {
    int const blocks = cols / int8_block_elements;
    std::size_t const partial_stride = static_cast<std::size_t>(last - first) * int8_strip_rows;
#if TINFER_AMX_TARGETS
    bool const amx = W != DType::q6_k && amx_int8_ready();
    if (amx) detail::load_amx_panel_tiles();
#endif
    for (int b0 = 0; b0 < blocks; b0 += int8_panel_slice_blocks) {
        int const b1 = std::min(blocks, b0 + int8_panel_slice_blocks);
        bool const first_slice = b0 == 0, last_slice = b1 == blocks;
        auto const tile = [&]<int T>(int t0) {
            Int8Row rows[T];
            int const* token_sums[T];
            for (int t = 0; t < T; ++t) {
                rows[t] = x.row(t0 + t, cols);
                token_sums[t] =
                    sums ? sums + static_cast<std::size_t>(t0 + t - first) * (cols / 16) : nullptr;
            }
            float out[P][T][int8_strip_rows];
            for (int p = 0; p < P; ++p) {
                float* carried = partial + p * partial_stride +
                                 static_cast<std::size_t>(t0 - first) * int8_strip_rows;
                float const* from = first_slice ? nullptr : carried;
                float* to = last_slice ? &out[p][0][0] : carried;
#if TINFER_AMX_TARGETS
                if constexpr (T == detail::amx_tile_tokens)
                    detail::int8_panel_tile_amx<W>(panels[p], b0, b1, rows, x.stride, from, to);
                else
#endif
                    detail::int8_panel_tile_avx512<W, T>(panels[p], b0, b1, rows, token_sums, from,
                                                         to);
            }
            if (last_slice) emit.template operator()<T>(t0, out);
        };
        int start = first;
#if TINFER_AMX_TARGETS
        if constexpr (W != DType::q6_k)
            if (amx)
                for (; start + detail::amx_tile_tokens <= last; start += detail::amx_tile_tokens)
                    tile.template operator()<detail::amx_tile_tokens>(start);
#endif
        for_each_tile<4>(start, last, tile);
    }
}
#endif

}  // namespace tinfer::kernels
