#pragma once
// Integer products of quantized weights with int8 activation rows
// (kernels/int8_activations.hpp), on weights repacked once into 16-row strips.
//
// Every activation block b of 32 elements has a scale e_b and a precomputed e_b sum(x). For a
// weight block with scale d (and, where it has one, minimum m):
//   Q4_1 / Q5_1  w = d q + m:                  w . x = d e sum(q x) + m * e sum(x)
//   Q4_0 / Q5_0  w = d (q - c), c = 8 / 16:    w . x = d e sum(q x) - c d * e sum(x)
//   Q8_0  w = d q (q in -128..127):           w . x = d e sum(q x)
//         Stored as unsigned q + 128 (VNNI multiplies unsigned by signed bytes); VNNI subtracts
//         128 sum(x) from its integer sums, AVX2 multiplies the signed q itself. Integer sums of
//         the signed q, not a float offset term as Q4_0's: one multiply-add fewer per block and
//         token, and on AVX2 no 128 sum(x) to form (a tile of four tokens, Zen 3, one thread:
//         47 -> 57 GMAC/s; batched decode's LM head is such tiles), the same integer everywhere.
// K-quants: super-blocks of 256 elements with an f16 scale d (and dmin).
//   Q4_K / Q5_K  8 sub-blocks of 32 with 6-bit scale s_j and minimum m_j,
//         w = (d s_j) q - (dmin m_j):         w . x = (d s_j) e sum(q x) - (dmin m_j) * e sum(x)
//         A sub-block is exactly an activation block, so this is Q4_1's product with
//         per-sub-block scale and minimum (d s_j and dmin m_j are exact in float: 11 x 6 bits).
//   Q6_K  16 sub-blocks of 16 with int8 scales c_s, w = d c_s (q - 32), q in 0..63. An
//         activation block spans two sub-blocks (one activation scale, two weight scales), so
//         their scales are folded in integers: with S_s = sum(q x) - 32 sum(x) over sub-block s
//         (the 16-element activation sums are summed from the int8 values in the kernel, once
//         per token and block, shared by the 16 rows),
//                                              w . x = d e (c_0 S_0 + c_1 S_1)
//         exact in int32 (|c S| < 2^25). Why not per-16 activation sums in the activation row:
//         every other weight type would pay for them; why not fold c_s into requantized weights
//         at repacking: that changes the weights' values.
// The integer sums are exact; each path then does the same float operations in the same order.
//
// Strip layout. Rows go in strips of 16 (the last padded with zero rows), one row per 32-bit
// lane of a 512-bit register. A strip is its rows' GGUF blocks in order, each block a sequence
// of fields: a byte field of n bytes per row is n/4 registers of 16 rows x 4 bytes (lane r of
// register k = row r's bytes 4k .. 4k+3), an f16 field is 16 values, row r's at index r:
//   Q4_0, Q4_1  qs (4 registers: low nibbles elements 4k.., high nibbles 16+4k..), d, [m]
//   Q5_0, Q5_1  qs (4), qh (1 register, its bits reordered at repacking so that byte i of a
//               lane holds the fifth bits of elements 4k+i in bit k and 16+4k+i in bit 4+k:
//               register k's high bits are then one shift and mask away), d, [m]
//   Q8_0        qs + 128 (8), d
//   Q4_K        qs (32: registers 8p .. 8p+7 hold sub-blocks 2p (low nibbles) and 2p+1
//               (high)), scales (3 registers: the GGUF's 12 packed bytes, unpacked by lane-wise
//               shifts in the kernel), d, dmin
//   Q5_K        Q4_K's fields and qh (8 registers: bit j of byte i of register k is the fifth
//               bit of element 4k+i of sub-block j), d, dmin
//   Q6_K        ql (32), qh (16), scales (4 registers of int8), d
// Every block is exactly its 16 rows' GGUF bytes (decode is memory bound: Q5_0 stays 5.5 bits
// per weight, Q4_K 4.5, Q5_K 5.5, Q6_K 6.5625). vpdpbusd of a quants register with 4 activation
// bytes broadcast to every lane adds 4 products to each row's lane, so a block's 16 row sums come
// out in the lanes its scales were loaded into: no shuffles, no horizontal sums, and each
// activation value is loaded once per 16 rows. Why not the GGUF layout: its row-by-row blocks
// need byte gathers and scale permutes before any product, which made decode compute bound.
//
// Implementations: AVX-512 VNNI, AVX2 (+FMA, F16C), portable, each compiled in its target
// region; Isa::native runs the one chosen at start-up (kernels/isa.hpp). Batch invariance:
// every (row, token) output is one lane receiving the same operations in the same order whatever
// the token tile, the batch or the thread. All three do the same float operations in the same
// order (fused multiply-adds included), so their outputs are bitwise equal, and a process gives
// the same tokens whichever version its CPU runs.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/dtype.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/extent.hpp>
#include <tinfer/core/prefetch.hpp>
#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/isa.hpp>
#include <tinfer/kernels/weight_matrix.hpp>
#include <tinfer/quant/quant_blocks.hpp>

#include <tinfer/core/simd_intrinsics.hpp>

namespace tinfer::kernels {

// Weight encodings with an integer dot product against int8 activations.
constexpr bool has_int8_dot(DType t) {
    return t == DType::q4_0 || t == DType::q4_1 || t == DType::q5_0 || t == DType::q5_1 ||
           t == DType::q8_0 || t == DType::q4_k || t == DType::q5_k || t == DType::q6_k;
}

inline constexpr int int8_strip_rows = 16;  // one 32-bit lane each

// Sizes and field offsets of the strip layout for weights W (one GGUF block of 16 rows).
template <DType W>
struct Int8StripFormat {
    static_assert(
        has_int8_dot(W),
        "Int8StripFormat: weights must be Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K");
    static constexpr bool k_quant = W == DType::q4_k || W == DType::q5_k || W == DType::q6_k;
    static constexpr int block_elements = quant::BlockOfT<W>::elements;  // 32 or 256
    static constexpr bool nibbles = W != DType::q8_0;
    // Legacy formats with a fifth bit (qh), and with a stored minimum.
    static constexpr bool high_bits = W == DType::q5_0 || W == DType::q5_1;
    static constexpr bool stores_minimum = W == DType::q4_1 || W == DType::q5_1;
    static constexpr int lane_bytes = 4;  // quant bytes per row per register
    static constexpr std::size_t register_bytes = int8_strip_rows * lane_bytes;
    static constexpr std::size_t scale_array_bytes = int8_strip_rows * sizeof(std::uint16_t);
    // Registers of the quants (qs / ql), of the high bits (qh), and of the packed sub-block
    // scales, in that order; then the f16 arrays (d, and m or dmin).
    static constexpr int registers = W == DType::q8_0 ? 8 : k_quant ? 32 : 4;
    static constexpr int high_registers = high_bits          ? 1
                                          : W == DType::q5_k ? 8
                                          : W == DType::q6_k ? 16
                                                             : 0;
    static constexpr int scale_registers = W == DType::q6_k ? 4 : k_quant ? 3 : 0;
    static constexpr int scale_arrays =
        stores_minimum || W == DType::q4_k || W == DType::q5_k ? 2 : 1;
    static constexpr std::size_t high_offset = registers * register_bytes;
    static constexpr std::size_t scale_register_offset =
        high_offset + high_registers * register_bytes;
    static constexpr std::size_t scales_offset =
        scale_register_offset + scale_registers * register_bytes;
    static constexpr std::size_t block_bytes = scales_offset + scale_arrays * scale_array_bytes;
    // Whether a legacy block adds an offset term m e sum(x) (all but Q8_0, whose sums are of
    // its signed values), and what Q4_0 and Q5_0 multiply d by for it (Q4_1 and Q5_1 store m).
    static constexpr bool offset_term = W != DType::q8_0;
    static constexpr float offset_factor = W == DType::q4_0 ? -8.0f : -16.0f;
    // The unsigned shift of Q8_0's stored values.
    static constexpr int q8_shift = 128;

    static constexpr std::size_t strip_bytes(int cols) {
        return static_cast<std::size_t>(cols / block_elements) * block_bytes;
    }
    static constexpr int strips(int rows) { return (rows + int8_strip_rows - 1) / int8_strip_rows; }
    static constexpr std::size_t matrix_bytes(int rows, int cols) {
        return static_cast<std::size_t>(strips(rows)) * strip_bytes(cols);
    }
};
template <DType W>
inline constexpr bool strip_bytes_are_file_bytes = Int8StripFormat<W>::block_bytes ==
                                                   int8_strip_rows * sizeof(quant::BlockOfT<W>);
static_assert(strip_bytes_are_file_bytes<DType::q4_0> && strip_bytes_are_file_bytes<DType::q4_1> &&
              strip_bytes_are_file_bytes<DType::q5_0> && strip_bytes_are_file_bytes<DType::q5_1> &&
              strip_bytes_are_file_bytes<DType::q8_0> && strip_bytes_are_file_bytes<DType::q4_k> &&
              strip_bytes_are_file_bytes<DType::q5_k> && strip_bytes_are_file_bytes<DType::q6_k>);

// Calls body.template operator()<W>() for the int8-capable encoding `type` (tinfer::Error for
// any other, listing these).
template <class Body>
decltype(auto) dispatch_int8_weight_type(DType type, Body&& body) {
    return dispatch<DType::q4_0, DType::q4_1, DType::q8_0, DType::q5_0, DType::q5_1, DType::q4_k,
                    DType::q5_k, DType::q6_k>(
        type, std::forward<Body>(body), [](DType a, DType b) { return a == b; },
        "int8 strip weight dtype");
}

// Bytes repack_int8_strips writes for a matrix of encoding `type`.
inline std::size_t int8_strip_matrix_bytes(DType type, int rows, int cols) {
    return dispatch_int8_weight_type(
        type, [&]<DType W>() { return Int8StripFormat<W>::matrix_bytes(rows, cols); });
}

namespace detail {

// Row r's share of one strip block `p` from its GGUF block.
template <DType W>
void repack_int8_block_row(quant::BlockOfT<W> const& block, std::byte* p, int r) {
    using Format = Int8StripFormat<W>;
    auto const put_registers = [&](std::size_t offset, std::uint8_t const* bytes, int registers,
                                   std::uint8_t flip = 0) {
        for (int k = 0; k < registers; ++k) {
            std::byte* lane = p + offset + k * Format::register_bytes + r * Format::lane_bytes;
            for (int i = 0; i < Format::lane_bytes; ++i)
                lane[i] = std::byte(bytes[k * Format::lane_bytes + i] ^ flip);
        }
    };
    auto const put_scale = [&](int array, std::uint16_t bits) {
        std::memcpy(p + Format::scales_offset + array * Format::scale_array_bytes + 2 * r, &bits,
                    2);
    };
    if constexpr (W == DType::q8_0) {
        put_registers(0, reinterpret_cast<std::uint8_t const*>(block.qs), Format::registers, 0x80);
    } else if constexpr (W == DType::q6_k) {
        put_registers(0, block.ql, Format::registers);
        put_registers(Format::high_offset, block.qh, Format::high_registers);
        put_registers(Format::scale_register_offset,
                      reinterpret_cast<std::uint8_t const*>(block.scales), Format::scale_registers);
    } else {
        put_registers(0, block.qs, Format::registers);
    }
    if constexpr (Format::high_bits) {
        std::uint32_t const qh = quant::load_u32_le(block.qh);
        std::uint8_t bytes[4] = {};
        for (int i = 0; i < 4; ++i) {
            for (int k = 0; k < 4; ++k) {
                bytes[i] |= static_cast<std::uint8_t>(((qh >> (4 * k + i)) & 1u) << k);
                bytes[i] |= static_cast<std::uint8_t>(((qh >> (16 + 4 * k + i)) & 1u) << (4 + k));
            }
        }
        put_registers(Format::high_offset, bytes, 1);
    }
    if constexpr (W == DType::q4_k || W == DType::q5_k) {
        if constexpr (W == DType::q5_k) put_registers(Format::high_offset, block.qh, 8);
        put_registers(Format::scale_register_offset, block.scales, Format::scale_registers);
        put_scale(0, block.d);
        put_scale(1, block.dmin);
    } else {
        put_scale(0, block.d);
        if constexpr (Format::stores_minimum) put_scale(1, block.m);
    }
}

}  // namespace detail

// Writes the strip layout of `w` (GGUF layout) to `out` (int8_strip_matrix_bytes bytes) and
// returns the matrix viewing it.
template <DType W>
WeightMatrix repack_int8_strips(WeightMatrix const& w, std::byte* out) {
    check_weight_matrix<W>(w, "int8 strips");
    if (w.layout != WeightLayout::gguf) throw Error("int8 strips: the matrix is already repacked");
    using Format = Int8StripFormat<W>;
    using Block = quant::BlockOfT<W>;
    int const blocks = w.cols / Format::block_elements;
    for (int strip = 0; strip < Format::strips(w.rows); ++strip) {
        std::byte* p = out + static_cast<std::size_t>(strip) * Format::strip_bytes(w.cols);
        for (int b = 0; b < blocks; ++b, p += Format::block_bytes) {
            std::memset(p, 0, Format::block_bytes);  // padding rows: zero quants and scales
            for (int r = 0; r < int8_strip_rows; ++r) {
                int const row = strip * int8_strip_rows + r;
                if (row >= w.rows) break;
                Block const& block = reinterpret_cast<Block const*>(row_pointer<W>(w, row))[b];
                detail::repack_int8_block_row<W>(block, p, r);
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

// Byte i of row r's lane in register k of the field at `field`.
inline std::uint8_t strip_byte(std::byte const* field, int k, int r, int i) {
    return static_cast<std::uint8_t>(field[k * 64 + r * 4 + i]);
}

// The sums of elements 0..15 and 16..31 of an activation block (Q6_K's offset terms).
inline void sums_of_16_portable(std::int8_t const* xq, int (&sums)[2]) {
    for (int h = 0; h < 2; ++h) {
        sums[h] = 0;
        for (int i = 0; i < 16; ++i) sums[h] += xq[16 * h + i];
    }
}

#if TINFER_X86_TARGETS
// The same with psadbw on the bytes shifted to unsigned (each 8-byte sum then 1024 too high).
inline void sums_of_16_sse(std::int8_t const* xq, int (&sums)[2]) {
    __m128i const shift = _mm_set1_epi8(static_cast<char>(0x80));
    for (int h = 0; h < 2; ++h) {
        __m128i const v =
            _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<__m128i const*>(xq + 16 * h)), shift);
        __m128i const s = _mm_sad_epu8(v, _mm_setzero_si128());
        sums[h] = _mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 2048;
    }
}
#endif

// Portable: the vector version's float operations, lane by lane.
template <DType W, int T>
void int8_strip_tile_portable(std::byte const* strip, Extent auto cols, Int8Row const (&x)[T],
                              float (&out)[T][int8_strip_rows]) {
    using Format = Int8StripFormat<W>;
    constexpr int R = int8_strip_rows, lane = Format::lane_bytes;
    float acc[T][R] = {};
    int const blocks = cols / int8_block_elements;
    for (int b = 0; b < blocks; ++b) {
        std::byte const* p = strip + static_cast<std::size_t>(b) * Format::block_bytes;
        auto const* quants = reinterpret_cast<std::uint8_t const*>(p);
        std::byte const* scales = p + Format::scales_offset;
        for (int t = 0; t < T; ++t) {
            std::int8_t const* xq = x[t].q + b * int8_block_elements;
            for (int r = 0; r < R; ++r) {
                int sum = 0;
                for (int k = 0; k < Format::registers; ++k) {
                    std::uint8_t const* bytes = quants + k * Format::register_bytes + r * lane;
                    for (int i = 0; i < lane; ++i) {
                        if constexpr (Format::nibbles) {
                            int low = bytes[i] & 0x0f, high = bytes[i] >> 4;
                            if constexpr (Format::high_bits) {
                                std::uint8_t const fifth =
                                    strip_byte(p + Format::high_offset, 0, r, i);
                                low |= ((fifth >> k) & 1) << 4;
                                high |= ((fifth >> (4 + k)) & 1) << 4;
                            }
                            sum += low * xq[k * lane + i] + high * xq[16 + k * lane + i];
                        } else {
                            sum += (bytes[i] - Format::q8_shift) * xq[k * lane + i];
                        }
                    }
                }
                float const d = strip_scale(scales, r);
                acc[t][r] = std::fma(static_cast<float>(sum), d * x[t].scale[b], acc[t][r]);
                if constexpr (Format::offset_term) {
                    float const m = Format::stores_minimum
                                        ? strip_scale(scales + Format::scale_array_bytes, r)
                                        : d * Format::offset_factor;
                    acc[t][r] = std::fma(m, x[t].sum[b], acc[t][r]);
                }
            }
        }
    }
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) out[t][r] = acc[t][r];
}

// Q4_K / Q5_K, portable: sub-block j of a super-block is activation block 8 sb + j.
template <DType W, int T>
void int8_strip_tile_k_minimum_portable(std::byte const* strip, Extent auto cols,
                                        Int8Row const (&x)[T], float (&out)[T][int8_strip_rows]) {
    using Format = Int8StripFormat<W>;
    constexpr int R = int8_strip_rows;
    float acc[T][R] = {};
    int const supers = cols / Format::block_elements;
    for (int sb = 0; sb < supers; ++sb) {
        std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
        float d[R], dmin[R];
        std::uint8_t packed[R][12];
        for (int r = 0; r < R; ++r) {
            d[r] = strip_scale(p + Format::scales_offset, r);
            dmin[r] = strip_scale(p + Format::scales_offset + Format::scale_array_bytes, r);
            for (int i = 0; i < 12; ++i)
                packed[r][i] = strip_byte(p + Format::scale_register_offset, i / 4, r, i % 4);
        }
        for (int j = 0; j < 8; ++j) {
            int const b = sb * 8 + j, pair = j / 2, shift = 4 * (j % 2);
            for (int r = 0; r < R; ++r) {
                quant::ScaleMin const sm = quant::scale_min_k4(j, packed[r]);
                float const scale = d[r] * static_cast<float>(sm.scale);
                float const minimum = dmin[r] * static_cast<float>(sm.min);
                for (int t = 0; t < T; ++t) {
                    std::int8_t const* xq = x[t].q + b * int8_block_elements;
                    int sum = 0;
                    for (int l = 0; l < 32; ++l) {
                        int q = (strip_byte(p, 8 * pair + l / 4, r, l % 4) >> shift) & 0x0f;
                        if constexpr (W == DType::q5_k)
                            q |= ((strip_byte(p + Format::high_offset, l / 4, r, l % 4) >> j) & 1)
                                 << 4;
                        sum += q * xq[l];
                    }
                    acc[t][r] = std::fma(static_cast<float>(sum), scale * x[t].scale[b], acc[t][r]);
                    acc[t][r] = std::fma(-minimum, x[t].sum[b], acc[t][r]);
                }
            }
        }
    }
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) out[t][r] = acc[t][r];
}

// Q6_K, portable: activation block 8 sb + 4 h + m is elements 32 m .. 32 m + 31 of half h of
// super-block sb (ql register 16 h + 8 (m % 2) + k, nibble m / 2; qh register 8 h + k, bits
// 2m, 2m+1), its sub-blocks 8 h + 2 m and 8 h + 2 m + 1.
template <int T>
void int8_strip_tile_q6_k_portable(std::byte const* strip, Extent auto cols, Int8Row const (&x)[T],
                                   float (&out)[T][int8_strip_rows]) {
    using Format = Int8StripFormat<DType::q6_k>;
    constexpr int R = int8_strip_rows;
    float acc[T][R] = {};
    int const supers = cols / Format::block_elements;
    for (int sb = 0; sb < supers; ++sb) {
        std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
        for (int h = 0; h < 2; ++h) {
            for (int m = 0; m < 4; ++m) {
                int const b = sb * 8 + 4 * h + m;
                for (int t = 0; t < T; ++t) {
                    std::int8_t const* xq = x[t].q + b * int8_block_elements;
                    int x_sums[2];
                    sums_of_16_portable(xq, x_sums);
                    for (int r = 0; r < R; ++r) {
                        int total = 0;
                        for (int s = 0; s < 2; ++s) {
                            int sum = -32 * x_sums[s];
                            for (int l = 16 * s; l < 16 * s + 16; ++l) {
                                int const low =
                                    (strip_byte(p, 16 * h + 8 * (m % 2) + l / 4, r, l % 4) >>
                                     (4 * (m / 2))) &
                                    0x0f;
                                int const high =
                                    (strip_byte(p + Format::high_offset, 8 * h + l / 4, r, l % 4) >>
                                     (2 * m)) &
                                    3;
                                sum += (low | high << 4) * xq[l];
                            }
                            int const sub = 8 * h + 2 * m + s;
                            auto const c = static_cast<std::int8_t>(
                                strip_byte(p + Format::scale_register_offset, sub / 4, r, sub % 4));
                            total += c * sum;
                        }
                        float const d = strip_scale(p + Format::scales_offset, r);
                        acc[t][r] =
                            std::fma(static_cast<float>(total), d * x[t].scale[b], acc[t][r]);
                    }
                }
            }
        }
    }
    for (int t = 0; t < T; ++t)
        for (int r = 0; r < R; ++r) out[t][r] = acc[t][r];
}

#if TINFER_X86_TARGETS
// A tile that streams its strip from memory (decode, the first tile over a strip in a chunk of
// tokens: `streamed`) asks for each block avx512_decode_prefetch_bytes ahead as it starts (the
// next strips follow in memory), every format. Decode's reads come from memory, or from a
// last-level cache far from the core (a Xeon guest whose 480 MiB L3 holds the whole model), and
// need more lines in flight than the hardware prefetchers ask for. Decode steps alternated
// token by token in one run (llama_bench, 3-4 runs of 128 steps, that Xeon), one and two
// threads: one token, against the earlier scheme below, 0.84-0.87x the time on SmolLM2 (Q4_1
// layers, Q8_0 LM head), 0.88x / 0.80x on Gemma 3 (Q5_0, Q8_0, Q4_K, Q6_K); Q4_1's blocks alone
// 1, 2, 4 and 16 KiB ahead gave 0.94, 0.90, 0.88 and 0.86x on SmolLM2 at one thread. Batches,
// against no prefetch: 4 sequences 0.64x / 0.80x (SmolLM2) and 0.78x / 0.75x (Gemma 3), 8 sequences
// 0.75x / 0.87x and 0.91x, 16 sequences 0.86x and 0.95x. A tile that finds the strip in cache
// skips it (from cache a prefetch per block cost Q8_0 61 -> 41 GB/s on a Zen 4). Before, Q8_0,
// Q5_K and Q6_K decode asked for the rest of the current block (Zen 4, one token over 192 MiB:
// Q6_K 7.5 -> 22.8 GB/s, Q5_K 7.7 -> 14.6, Q8_0 20 -> 26; the others no faster), not yet
// measured against this on the Zen 4. Pinned ahead of the block's loads: with the order left
// to GCC 12 it issued the first loads before them and Q8_0 streamed 10% slower on the Zen 4;
// Q5_K's are left free, which streamed 15.2 -> 18.3 GB/s there, by how GCC then lays out that
// kernel's loads. Measure again when a kernel changes.
inline constexpr std::size_t avx512_decode_prefetch_bytes = 8192;
template <DType W>
inline void prefetch_streamed_block(std::byte const* block, bool streamed) {
    if (streamed)
        prefetch_bytes<W == DType::q5_k ? PrefetchOrder::free : PrefetchOrder::pinned>(
            block + avx512_decode_prefetch_bytes, Int8StripFormat<W>::block_bytes);
}

TINFER_BEGIN_TARGET_AVX512

inline __m512i shift_left_16(__m512i v, int n) {
    return _mm512_sll_epi16(v, _mm_cvtsi32_si128(n));
}
inline __m512i shift_right_16(__m512i v, int n) {
    return _mm512_srl_epi16(v, _mm_cvtsi32_si128(n));
}
inline __m512i shift_right_32(__m512i v, int n) {
    return _mm512_srl_epi32(v, _mm_cvtsi32_si128(n));
}
// Sub-block j's 6-bit scale and minimum in every row's lane, from the three registers of the
// GGUF's packed bytes (quant::scale_min_k4, lane-wise). One per region: a function that takes
// vectors must be compiled for them.
inline void scale_min_lanes(__m512i const (&packed)[3], int j, __m512i& scale, __m512i& minimum) {
    __m512i const low6 = _mm512_set1_epi32(63), low4 = _mm512_set1_epi32(0x0f),
                  high2 = _mm512_set1_epi32(0x30);
    if (j < 4) {
        scale = _mm512_and_si512(shift_right_32(packed[0], 8 * j), low6);
        minimum = _mm512_and_si512(shift_right_32(packed[1], 8 * j), low6);
    } else {
        int const q = 8 * (j - 4);
        scale = _mm512_or_si512(_mm512_and_si512(shift_right_32(packed[2], q), low4),
                                _mm512_and_si512(shift_right_32(packed[0], q + 2), high2));
        minimum = _mm512_or_si512(_mm512_and_si512(shift_right_32(packed[2], q + 4), low4),
                                  _mm512_and_si512(shift_right_32(packed[1], q + 2), high2));
    }
}

inline __m512i load_512(std::byte const* p) {
    return _mm512_loadu_si512(p);
}
inline __m512 load_halves_512(std::byte const* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<__m256i const*>(p)));
}
// Activation bytes i .. i+3 in every lane.
inline __m512i four_512(std::int8_t const* xq) {
    std::int32_t v;
    std::memcpy(&v, xq, 4);
    return _mm512_set1_epi32(v);
}

// Q8_0 on VNNI: -128 sum(x) of an activation block in every lane, where its products with the
// stored q + 128 start, so that they end as the signed q's.
inline __m512i q8_unshift_512(std::int8_t const* xq) {
    int halves[2];
    sums_of_16_sse(xq, halves);
    return _mm512_set1_epi32(-Int8StripFormat<DType::q8_0>::q8_shift * (halves[0] + halves[1]));
}

template <DType W, int T>
void int8_strip_tile_avx512(std::byte const* strip, Extent auto cols, Int8Row const (&x)[T],
                            float (&out)[T][int8_strip_rows], bool streamed) {
    using Format = Int8StripFormat<W>;
    constexpr int K = Format::registers;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    __m512i const nibble = _mm512_set1_epi8(0x0f);
    __m512i const fifth = _mm512_set1_epi8(0x10);
    int const blocks = cols / int8_block_elements;
    for (int b = 0; b < blocks; ++b) {
        std::byte const* p = strip + static_cast<std::size_t>(b) * Format::block_bytes;
        prefetch_streamed_block<W>(p, streamed);
        // Q4/Q5: low[k] pairs with elements 4k.., high[k] with 16 + 4k..; Q8: low[k] with 4k...
        __m512i low[K], high[Format::nibbles ? K : 1];
        for (int k = 0; k < K; ++k) {
            __m512i const bytes = load_512(p + k * Format::register_bytes);
            if constexpr (Format::nibbles) {
                low[k] = _mm512_and_si512(bytes, nibble);
                high[k] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
                if constexpr (Format::high_bits) {
                    __m512i const qh = load_512(p + Format::high_offset);
                    low[k] =
                        _mm512_or_si512(low[k], _mm512_and_si512(shift_left_16(qh, 4 - k), fifth));
                    high[k] =
                        _mm512_or_si512(high[k], _mm512_and_si512(shift_right_16(qh, k), fifth));
                }
            } else {
                low[k] = bytes;
            }
        }
        std::byte const* scales = p + Format::scales_offset;
        __m512 const d = load_halves_512(scales);
        __m512 m = _mm512_setzero_ps();
        if constexpr (Format::stores_minimum) {
            m = load_halves_512(scales + Format::scale_array_bytes);
        } else if constexpr (Format::offset_term) {
            m = _mm512_mul_ps(d, _mm512_set1_ps(Format::offset_factor));
        }
        for (int t = 0; t < T; ++t) {
            std::int8_t const* xq = x[t].q + b * int8_block_elements;
            __m512i sums = _mm512_setzero_si512();
            if constexpr (!Format::nibbles) sums = q8_unshift_512(xq);
            for (int k = 0; k < K; ++k) {
                sums = _mm512_dpbusd_epi32(sums, low[k], four_512(xq + Format::lane_bytes * k));
                if constexpr (Format::nibbles)
                    sums = _mm512_dpbusd_epi32(sums, high[k],
                                               four_512(xq + 16 + Format::lane_bytes * k));
            }
            __m512 const scale = _mm512_mul_ps(d, _mm512_set1_ps(x[t].scale[b]));
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), scale, acc[t]);
            if constexpr (Format::offset_term)
                acc[t] = _mm512_fmadd_ps(m, _mm512_set1_ps(x[t].sum[b]), acc[t]);
        }
    }
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

template <DType W, int T>
void int8_strip_tile_k_minimum_avx512(std::byte const* strip, Extent auto cols,
                                      Int8Row const (&x)[T], float (&out)[T][int8_strip_rows],
                                      bool streamed) {
    using Format = Int8StripFormat<W>;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    __m512i const nibble = _mm512_set1_epi8(0x0f);
    __m512i const fifth = _mm512_set1_epi8(0x10);
    int const supers = cols / Format::block_elements;
    for (int sb = 0; sb < supers; ++sb) {
        std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
        prefetch_streamed_block<W>(p, streamed);
        __m512 const d = load_halves_512(p + Format::scales_offset);
        __m512 const dmin = load_halves_512(p + Format::scales_offset + Format::scale_array_bytes);
        __m512i const packed[3] = {load_512(p + Format::scale_register_offset),
                                   load_512(p + Format::scale_register_offset + 64),
                                   load_512(p + Format::scale_register_offset + 128)};
        for (int pair = 0; pair < 4; ++pair) {
            __m512i q[2][8];  // sub-blocks 2 pair (low nibbles) and 2 pair + 1 (high)
            for (int k = 0; k < 8; ++k) {
                __m512i const bytes = load_512(p + (8 * pair + k) * Format::register_bytes);
                q[0][k] = _mm512_and_si512(bytes, nibble);
                q[1][k] = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
                if constexpr (W == DType::q5_k) {
                    __m512i const qh = shift_right_16(
                        load_512(p + Format::high_offset + k * Format::register_bytes), 2 * pair);
                    q[0][k] =
                        _mm512_or_si512(q[0][k], _mm512_and_si512(_mm512_slli_epi16(qh, 4), fifth));
                    q[1][k] =
                        _mm512_or_si512(q[1][k], _mm512_and_si512(_mm512_slli_epi16(qh, 3), fifth));
                }
            }
            for (int half = 0; half < 2; ++half) {
                int const j = 2 * pair + half, b = sb * 8 + j;
                __m512i scale_bits, min_bits;
                scale_min_lanes(packed, j, scale_bits, min_bits);
                __m512 const scale = _mm512_mul_ps(d, _mm512_cvtepi32_ps(scale_bits));
                __m512 const minimum = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(min_bits));
                for (int t = 0; t < T; ++t) {
                    std::int8_t const* xq = x[t].q + b * int8_block_elements;
                    __m512i sums = _mm512_setzero_si512();
                    for (int k = 0; k < 8; ++k)
                        sums = _mm512_dpbusd_epi32(sums, q[half][k], four_512(xq + 4 * k));
                    __m512 const s = _mm512_mul_ps(scale, _mm512_set1_ps(x[t].scale[b]));
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), s, acc[t]);
                    acc[t] = _mm512_fnmadd_ps(minimum, _mm512_set1_ps(x[t].sum[b]), acc[t]);
                }
            }
        }
    }
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

template <int T>
void int8_strip_tile_q6_k_avx512(std::byte const* strip, Extent auto cols, Int8Row const (&x)[T],
                                 float (&out)[T][int8_strip_rows], bool streamed) {
    using Format = Int8StripFormat<DType::q6_k>;
    __m512 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
    __m512i const nibble = _mm512_set1_epi8(0x0f);
    __m512i const top = _mm512_set1_epi8(0x30);
    int const supers = cols / Format::block_elements;
    for (int sb = 0; sb < supers; ++sb) {
        std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
        prefetch_streamed_block<DType::q6_k>(p, streamed);
        __m512 const d = load_halves_512(p + Format::scales_offset);
        for (int h = 0; h < 2; ++h) {
            for (int m = 0; m < 4; ++m) {
                int const b = sb * 8 + 4 * h + m;
                __m512i q[8];
                for (int k = 0; k < 8; ++k) {
                    __m512i const bytes =
                        load_512(p + (16 * h + 8 * (m % 2) + k) * Format::register_bytes);
                    __m512i const qh = shift_right_16(
                        load_512(p + Format::high_offset + (8 * h + k) * Format::register_bytes),
                        2 * m);
                    q[k] = _mm512_or_si512(
                        _mm512_and_si512(m < 2 ? bytes : _mm512_srli_epi16(bytes, 4), nibble),
                        _mm512_and_si512(_mm512_slli_epi16(qh, 4), top));
                }
                __m512i c[2];  // the two sub-blocks' int8 scales, sign-extended
                for (int s = 0; s < 2; ++s) {
                    int const sub = 8 * h + 2 * m + s;
                    __m512i const packed = load_512(p + Format::scale_register_offset +
                                                    (sub / 4) * Format::register_bytes);
                    c[s] = _mm512_srai_epi32(
                        _mm512_sll_epi32(packed, _mm_cvtsi32_si128(24 - 8 * (sub % 4))), 24);
                }
                for (int t = 0; t < T; ++t) {
                    std::int8_t const* xq = x[t].q + b * int8_block_elements;
                    int x_sums[2];
                    sums_of_16_sse(xq, x_sums);
                    __m512i total = _mm512_setzero_si512();
                    for (int s = 0; s < 2; ++s) {
                        __m512i sum = _mm512_set1_epi32(-32 * x_sums[s]);
                        for (int k = 4 * s; k < 4 * s + 4; ++k)
                            sum = _mm512_dpbusd_epi32(sum, q[k], four_512(xq + 4 * k));
                        total = _mm512_add_epi32(total, _mm512_mullo_epi32(sum, c[s]));
                    }
                    __m512 const scale = _mm512_mul_ps(d, _mm512_set1_ps(x[t].scale[b]));
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), scale, acc[t]);
                }
            }
        }
    }
    for (int t = 0; t < T; ++t) _mm512_storeu_ps(out[t], acc[t]);
}

TINFER_END_TARGET_AVX512
#endif

#if TINFER_X86_TARGETS
TINFER_BEGIN_TARGET_AVX2

inline __m256i shift_left_16(__m256i v, int n) {
    return _mm256_sll_epi16(v, _mm_cvtsi32_si128(n));
}
inline __m256i shift_right_16(__m256i v, int n) {
    return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n));
}
inline __m256i shift_right_32(__m256i v, int n) {
    return _mm256_srl_epi32(v, _mm_cvtsi32_si128(n));
}
// scale_min_lanes of the AVX-512 region, on 8 lanes.
inline void scale_min_lanes(__m256i const (&packed)[3], int j, __m256i& scale, __m256i& minimum) {
    __m256i const low6 = _mm256_set1_epi32(63), low4 = _mm256_set1_epi32(0x0f),
                  high2 = _mm256_set1_epi32(0x30);
    if (j < 4) {
        scale = _mm256_and_si256(shift_right_32(packed[0], 8 * j), low6);
        minimum = _mm256_and_si256(shift_right_32(packed[1], 8 * j), low6);
    } else {
        int const q = 8 * (j - 4);
        scale = _mm256_or_si256(_mm256_and_si256(shift_right_32(packed[2], q), low4),
                                _mm256_and_si256(shift_right_32(packed[0], q + 2), high2));
        minimum = _mm256_or_si256(_mm256_and_si256(shift_right_32(packed[2], q + 4), low4),
                                  _mm256_and_si256(shift_right_32(packed[1], q + 2), high2));
    }
}

inline __m256i load_256(std::byte const* p) {
    return _mm256_loadu_si256(reinterpret_cast<__m256i const*>(p));
}
inline __m256 load_halves_256(std::byte const* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<__m128i const*>(p)));
}
// Keeps a running sum a chain. GCC 12's reassociation rebuilt a row's sums of vpmaddubsw
// products (integer adds, so any order is the same integer) as a tree over all its terms:
// every product first, spilled, then the adds (the one-token Q4_K row: 93 stack accesses per
// super-block). An empty asm that may change the sum pins each add where the source has it.
inline void keep_chain(__m256i& sum) {
    asm("" : "+x"(sum));
}
// p, as a value the optimizer cannot prove equal to p: loads through it are made again
// rather than shared with earlier loads through p (and held in registers or spilled).
template <class T>
inline T const* read_again(T const* p) {
    asm("" : "+r"(p));
    return p;
}
inline __m256i four_256(std::int8_t const* xq) {
    std::int32_t v;
    std::memcpy(&v, xq, 4);
    return _mm256_set1_epi32(v);
}
// A legacy block's fifth-bit register (qh) for half h, zero for the formats without one (at
// high_offset they keep their scales, and for Q4_0's second half the block has ended).
template <class Format>
inline __m256i legacy_high_bits_256(std::byte const* block, int h) {
    if constexpr (Format::high_bits) return load_256(block + Format::high_offset + 32 * h);
    return _mm256_setzero_si256();
}
// The 4- or 5-bit values of a legacy format's register k (one half: 8 rows): low pairs with
// elements 4k.., high with 16 + 4k..; qh is the half's fifth-bit register (Q5_0, Q5_1).
template <class Format>
inline void legacy_values_256(__m256i bytes, __m256i qh, int k, __m256i& low, __m256i& high) {
    __m256i const nibble = _mm256_set1_epi8(0x0f), fifth = _mm256_set1_epi8(0x10);
    low = _mm256_and_si256(bytes, nibble);
    high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
    if constexpr (Format::high_bits) {
        low = _mm256_or_si256(low, _mm256_and_si256(shift_left_16(qh, 4 - k), fifth));
        high = _mm256_or_si256(high, _mm256_and_si256(shift_right_16(qh, k), fifth));
    }
}
// The int32 sums of a Q8_0 register's products with 4 activation bytes: w the signed weights
// (stored bytes ^ 0x80), magnitude |w|, the sign moved onto the activations (at most 2 * 128 *
// 127 in a 16-bit lane, widened at once).
inline __m256i q8_products_256(__m256i w, __m256i magnitude, __m256i xs) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude, _mm256_sign_epi8(xs, w)),
                             _mm256_set1_epi16(1));
}
// A legacy nibble block's int32 sums from its 16-bit sums of low- and high-nibble products: 4
// terms each of up to 2 * 31 * 127 with fifth bits, widened separately; without, 8 terms of up
// to 2 * 15 * 127 added in 16 bits and widened once.
template <class Format>
inline __m256i widen_legacy_pairs_256(__m256i low, __m256i high) {
    __m256i const ones = _mm256_set1_epi16(1);
    if constexpr (Format::high_bits) {
        return _mm256_add_epi32(_mm256_madd_epi16(low, ones), _mm256_madd_epi16(high, ones));
    } else {
        return _mm256_madd_epi16(_mm256_add_epi16(low, high), ones);
    }
}
// A legacy block's sums into one half's float sums: d e sum(q x), then m e sum(x) (m the stored
// minimum, or d times the format's offset factor; none for Q8_0).
template <class Format>
inline __m256 add_legacy_block_256(__m256 acc, __m256i sums, std::byte const* scales, int h,
                                   float x_scale, float x_sum) {
    __m256 const d = load_halves_256(scales + 16 * h);
    __m256 const scale = _mm256_mul_ps(d, _mm256_set1_ps(x_scale));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc);
    if constexpr (!Format::offset_term) return acc;
    __m256 m;
    if constexpr (Format::stores_minimum) {
        m = load_halves_256(scales + Format::scale_array_bytes + 16 * h);
    } else {
        m = _mm256_mul_ps(d, _mm256_set1_ps(Format::offset_factor));
    }
    return _mm256_fmadd_ps(m, _mm256_set1_ps(x_sum), acc);
}

// How far ahead of its reads an AVX2 legacy-format strip kernel (the one-token row, and a tile
// that streams its strip) asks for the strip's bytes (the next strips follow in memory). Measured
// on the one-token row: the hardware prefetchers alone left it at 66-80% of the read bandwidth at
// one thread and 71-85% at two (Zen 3, int8_linear_bench, strips streamed from memory); 1-2 KiB
// ahead gave 84-97% and 87-100%, 512 bytes no gain, 3-4 KiB less again.
inline constexpr std::size_t avx2_decode_prefetch_bytes = 2048;
// AVX2 without VNNI (most x86 laptops): a 256-bit register holds 8 rows, so a strip is two
// halves with the AVX-512 lane order in each. Byte products go through vpmaddubsw, whose 16-bit
// sums saturate, so they are widened to int32 before they can leave its range: with
// activations in -127..127 a vpmaddubsw lane is at most 2 * 127 q_max, and up to 8 of them
// (4-bit weights: 30480), 4 (5-bit: 31496) or 2 (6-bit: 32004) are added in 16 bits. Q8_0's
// signed weights go through the sign trick (|w| times x with w's sign, at most 2 * 128 * 127
// per 16-bit lane) and are widened at once: sums of the signed q, as VNNI's once it has
// subtracted 128 sum(x).
//
// One token (decode) goes through int8_strip_row_avx2 below instead: the same sums and float
// operations, in an order that keeps every value in the 16 registers.
template <DType W>
void int8_strip_row_avx2(std::byte const* strip, Extent auto cols, Int8Row const& x,
                         float (&out)[int8_strip_rows]);

template <DType W, int T>
void int8_strip_tile_avx2(std::byte const* strip, Extent auto cols, Int8Row const (&x)[T],
                          float (&out)[T][int8_strip_rows], bool streamed) {
    if constexpr (T == 1) {
        int8_strip_row_avx2<W>(strip, cols, x[0], out[0]);
        return;
    }
    using Format = Int8StripFormat<W>;
    constexpr int K = Format::registers, halves = 2;
    __m256 acc[T][halves];
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) acc[t][h] = _mm256_setzero_ps();
    __m256i const shift = _mm256_set1_epi8(static_cast<char>(0x80));
    int const blocks = cols / int8_block_elements;
    for (int b = 0; b < blocks; ++b) {
        std::byte const* p = strip + static_cast<std::size_t>(b) * Format::block_bytes;
        std::byte const* scales = p + Format::scales_offset;
        // A tile that streams its strip from memory asks for it ahead as the one-token row does
        // (batched decode, the first tile of a prefill chunk); later tiles find it in cache.
        // int8_linear_bench --rows 65536 --cols 640 -p 4 (the strips streamed), one thread,
        // GMAC/s on the Zen 3, alternated three times: Q8_0 43.8-48.7 -> 51.5-54.3, Q5_0
        // 50.5-55.5 -> 62.1-63.2, Q4_1 62.5-66.9 -> 66.4-69.7. From cache every block's
        // prefetch cost Q4_1 about 1% (68.1-73.4 -> 68.1-71.0), hence `streamed`.
        if (streamed)
            prefetch_bytes<PrefetchOrder::pinned>(p + avx2_decode_prefetch_bytes,
                                                  Format::block_bytes);
        if constexpr (!Format::nibbles) {
            // Q8_0: both halves of a register at once, so that each activation broadcast serves
            // the strip's 16 rows, each half's signed weights and magnitudes its tile's tokens
            // (half by half, GMAC/s from cache on the Zen 3, one thread, 640 columns: 4 tokens
            // 55.4-55.8 -> 57.9-58.4, 16 tokens 56.8-57.4 -> 59.5-60.0; GCC 12 keeps the 2T
            // sums and four weight registers in AVX2's 16 without spilling at T = 4).
            __m256i q8_sums[T][halves];
            for (int t = 0; t < T; ++t)
                for (int h = 0; h < halves; ++h) q8_sums[t][h] = _mm256_setzero_si256();
            for (int k = 0; k < K; ++k) {
                __m256i w[halves], magnitude[halves];
                for (int h = 0; h < halves; ++h) {
                    w[h] = _mm256_xor_si256(load_256(p + k * Format::register_bytes + 32 * h),
                                            shift);  // signed q
                    magnitude[h] = _mm256_abs_epi8(w[h]);
                }
                for (int t = 0; t < T; ++t) {
                    __m256i const xs = four_256(x[t].q + b * int8_block_elements + 4 * k);
                    for (int h = 0; h < halves; ++h) {
                        q8_sums[t][h] = _mm256_add_epi32(q8_sums[t][h],
                                                         q8_products_256(w[h], magnitude[h], xs));
                        keep_chain(q8_sums[t][h]);
                    }
                }
            }
            for (int t = 0; t < T; ++t)
                for (int h = 0; h < halves; ++h)
                    acc[t][h] = add_legacy_block_256<Format>(acc[t][h], q8_sums[t][h], scales, h,
                                                             x[t].scale[b], x[t].sum[b]);
        } else if constexpr (T >= 4) {
            // Tiles of four or more: both halves' 4- or 5-bit values unpacked once for the
            // tile's tokens (per token they were most of its operations), then each activation
            // broadcast serves the strip's 16 rows. GMAC/s from cache on the Zen 3, one thread,
            // Q5_0: per token half by half 50-55 at four tokens; assembled once per half 57-60
            // at four, 60-66 at sixteen (2048 columns); both halves per broadcast 70-77 at
            // sixteen. Q4_1 and Q4_0 (a mask and a shift per register) at sixteen: 0.84-0.89 of
            // the time of per-token unpacking at four (SmolLM2's 1536 x 576 and 576 x 1536, 512
            // tokens, through linear_int8, alternated in one process). Two or three tokens
            // unpack per token (Q5_0 buffered: 3% slower).
            __m256i decoded[halves][K][2];
            for (int h = 0; h < halves; ++h) {
                __m256i const qh = legacy_high_bits_256<Format>(p, h);
                for (int k = 0; k < K; ++k)
                    legacy_values_256<Format>(load_256(p + k * Format::register_bytes + 32 * h), qh,
                                              k, decoded[h][k][0], decoded[h][k][1]);
            }
            for (int t = 0; t < T; ++t) {
                std::int8_t const* xq = x[t].q + b * int8_block_elements;
                __m256i pairs[halves][2];
                for (int h = 0; h < halves; ++h) pairs[h][0] = pairs[h][1] = _mm256_setzero_si256();
                for (int k = 0; k < K; ++k) {
                    __m256i const x_low = four_256(xq + 4 * k), x_high = four_256(xq + 16 + 4 * k);
                    for (int h = 0; h < halves; ++h) {
                        pairs[h][0] = _mm256_add_epi16(
                            pairs[h][0], _mm256_maddubs_epi16(decoded[h][k][0], x_low));
                        pairs[h][1] = _mm256_add_epi16(
                            pairs[h][1], _mm256_maddubs_epi16(decoded[h][k][1], x_high));
                        keep_chain(pairs[h][0]);
                        keep_chain(pairs[h][1]);
                    }
                }
                for (int h = 0; h < halves; ++h) {
                    acc[t][h] = add_legacy_block_256<Format>(
                        acc[t][h], widen_legacy_pairs_256<Format>(pairs[h][0], pairs[h][1]), scales,
                        h, x[t].scale[b], x[t].sum[b]);
                }
            }
        } else {
            for (int h = 0; h < halves; ++h) {
                // The tokens' activation blocks, read again for each half: GCC 12 otherwise loaded
                // every broadcast once for both halves and kept them on the stack (measured at
                // four tokens before those took the path above, GMAC/s from cache on the Zen 3:
                // Q4_1 70 -> 73; Q5_0 56 -> 50, so not there).
                std::int8_t const* xb[T];
                for (int t = 0; t < T; ++t) {
                    xb[t] = x[t].q + b * int8_block_elements;
                    if constexpr (!Format::high_bits) xb[t] = read_again(xb[t]);
                }
                for (int t = 0; t < T; ++t) {
                    std::int8_t const* xq = xb[t];
                    __m256i pairs_low = _mm256_setzero_si256(), pairs_high = pairs_low;
                    for (int k = 0; k < K; ++k) {
                        __m256i low, high;
                        legacy_values_256<Format>(load_256(p + k * Format::register_bytes + 32 * h),
                                                  legacy_high_bits_256<Format>(p, h), k, low, high);
                        pairs_low = _mm256_add_epi16(
                            pairs_low, _mm256_maddubs_epi16(low, four_256(xq + 4 * k)));
                        pairs_high = _mm256_add_epi16(
                            pairs_high, _mm256_maddubs_epi16(high, four_256(xq + 16 + 4 * k)));
                        keep_chain(pairs_low);
                        keep_chain(pairs_high);
                    }
                    acc[t][h] = add_legacy_block_256<Format>(
                        acc[t][h], widen_legacy_pairs_256<Format>(pairs_low, pairs_high), scales, h,
                        x[t].scale[b], x[t].sum[b]);
                }
            }
        }
    }
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) _mm256_storeu_ps(out[t] + 8 * h, acc[t][h]);
}

// The K-quant rows' distance, asked a quarter of a super-block at a time (per sub-block pair
// of Q4_K and Q5_K, per half of a half of Q6_K): a whole super-block's 36-53 lines at once
// kept Q4_K at 62-66% of the read bandwidth, Q5_K 59-63%, Q6_K 54-56% (Zen 3, one thread,
// int8_linear_bench -p 1). Spread out: 2 KiB ahead 78-82% (Q4_K), 3 KiB 88-93%, 4 KiB
// 91-94% (Q5_K 81-86%, Q6_K 63-72%; two threads Q4_K 69-70% -> 82-91%), 6 KiB 71-95%.
inline constexpr std::size_t avx2_k_quant_prefetch_bytes = 4096;
// Part `part` of `parts` of the K-quant super-block avx2_k_quant_prefetch_bytes past p.
template <class Format, int parts>
inline void prefetch_k_quant_part(std::byte const* p, int part) {
    constexpr std::size_t bytes = Format::block_bytes / parts;
    prefetch_bytes<PrefetchOrder::pinned>(p + avx2_k_quant_prefetch_bytes + part * bytes, bytes);
}

// A token tile of one, register by register over both halves: each activation broadcast
// then serves the strip's 16 rows, and the live values (four 16-bit sums, two float sums, two
// broadcasts, the masks) fit AVX2's 16 registers. The tile loop's order, half by half, held
// eight broadcasts and spilled its float sums to the stack each block (GCC 12), which made
// decode compute bound on a Zen 3 (Q4_1 strips 23.6 GB/s from L2 against 21.7 GB/s of memory).
// The integer sums are the same integers (16-bit lanes that cannot overflow, whatever the order
// of their additions) and the float operations the same, in the same order.
template <DType W>
void int8_strip_row_avx2(std::byte const* strip, Extent auto cols, Int8Row const& x,
                         float (&out)[int8_strip_rows]) {
    using Format = Int8StripFormat<W>;
    constexpr int K = Format::registers, halves = 2;
    __m256 acc[halves] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256i const shift = _mm256_set1_epi8(static_cast<char>(0x80));
    int const blocks = cols / int8_block_elements;
    for (int b = 0; b < blocks; ++b) {
        std::byte const* p = strip + static_cast<std::size_t>(b) * Format::block_bytes;
        std::byte const* scales = p + Format::scales_offset;
        std::int8_t const* xq = x.q + b * int8_block_elements;
        prefetch_bytes<PrefetchOrder::pinned>(p + avx2_decode_prefetch_bytes, Format::block_bytes);
        __m256i sums[halves];
        if constexpr (Format::nibbles) {
            // [half][low nibbles, high nibbles]: at most 4 products of up to 2 * 31 * 127 each
            // with fifth bits, 8 of 2 * 15 * 127 (low and high added) without.
            __m256i pairs[halves][2];
            for (auto& half : pairs) half[0] = half[1] = _mm256_setzero_si256();
            __m256i qh[halves];
            for (int h = 0; h < halves; ++h) qh[h] = legacy_high_bits_256<Format>(p, h);
            for (int k = 0; k < K; ++k) {
                __m256i const x_low = four_256(xq + 4 * k), x_high = four_256(xq + 16 + 4 * k);
                for (int h = 0; h < halves; ++h) {
                    __m256i low, high;
                    legacy_values_256<Format>(load_256(p + k * Format::register_bytes + 32 * h),
                                              qh[h], k, low, high);
                    pairs[h][0] = _mm256_add_epi16(pairs[h][0], _mm256_maddubs_epi16(low, x_low));
                    pairs[h][1] = _mm256_add_epi16(pairs[h][1], _mm256_maddubs_epi16(high, x_high));
                    keep_chain(pairs[h][0]);
                    keep_chain(pairs[h][1]);
                }
            }
            for (int h = 0; h < halves; ++h)
                sums[h] = widen_legacy_pairs_256<Format>(pairs[h][0], pairs[h][1]);
        } else {
            // Q8_0: the tile's sign trick.
            sums[0] = sums[1] = _mm256_setzero_si256();
            for (int k = 0; k < K; ++k) {
                __m256i const xs = four_256(xq + 4 * k);
                for (int h = 0; h < halves; ++h) {
                    __m256i const w = _mm256_xor_si256(  // signed q
                        load_256(p + k * Format::register_bytes + 32 * h), shift);
                    sums[h] = _mm256_add_epi32(sums[h], q8_products_256(w, _mm256_abs_epi8(w), xs));
                    keep_chain(sums[h]);
                }
            }
        }
        for (int h = 0; h < halves; ++h)
            acc[h] = add_legacy_block_256<Format>(acc[h], sums[h], scales, h, x.scale[b], x.sum[b]);
    }
    for (int h = 0; h < halves; ++h) _mm256_storeu_ps(out + 8 * h, acc[h]);
}

// A Q4_K or Q5_K super-block's scale fields for rows 8h .. 8h+7, and sub-block j's scale
// d s_j and minimum dmin m_j from them.
struct KQuantScales256 {
    __m256 d, dmin;
    __m256i packed[3];
};
template <class Format>
inline KQuantScales256 k_quant_scales_256(std::byte const* p, int h) {
    return {load_halves_256(p + Format::scales_offset + 16 * h),
            load_halves_256(p + Format::scales_offset + Format::scale_array_bytes + 16 * h),
            {load_256(p + Format::scale_register_offset + 32 * h),
             load_256(p + Format::scale_register_offset + 64 + 32 * h),
             load_256(p + Format::scale_register_offset + 128 + 32 * h)}};
}
inline void k_quant_sub_block_256(KQuantScales256 const& fields, int j, __m256& scale,
                                  __m256& minimum) {
    __m256i scale_bits, min_bits;
    scale_min_lanes(fields.packed, j, scale_bits, min_bits);
    scale = _mm256_mul_ps(fields.d, _mm256_cvtepi32_ps(scale_bits));
    minimum = _mm256_mul_ps(fields.dmin, _mm256_cvtepi32_ps(min_bits));
}

// Sub-blocks 2 pair (low nibbles) and 2 pair + 1 (high) of register k of a Q4_K or Q5_K
// super-block p, rows 8h .. 8h+7.
template <DType W>
inline void k_quant_values_256(std::byte const* p, int pair, int k, int h, __m256i& low,
                               __m256i& high) {
    using Format = Int8StripFormat<W>;
    __m256i const nibble = _mm256_set1_epi8(0x0f), fifth = _mm256_set1_epi8(0x10);
    __m256i const bytes = load_256(p + (8 * pair + k) * Format::register_bytes + 32 * h);
    low = _mm256_and_si256(bytes, nibble);
    high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
    if constexpr (W == DType::q5_k) {
        __m256i const qh = shift_right_16(
            load_256(p + Format::high_offset + k * Format::register_bytes + 32 * h), 2 * pair);
        low = _mm256_or_si256(low, _mm256_and_si256(_mm256_slli_epi16(qh, 4), fifth));
        high = _mm256_or_si256(high, _mm256_and_si256(_mm256_slli_epi16(qh, 3), fifth));
    }
}

// Q4_K and Q5_K for one token (decode), as int8_strip_row_avx2 does the legacy formats: each
// register pair of a sub-block pair for both halves of the strip in one pass, so that its two
// activation broadcasts serve 16 rows, and the strip prefetched ahead. The tile below went half
// by half, broadcasting every activation twice per super-block and spilling its sums. The same
// integer sums and the same float operations per half, in the same order.
template <DType W>
void int8_strip_row_k_minimum_avx2(std::byte const* strip, Extent auto cols, Int8Row const& x,
                                   float (&out)[int8_strip_rows]) {
    using Format = Int8StripFormat<W>;
    constexpr int halves = 2;
    __m256 acc[halves] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256i const ones = _mm256_set1_epi16(1);
    int const supers = cols / Format::block_elements;
    for (int sb = 0; sb < supers; ++sb) {
        std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
        for (int pair = 0; pair < 4; ++pair) {
            prefetch_k_quant_part<Format, 4>(p, pair);
            int const b = sb * 8 + 2 * pair;  // the low sub-block's activation block
            std::int8_t const* xq = x.q + b * int8_block_elements;
            // [half of the strip][sub-block 2 pair, 2 pair + 1]
            __m256i pairs[halves][2], sums[halves][2];
            for (int h = 0; h < halves; ++h)
                for (int sub = 0; sub < 2; ++sub)
                    pairs[h][sub] = sums[h][sub] = _mm256_setzero_si256();
            for (int k = 0; k < 8; ++k) {
                __m256i const x_low = four_256(xq + 4 * k),
                              x_high = four_256(xq + int8_block_elements + 4 * k);
                for (int h = 0; h < halves; ++h) {
                    __m256i low, high;
                    k_quant_values_256<W>(p, pair, k, h, low, high);
                    pairs[h][0] = _mm256_add_epi16(pairs[h][0], _mm256_maddubs_epi16(low, x_low));
                    pairs[h][1] = _mm256_add_epi16(pairs[h][1], _mm256_maddubs_epi16(high, x_high));
                    keep_chain(pairs[h][0]);
                    keep_chain(pairs[h][1]);
                }
                // 5-bit weights: widen every 4 terms; 4-bit: after all 8.
                if (W == DType::q5_k ? k % 4 == 3 : k == 7) {
                    for (int h = 0; h < halves; ++h) {
                        for (int sub = 0; sub < 2; ++sub) {
                            sums[h][sub] = _mm256_add_epi32(sums[h][sub],
                                                            _mm256_madd_epi16(pairs[h][sub], ones));
                            pairs[h][sub] = _mm256_setzero_si256();
                        }
                    }
                }
            }
            for (int h = 0; h < halves; ++h) {
                KQuantScales256 const fields = k_quant_scales_256<Format>(p, h);
                for (int sub = 0; sub < 2; ++sub) {
                    __m256 scale, minimum;
                    k_quant_sub_block_256(fields, 2 * pair + sub, scale, minimum);
                    __m256 const s = _mm256_mul_ps(scale, _mm256_set1_ps(x.scale[b + sub]));
                    acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[h][sub]), s, acc[h]);
                    acc[h] = _mm256_fnmadd_ps(minimum, _mm256_set1_ps(x.sum[b + sub]), acc[h]);
                }
            }
        }
    }
    for (int h = 0; h < halves; ++h) _mm256_storeu_ps(out + 8 * h, acc[h]);
}

template <DType W, int T>
void int8_strip_tile_k_minimum_avx2(std::byte const* strip, Extent auto cols, Int8Row const (&x)[T],
                                    float (&out)[T][int8_strip_rows]) {
    if constexpr (T == 1) {
        int8_strip_row_k_minimum_avx2<W>(strip, cols, x[0], out[0]);
        return;
    }
    using Format = Int8StripFormat<W>;
    constexpr int halves = 2;
    __m256 acc[T][halves];
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) acc[t][h] = _mm256_setzero_ps();
    __m256i const ones = _mm256_set1_epi16(1);
    __m256i const nibble = _mm256_set1_epi8(0x0f);
    int const supers = cols / Format::block_elements;
    if constexpr (T >= 8) {
        // Wide tiles (kernels/linear.hpp): a sub-block pair's values for both halves of the
        // strip assembled once into a buffer (1 KiB) for the tile's tokens, then each activation
        // broadcast serves 16 rows (int8_linear_bench, one thread, 2048 columns, GMAC/s on the
        // Zen 3, alternated: Q4_K 8 tokens 57-60 -> 64-65, 16 tokens 66-68 -> 72-74; Q5_K 46-48
        // -> 60-61 and 54-57 -> 69-71). The same integer sums and, per output, the same float
        // operations in the same order as the tiles below.
        for (int sb = 0; sb < supers; ++sb) {
            std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
            KQuantScales256 const fields[halves] = {k_quant_scales_256<Format>(p, 0),
                                                    k_quant_scales_256<Format>(p, 1)};
            for (int pair = 0; pair < 4; ++pair) {
                prefetch_k_quant_part<Format, 4>(p, pair);
                __m256i decoded[2][8][halves];  // [sub-block of the pair][register k][half]
                for (int k = 0; k < 8; ++k)
                    for (int h = 0; h < halves; ++h)
                        k_quant_values_256<W>(p, pair, k, h, decoded[0][k][h], decoded[1][k][h]);
                __m256 scale[halves][2], minimum[halves][2];
                for (int h = 0; h < halves; ++h)
                    for (int sub = 0; sub < 2; ++sub)
                        k_quant_sub_block_256(fields[h], 2 * pair + sub, scale[h][sub],
                                              minimum[h][sub]);
                for (int t = 0; t < T; ++t) {
                    for (int sub = 0; sub < 2; ++sub) {
                        int const b = sb * 8 + 2 * pair + sub;
                        std::int8_t const* xq = x[t].q + b * int8_block_elements;
                        __m256i pairs[halves], sums[halves];
                        for (int h = 0; h < halves; ++h)
                            pairs[h] = sums[h] = _mm256_setzero_si256();
                        for (int k = 0; k < 8; ++k) {
                            __m256i const xs = four_256(xq + 4 * k);
                            for (int h = 0; h < halves; ++h) {
                                pairs[h] = _mm256_add_epi16(
                                    pairs[h], _mm256_maddubs_epi16(decoded[sub][k][h], xs));
                                keep_chain(pairs[h]);
                            }
                            // 5-bit weights: widen every 4 terms; 4-bit: after all 8.
                            if (W == DType::q5_k ? k % 4 == 3 : k == 7) {
                                for (int h = 0; h < halves; ++h) {
                                    sums[h] = _mm256_add_epi32(sums[h],
                                                               _mm256_madd_epi16(pairs[h], ones));
                                    pairs[h] = _mm256_setzero_si256();
                                }
                            }
                        }
                        for (int h = 0; h < halves; ++h) {
                            __m256 const s =
                                _mm256_mul_ps(scale[h][sub], _mm256_set1_ps(x[t].scale[b]));
                            acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[h]), s, acc[t][h]);
                            acc[t][h] = _mm256_fnmadd_ps(minimum[h][sub],
                                                         _mm256_set1_ps(x[t].sum[b]), acc[t][h]);
                        }
                    }
                }
            }
        }
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < halves; ++h) _mm256_storeu_ps(out[t] + 8 * h, acc[t][h]);
        return;
    }
    for (int sb = 0; sb < supers; ++sb) {
        std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
        for (int h = 0; h < halves; ++h) {
            KQuantScales256 const fields = k_quant_scales_256<Format>(p, h);
            for (int pair = 0; pair < 4; ++pair) {
                // An eighth of a super-block at a time, as the one-token rows ask.
                prefetch_k_quant_part<Format, 8>(p, 4 * h + pair);
                // Sub-blocks 2 pair (low nibbles) and 2 pair + 1 (high) of register k.
                auto const values = [&](int k, __m256i& low, __m256i& high) {
                    k_quant_values_256<W>(p, pair, k, h, low, high);
                };
                __m256 scale[2], minimum[2];
                for (int half = 0; half < 2; ++half)
                    k_quant_sub_block_256(fields, 2 * pair + half, scale[half], minimum[half]);
                // Each register is loaded once for both sub-blocks. Q5_K tiles of several tokens
                // assemble the pair's 5-bit values once into a buffer they all read (for Q4_K's
                // mask and shift the buffer measured slower than recomputing them).
                constexpr bool buffered = W == DType::q5_k && T > 1;
                __m256i decoded[buffered ? 2 : 1][8];
                if constexpr (buffered) {
                    for (int k = 0; k < 8; ++k) values(k, decoded[0][k], decoded[1][k]);
                }
                if constexpr (W == DType::q4_k && T > 1) {
                    // Q4_K tiles: one sub-block at a time, its nibbles re-split per token
                    // (measured faster than both nibbles per load or a buffer at 4 tokens).
                    for (int half = 0; half < 2; ++half) {
                        int const b = sb * 8 + 2 * pair + half;
                        for (int t = 0; t < T; ++t) {
                            std::int8_t const* xq = x[t].q + b * int8_block_elements;
                            __m256i pairs = _mm256_setzero_si256();
                            for (int k = 0; k < 8; ++k) {
                                __m256i const q = _mm256_and_si256(
                                    shift_right_16(
                                        load_256(p + (8 * pair + k) * Format::register_bytes +
                                                 32 * h),
                                        4 * half),
                                    nibble);
                                pairs = _mm256_add_epi16(
                                    pairs, _mm256_maddubs_epi16(q, four_256(xq + 4 * k)));
                            }
                            __m256i const sums = _mm256_madd_epi16(pairs, ones);
                            __m256 const s =
                                _mm256_mul_ps(scale[half], _mm256_set1_ps(x[t].scale[b]));
                            acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), s, acc[t][h]);
                            acc[t][h] = _mm256_fnmadd_ps(minimum[half], _mm256_set1_ps(x[t].sum[b]),
                                                         acc[t][h]);
                        }
                    }
                    continue;
                }
                for (int t = 0; t < T; ++t) {
                    int const b = sb * 8 + 2 * pair;  // the low sub-block's activation block
                    std::int8_t const* xq = x[t].q + b * int8_block_elements;
                    __m256i sums[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                    __m256i pairs[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
                    for (int k = 0; k < 8; ++k) {
                        __m256i q[2];
                        if constexpr (buffered) {
                            q[0] = decoded[0][k];
                            q[1] = decoded[1][k];
                        } else {
                            values(k, q[0], q[1]);
                        }
                        for (int half = 0; half < 2; ++half) {
                            pairs[half] = _mm256_add_epi16(
                                pairs[half],
                                _mm256_maddubs_epi16(
                                    q[half], four_256(xq + half * int8_block_elements + 4 * k)));
                        }
                        // 5-bit weights: widen every 4 terms; 4-bit: after all 8.
                        if (W == DType::q5_k ? k % 4 == 3 : k == 7) {
                            for (int half = 0; half < 2; ++half) {
                                sums[half] = _mm256_add_epi32(sums[half],
                                                              _mm256_madd_epi16(pairs[half], ones));
                                pairs[half] = _mm256_setzero_si256();
                            }
                        }
                    }
                    for (int half = 0; half < 2; ++half) {
                        __m256 const s =
                            _mm256_mul_ps(scale[half], _mm256_set1_ps(x[t].scale[b + half]));
                        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums[half]), s, acc[t][h]);
                        acc[t][h] = _mm256_fnmadd_ps(minimum[half],
                                                     _mm256_set1_ps(x[t].sum[b + half]), acc[t][h]);
                    }
                }
            }
        }
    }
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) _mm256_storeu_ps(out[t] + 8 * h, acc[t][h]);
}

// Block m's 6-bit values (m = 0..3 of a super-block's half) from its ql register (16 g + k for
// m = 0 and 2, 16 g + 8 + k for 1 and 3; low nibbles for m < 2) and qh register (bit pair m).
template <int m>
inline __m256i q6_k_values_256(__m256i ql, __m256i qh) {
    __m256i const nibble = _mm256_set1_epi8(0x0f), top = _mm256_set1_epi8(0x30);
    __m256i const low4 = _mm256_and_si256(m < 2 ? ql : _mm256_srli_epi16(ql, 4), nibble);
    __m256i const high2 = m == 0   ? _mm256_slli_epi16(qh, 4)
                          : m == 1 ? _mm256_slli_epi16(qh, 2)
                          : m == 2 ? qh
                                   : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(low4, _mm256_and_si256(high2, top));
}

// Q6_K sub-block `sub`'s scales for the half of the strip at `lanes`, as (c, c) 16-bit pairs
// for vpmaddwd.
inline __m256i q6_k_scale_pairs_256(std::byte const* lanes, int sub) {
    using Format = Int8StripFormat<DType::q6_k>;
    // Byte sub % 4 of each lane's scales register into both 16-bit halves, sign-extended.
    int const j = sub % 4;
    auto const lane = [j](int l) { return (0x80 | (4 * l + j) << 8) * 0x10001; };
    __m256i const pick =
        _mm256_setr_epi32(lane(0), lane(1), lane(2), lane(3), lane(0), lane(1), lane(2), lane(3));
    __m256i const packed =
        load_256(lanes + Format::scale_register_offset + (sub / 4) * Format::register_bytes);
    return _mm256_srai_epi16(_mm256_shuffle_epi8(packed, pick), 8);
}

// Q6_K for one token (decode). The tile below decodes a half's four blocks into a 1 KiB buffer
// that its tokens read; for one token that is a store and a load per register, plus a 32-bit
// multiply per sub-block: 10.4 GMAC/s from cache on a Zen 3, 40% of the read bandwidth
// streamed. Here block m's values go straight into vpmaddubsw, and the sub-block scales
// multiply in 16 bits, vpmaddwd against (c, c) pairs, as does the -32 offset (c against
// -16 sum(x) twice): 21.5-22.3 GMAC/s from cache. The int32 totals are the tile's integers
// (16-bit lanes of at most 2 * 2 * 63 * 127, and 16 * 16 * 127 = 32512), the float operations
// the same in the same order.
inline void int8_strip_row_q6_k_avx2(std::byte const* strip, Extent auto cols, Int8Row const& x,
                                     float (&out)[int8_strip_rows]) {
    using Format = Int8StripFormat<DType::q6_k>;
    constexpr int halves = 2;
    __m256 acc[halves] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int const supers = cols / Format::block_elements;
    for (int sb = 0; sb < supers; ++sb) {
        std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
        // -16 sum(x) of each block's two sub-blocks, as a pair of 16-bit values.
        std::int32_t offsets[8][2];
        for (int m = 0; m < 8; ++m) {
            int x_sums[2];
            sums_of_16_sse(x.q + (sb * 8 + m) * int8_block_elements, x_sums);
            for (int s = 0; s < 2; ++s)
                offsets[m][s] = static_cast<std::int32_t>(
                    static_cast<std::uint16_t>(-16 * x_sums[s]) * 0x10001u);
        }
        for (int h = 0; h < halves; ++h) {  // h: rows 8h .. 8h+7
            std::byte const* lanes = p + 32 * h;
            __m256 const d = load_halves_256(p + Format::scales_offset + 16 * h);
            // Block m of the super-block's half g at a time, in m's order: few live registers.
            // Passes over both nibbles of a register, or over both halves, spilled their sums
            // and broadcasts under GCC 12 (17-19 GMAC/s); here each ql register is loaded twice
            // and qh four times, loads being what this loop has to spare. The activations are
            // read again for the second half (read_again): GCC 12 otherwise broadcast all 64 of
            // a super-block's groups once for both halves and kept them on the stack, a store
            // and a load more per group (one row from L2, Zen 3: 24.6-25.4 -> 27.0-27.5 GMAC/s).
            auto const block = [&]<int g, int m>() {
                if constexpr (m == 0) prefetch_k_quant_part<Format, 4>(p, 2 * h + g);
                std::int8_t const* xq =
                    read_again(x.q + (sb * 8 + 4 * g + m) * int8_block_elements);
                __m256i total = _mm256_setzero_si256();
                for (int s = 0; s < 2; ++s) {  // sub-block s: registers 4s .. 4s+3
                    __m256i const c = q6_k_scale_pairs_256(lanes, 8 * g + 2 * m + s);
                    total = _mm256_add_epi32(
                        total, _mm256_madd_epi16(c, _mm256_set1_epi32(offsets[4 * g + m][s])));
                    for (int k0 = 4 * s; k0 < 4 * s + 4; k0 += 2) {
                        __m256i pairs = _mm256_setzero_si256();
                        for (int k = k0; k < k0 + 2; ++k) {
                            __m256i const bytes = load_256(lanes + (16 * g + 8 * (m % 2) + k) *
                                                                       Format::register_bytes);
                            __m256i const qh = load_256(lanes + Format::high_offset +
                                                        (8 * g + k) * Format::register_bytes);
                            __m256i const q = q6_k_values_256<m>(bytes, qh);
                            pairs = _mm256_add_epi16(pairs,
                                                     _mm256_maddubs_epi16(q, four_256(xq + 4 * k)));
                        }
                        total = _mm256_add_epi32(total, _mm256_madd_epi16(pairs, c));
                    }
                }
                __m256 const scale = _mm256_mul_ps(d, _mm256_set1_ps(x.scale[sb * 8 + 4 * g + m]));
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), scale, acc[h]);
            };
            [&]<int... gm>(std::integer_sequence<int, gm...>) {
                (block.template operator()<gm / 4, gm % 4>(), ...);
            }
            (std::make_integer_sequence<int, 8>{});
        }
    }
    for (int h = 0; h < halves; ++h) _mm256_storeu_ps(out + 8 * h, acc[h]);
}

// Q6_K: each ql register (16 g + k, 16 g + 8 + k) and qh register (8 g + k) is loaded once and
// gives the 6-bit values of all four activation blocks of half g (elements 4k.. of each), which
// are stored to a 1 KiB buffer that every token of the tile reads (a register per block and
// sub-block would need more than AVX2's 16). vpmaddubsw sums (at most 2 * 63 * 127) are added
// two at a time in 16 bits (32004), then widened by vpmaddwd against their sub-block's (c, c)
// scale pairs into one int32 sum per block, started at -32 (c0 sum0 + c1 sum1) of its two
// sub-blocks' activations (one vpmaddwd of (c0, c1) against the pair (-16 sum0, -16 sum1),
// doubled), as the one-token row does: the same integers as widening by ones and multiplying by
// c with vpmulld, 13 multiply instructions per block and token instead of 14 (Gemma 3's 640 x
// 2048, 512 tokens, one thread, alternated in one process: 0.947-0.956 of the time).
template <int T>
void int8_strip_tile_q6_k_avx2(std::byte const* strip, Extent auto cols, Int8Row const (&x)[T],
                               float (&out)[T][int8_strip_rows]) {
    if constexpr (T == 1) {
        int8_strip_row_q6_k_avx2(strip, cols, x[0], out[0]);
        return;
    }
    using Format = Int8StripFormat<DType::q6_k>;
    constexpr int halves = 2;
    __m256 acc[T][halves];
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) acc[t][h] = _mm256_setzero_ps();
    __m256i decoded[4][8];  // [block m][register k]: 8 rows x 4 six-bit values
    int const supers = cols / Format::block_elements;
    for (int sb = 0; sb < supers; ++sb) {
        std::byte const* p = strip + static_cast<std::size_t>(sb) * Format::block_bytes;
        for (int g = 0; g < 2; ++g) {  // g: the super-block's half of 128 elements
            int const first_block = sb * 8 + 4 * g;
            // -16 sum(x) of each block's two sub-blocks as a pair of 16-bit values (s = 0 low).
            std::int32_t offsets[T][4];
            for (int t = 0; t < T; ++t)
                for (int m = 0; m < 4; ++m) {
                    int x_sums[2];
                    sums_of_16_sse(x[t].q + (first_block + m) * int8_block_elements, x_sums);
                    offsets[t][m] = static_cast<std::int32_t>(
                        static_cast<std::uint16_t>(-16 * x_sums[0]) |
                        static_cast<std::uint32_t>(static_cast<std::uint16_t>(-16 * x_sums[1]))
                            << 16);
                }
            for (int h = 0; h < halves; ++h) {  // h: rows 8h .. 8h+7
                // A quarter of a super-block at a time, as the one-token row asks.
                prefetch_k_quant_part<Format, 4>(p, 2 * g + h);
                std::byte const* lanes = p + 32 * h;
                __m256 const d = load_halves_256(p + Format::scales_offset + 16 * h);
                for (int k = 0; k < 8; ++k) {
                    __m256i const a = load_256(lanes + (16 * g + k) * Format::register_bytes);
                    __m256i const b = load_256(lanes + (16 * g + 8 + k) * Format::register_bytes);
                    __m256i const qh = load_256(lanes + Format::high_offset +
                                                (8 * g + k) * Format::register_bytes);
                    decoded[0][k] = q6_k_values_256<0>(a, qh);
                    decoded[1][k] = q6_k_values_256<1>(b, qh);
                    decoded[2][k] = q6_k_values_256<2>(a, qh);
                    decoded[3][k] = q6_k_values_256<3>(b, qh);
                }
                for (int m = 0; m < 4; ++m) {
                    // Sub-blocks 8g + 2m and 8g + 2m + 1: each one's (c, c) pairs, and (c0, c1).
                    __m256i c[2];
                    for (int s = 0; s < 2; ++s)
                        c[s] = q6_k_scale_pairs_256(lanes, 8 * g + 2 * m + s);
                    __m256i const both = _mm256_blend_epi16(c[0], c[1], 0xaa);
                    for (int t = 0; t < T; ++t) {
                        std::int8_t const* xq = x[t].q + (first_block + m) * int8_block_elements;
                        // -32 (c0 sum0 + c1 sum1): one vpmaddwd, doubled.
                        __m256i total = _mm256_madd_epi16(both, _mm256_set1_epi32(offsets[t][m]));
                        total = _mm256_add_epi32(total, total);
                        for (int s = 0; s < 2; ++s) {
                            for (int k = 4 * s; k < 4 * s + 4; k += 2) {
                                __m256i const pairs = _mm256_add_epi16(
                                    _mm256_maddubs_epi16(decoded[m][k], four_256(xq + 4 * k)),
                                    _mm256_maddubs_epi16(decoded[m][k + 1],
                                                         four_256(xq + 4 * k + 4)));
                                total = _mm256_add_epi32(total, _mm256_madd_epi16(pairs, c[s]));
                            }
                        }
                        __m256 const scale =
                            _mm256_mul_ps(d, _mm256_set1_ps(x[t].scale[first_block + m]));
                        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), scale, acc[t][h]);
                    }
                }
            }
        }
    }
    for (int t = 0; t < T; ++t)
        for (int h = 0; h < halves; ++h) _mm256_storeu_ps(out[t] + 8 * h, acc[t][h]);
}

TINFER_END_TARGET_AVX2
#endif

}  // namespace detail

// out[t][r] = row r of the strip . x[t], the strip in the layout above with `cols` columns (a
// static or a dynamic extent, core/extent.hpp: the same source either way). `streamed`: the strip
// comes from memory (the first tile over it in a chunk of tokens), so the AVX-512 tiles and the
// AVX2 tiles of the legacy formats ask for it ahead; the other kernels prefetch as their
// comments say.
template <DType W, int T, Isa isa = Isa::native>
inline void int8_strip_tile(std::byte const* strip, Extent auto cols, Int8Row const (&x)[T],
                            float (&out)[T][int8_strip_rows], bool streamed = true) {
    static_assert(
        has_int8_dot(W),
        "int8_strip_tile: weights must be Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K or Q6_K");
    constexpr bool k_minimum = W == DType::q4_k || W == DType::q5_k;
    if constexpr (isa == Isa::native) {
        // One strip: callers that loop over many (kernels/linear.hpp) choose once per matrix.
        with_running_isa(
            [&]<Isa chosen>() { int8_strip_tile<W, T, chosen>(strip, cols, x, out, streamed); });
#if TINFER_X86_TARGETS
    } else if constexpr (isa == Isa::avx512) {
        if constexpr (k_minimum) {
            detail::int8_strip_tile_k_minimum_avx512<W, T>(strip, cols, x, out, streamed);
        } else if constexpr (W == DType::q6_k) {
            detail::int8_strip_tile_q6_k_avx512<T>(strip, cols, x, out, streamed);
        } else {
            detail::int8_strip_tile_avx512<W, T>(strip, cols, x, out, streamed);
        }
    } else if constexpr (isa == Isa::avx2) {
        if constexpr (k_minimum) {
            detail::int8_strip_tile_k_minimum_avx2<W, T>(strip, cols, x, out);
        } else if constexpr (W == DType::q6_k) {
            detail::int8_strip_tile_q6_k_avx2<T>(strip, cols, x, out);
        } else {
            detail::int8_strip_tile_avx2<W, T>(strip, cols, x, out, streamed);
        }
#endif
    } else if constexpr (k_minimum) {
        detail::int8_strip_tile_k_minimum_portable<W, T>(strip, cols, x, out);
    } else if constexpr (W == DType::q6_k) {
        detail::int8_strip_tile_q6_k_portable<T>(strip, cols, x, out);
    } else {
        detail::int8_strip_tile_portable<W, T>(strip, cols, x, out);
    }
}

}  // namespace tinfer::kernels
