#pragma once
// GGUF's quantized block formats, byte for byte as ggml stores them, and their dequantization
// (the arithmetic of ggml-quants.c's dequantize_row_*). The reference quantizers at the end
// follow ggml's quantize_row_*_ref (round to nearest, no search for the best scale); they
// exist so tests can make blocks of their own.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <tinfer/core/dtype.hpp>
#include <tinfer/core/half.hpp>
#include <tinfer/core/host_device.hpp>

namespace tinfer::quant {

// Elements of one block of the "legacy" formats, and of one K-quant super-block.
inline constexpr int legacy_block_elements = 32;
inline constexpr int k_block_elements = 256;

struct BlockQ4_0 {
    static constexpr int elements = legacy_block_elements;
    std::uint16_t d;      // f16 scale
    std::uint8_t qs[16];  // element j in the low nibble of qs[j], element j+16 in the high
};
static_assert(sizeof(BlockQ4_0) == 18, "BlockQ4_0 must match GGUF's 18-byte block");

struct BlockQ4_1 {
    static constexpr int elements = legacy_block_elements;
    std::uint16_t d;  // f16 scale
    std::uint16_t m;  // f16 minimum
    std::uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20, "BlockQ4_1 must match GGUF's 20-byte block");

struct BlockQ5_0 {
    static constexpr int elements = legacy_block_elements;
    std::uint16_t d;
    std::uint8_t qh[4];  // bit j of the little-endian u32 is the fifth bit of element j
    std::uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22, "BlockQ5_0 must match GGUF's 22-byte block");

struct BlockQ5_1 {
    static constexpr int elements = legacy_block_elements;
    std::uint16_t d;
    std::uint16_t m;
    std::uint8_t qh[4];
    std::uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24, "BlockQ5_1 must match GGUF's 24-byte block");

struct BlockQ8_0 {
    static constexpr int elements = legacy_block_elements;
    std::uint16_t d;
    std::int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34, "BlockQ8_0 must match GGUF's 34-byte block");

// 16 sub-blocks of 16 elements, each with a 4-bit scale (low nibble of scales[s]) and a 4-bit
// minimum (high nibble); each element is 2 bits. Element i sits in bits 2k..2k+1 of
// qs[32h + l], with h = i / 128, k = (i % 128) / 32, l = i % 32. The f16 scales come last.
struct BlockQ2_K {
    static constexpr int elements = k_block_elements;
    std::uint8_t scales[16];
    std::uint8_t qs[64];
    std::uint16_t d;     // f16 super-block scale of the scales
    std::uint16_t dmin;  // f16 super-block scale of the minimums
};
static_assert(sizeof(BlockQ2_K) == 84, "BlockQ2_K must match GGUF's 84-byte block");

// 16 sub-blocks of 16 elements with signed 6-bit scales (stored + 32, packed into `scales`, see
// scale_k3); each element is 3 bits, 2 in qs laid out as Q2_K's and a third in hmask: bit i / 32
// of hmask[i % 32]. A clear hmask bit subtracts 4, so elements run -4..3.
struct BlockQ3_K {
    static constexpr int elements = k_block_elements;
    std::uint8_t hmask[32];
    std::uint8_t qs[64];
    std::uint8_t scales[12];
    std::uint16_t d;  // f16 super-block scale
};
static_assert(sizeof(BlockQ3_K) == 110, "BlockQ3_K must match GGUF's 110-byte block");

// 8 sub-blocks of 32 elements, each with a 6-bit scale and a 6-bit minimum packed into
// `scales` (see scale_min_k4); sub-blocks 2i and 2i+1 share qs[32i .. 32i+31], low nibbles
// first.
struct BlockQ4_K {
    static constexpr int elements = k_block_elements;
    std::uint16_t d;     // f16 super-block scale of the scales
    std::uint16_t dmin;  // f16 super-block scale of the minimums
    std::uint8_t scales[12];
    std::uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144, "BlockQ4_K must match GGUF's 144-byte block");

// Q4_K's scales and minimums and nibble layout, plus a fifth bit per element: bit i / 32 of
// qh[i % 32].
struct BlockQ5_K {
    static constexpr int elements = k_block_elements;
    std::uint16_t d;     // f16 super-block scale of the scales
    std::uint16_t dmin;  // f16 super-block scale of the minimums
    std::uint8_t scales[12];
    std::uint8_t qh[32];
    std::uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176, "BlockQ5_K must match GGUF's 176-byte block");

// 16 sub-blocks of 16 elements with signed 8-bit scales; each element is 6 bits: 4 in ql,
// 2 in qh. The f16 scale comes last.
struct BlockQ6_K {
    static constexpr int elements = k_block_elements;
    std::uint8_t ql[128];
    std::uint8_t qh[64];
    std::int8_t scales[16];
    std::uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "BlockQ6_K must match GGUF's 210-byte block");

// The block struct of a quantized DType.
template <DType T>
struct BlockOf;
template <>
struct BlockOf<DType::q4_0> {
    using type = BlockQ4_0;
};
template <>
struct BlockOf<DType::q4_1> {
    using type = BlockQ4_1;
};
template <>
struct BlockOf<DType::q5_0> {
    using type = BlockQ5_0;
};
template <>
struct BlockOf<DType::q5_1> {
    using type = BlockQ5_1;
};
template <>
struct BlockOf<DType::q8_0> {
    using type = BlockQ8_0;
};
template <>
struct BlockOf<DType::q2_k> {
    using type = BlockQ2_K;
};
template <>
struct BlockOf<DType::q3_k> {
    using type = BlockQ3_K;
};
template <>
struct BlockOf<DType::q4_k> {
    using type = BlockQ4_K;
};
template <>
struct BlockOf<DType::q5_k> {
    using type = BlockQ5_K;
};
template <>
struct BlockOf<DType::q6_k> {
    using type = BlockQ6_K;
};
template <DType T>
using BlockOfT = typename BlockOf<T>::type;

// Assembled byte by byte so it reads the same on host and device whatever the alignment.
TINFER_HOST_DEVICE constexpr std::uint32_t load_u32_le(std::uint8_t const* bytes) {
    return static_cast<std::uint32_t>(bytes[0]) | (static_cast<std::uint32_t>(bytes[1]) << 8) |
           (static_cast<std::uint32_t>(bytes[2]) << 16) |
           (static_cast<std::uint32_t>(bytes[3]) << 24);
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ4_0 const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    for (int j = 0; j < 16; ++j) {
        out[j] = static_cast<float>((block.qs[j] & 0x0f) - 8) * d;
        out[j + 16] = static_cast<float>((block.qs[j] >> 4) - 8) * d;
    }
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ4_1 const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    float const m = f16_bits_to_float(block.m);
    for (int j = 0; j < 16; ++j) {
        out[j] = static_cast<float>(block.qs[j] & 0x0f) * d + m;
        out[j + 16] = static_cast<float>(block.qs[j] >> 4) * d + m;
    }
}

// The 5-bit value of element j (0..31) of a Q5 block.
TINFER_HOST_DEVICE constexpr int q5_value(std::uint8_t const* qs, std::uint32_t qh, int j) {
    int const low = j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
    int const high = static_cast<int>((qh >> j) & 1u);
    return low | (high << 4);
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ5_0 const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    std::uint32_t const qh = load_u32_le(block.qh);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q5_value(block.qs, qh, j) - 16) * d;
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ5_1 const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    float const m = f16_bits_to_float(block.m);
    std::uint32_t const qh = load_u32_le(block.qh);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(q5_value(block.qs, qh, j)) * d + m;
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ8_0 const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(block.qs[j]) * d;
}

// The arithmetic below follows ggml's dequantize_row_q2_K / _q3_K / _q5_K operation for
// operation (scale times sub-block scale first, then times the element, then minus the
// minimum), so the values are bitwise ggml's wherever the compiler does not fuse a multiply
// and subtract.

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ2_K const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    float const dmin = f16_bits_to_float(block.dmin);
    for (int half = 0; half < 2; ++half) {
        std::uint8_t const* q = block.qs + 32 * half;
        for (int k = 0; k < 4; ++k) {
            int const shift = 2 * k;
            for (int part = 0; part < 2; ++part) {  // sub-blocks of 16 share the shift
                std::uint8_t const sc = block.scales[8 * half + 2 * k + part];
                float const dl = d * static_cast<float>(sc & 0x0f);
                float const ml = dmin * static_cast<float>(sc >> 4);
                for (int l = 0; l < 16; ++l)
                    out[l] = dl * static_cast<float>((q[16 * part + l] >> shift) & 3) - ml;
                out += 16;
            }
        }
    }
}

// Signed scale of sub-block s (0..15) of a Q3_K block: the low 4 bits are the low (s < 8) or
// high (s >= 8) nibble of byte s % 8; the top 2 bits are bits 2(s/4)..2(s/4)+1 of byte 8 + s % 4.
TINFER_HOST_DEVICE constexpr int scale_k3(int s, std::uint8_t const* scales) {
    int const low = s < 8 ? (scales[s] & 0x0f) : (scales[s - 8] >> 4);
    int const high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
    return (low | (high << 4)) - 32;
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ3_K const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    for (int half = 0; half < 2; ++half) {
        std::uint8_t const* q = block.qs + 32 * half;
        for (int k = 0; k < 4; ++k) {
            int const shift = 2 * k;
            int const bit = 4 * half + k;  // of hmask[l]
            for (int part = 0; part < 2; ++part) {
                float const dl =
                    d * static_cast<float>(scale_k3(8 * half + 2 * k + part, block.scales));
                for (int l = 16 * part; l < 16 * part + 16; ++l) {
                    int const low = (q[l] >> shift) & 3;
                    int const subtract = (block.hmask[l] >> bit) & 1 ? 0 : 4;
                    out[l - 16 * part] = dl * static_cast<float>(low - subtract);
                }
                out += 16;
            }
        }
    }
}

// Scale and minimum of sub-block j (0..7) of a Q4_K block: j < 4 keep 6 bits in bytes j and
// j+4; j >= 4 take their low 4 bits from byte j+4 and their top 2 bits from the spare top bits
// of bytes j-4 (scale) and j (minimum).
struct ScaleMin {
    std::uint8_t scale;
    std::uint8_t min;
};
TINFER_HOST_DEVICE constexpr ScaleMin scale_min_k4(int j, std::uint8_t const* scales) {
    if (j < 4) {
        return {static_cast<std::uint8_t>(scales[j] & 63),
                static_cast<std::uint8_t>(scales[j + 4] & 63)};
    }
    return {static_cast<std::uint8_t>((scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4)),
            static_cast<std::uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ4_K const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    float const dmin = f16_bits_to_float(block.dmin);
    std::uint8_t const* q = block.qs;
    for (int pair = 0; pair < 4; ++pair) {
        ScaleMin const low = scale_min_k4(2 * pair, block.scales);
        ScaleMin const high = scale_min_k4(2 * pair + 1, block.scales);
        float const d_low = d * static_cast<float>(low.scale);
        float const m_low = dmin * static_cast<float>(low.min);
        float const d_high = d * static_cast<float>(high.scale);
        float const m_high = dmin * static_cast<float>(high.min);
        for (int l = 0; l < 32; ++l) out[l] = d_low * static_cast<float>(q[l] & 0x0f) - m_low;
        for (int l = 0; l < 32; ++l) out[l + 32] = d_high * static_cast<float>(q[l] >> 4) - m_high;
        out += 64;
        q += 32;
    }
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ5_K const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    float const dmin = f16_bits_to_float(block.dmin);
    std::uint8_t const* q = block.qs;
    for (int pair = 0; pair < 4; ++pair) {
        ScaleMin const low = scale_min_k4(2 * pair, block.scales);
        ScaleMin const high = scale_min_k4(2 * pair + 1, block.scales);
        float const d_low = d * static_cast<float>(low.scale);
        float const m_low = dmin * static_cast<float>(low.min);
        float const d_high = d * static_cast<float>(high.scale);
        float const m_high = dmin * static_cast<float>(high.min);
        int const bit_low = 2 * pair, bit_high = 2 * pair + 1;  // of qh[l]
        for (int l = 0; l < 32; ++l) {
            int const v = (q[l] & 0x0f) | (((block.qh[l] >> bit_low) & 1) << 4);
            out[l] = d_low * static_cast<float>(v) - m_low;
        }
        for (int l = 0; l < 32; ++l) {
            int const v = (q[l] >> 4) | (((block.qh[l] >> bit_high) & 1) << 4);
            out[l + 32] = d_high * static_cast<float>(v) - m_high;
        }
        out += 64;
        q += 32;
    }
}

TINFER_HOST_DEVICE inline void dequantize_block(BlockQ6_K const& block, float* out) {
    float const d = f16_bits_to_float(block.d);
    std::uint8_t const* ql = block.ql;
    std::uint8_t const* qh = block.qh;
    std::int8_t const* sc = block.scales;
    // Two halves of 128 elements; in each, element l + 32k takes nibble k/2 of ql[l + 32(k%2)]
    // and bits 2k..2k+1 of qh[l].
    for (int half = 0; half < 2; ++half) {
        for (int l = 0; l < 32; ++l) {
            int const is = l / 16;
            int const q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int const q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int const q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int const q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            out[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
            out[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
            out[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
            out[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
        }
        out += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

// Reference quantizers (host only), as ggml's quantize_row_*_ref: the scale comes from the
// block's extreme values, each element rounds to the nearest level.

inline void quantize_block(float const* in, BlockQ4_0& block) {
    float amax = 0, max = 0;  // largest magnitude, with its sign
    for (int j = 0; j < 32; ++j) {
        if (amax < std::fabs(in[j])) {
            amax = std::fabs(in[j]);
            max = in[j];
        }
    }
    float const d = max / -8;
    float const id = d != 0 ? 1.0f / d : 0.0f;
    block.d = float_to_f16_bits(d);
    for (int j = 0; j < 16; ++j) {
        int const low = std::min(15, static_cast<int>(static_cast<std::int8_t>(in[j] * id + 8.5f)));
        int const high =
            std::min(15, static_cast<int>(static_cast<std::int8_t>(in[j + 16] * id + 8.5f)));
        block.qs[j] = static_cast<std::uint8_t>(low | (high << 4));
    }
}

inline void quantize_block(float const* in, BlockQ4_1& block) {
    float const min = *std::min_element(in, in + 32);
    float const max = *std::max_element(in, in + 32);
    float const d = (max - min) / 15;
    float const id = d != 0 ? 1.0f / d : 0.0f;
    block.d = float_to_f16_bits(d);
    block.m = float_to_f16_bits(min);
    for (int j = 0; j < 16; ++j) {
        int const low =
            std::min(15, static_cast<int>(static_cast<std::int8_t>((in[j] - min) * id + 0.5f)));
        int const high = std::min(
            15, static_cast<int>(static_cast<std::int8_t>((in[j + 16] - min) * id + 0.5f)));
        block.qs[j] = static_cast<std::uint8_t>(low | (high << 4));
    }
}

// Packs 32 five-bit values into a Q5 block's qs and qh.
inline void pack_q5(int const* q, std::uint8_t* qs, std::uint8_t* qh) {
    std::uint32_t high_bits = 0;
    for (int j = 0; j < 16; ++j) {
        qs[j] = static_cast<std::uint8_t>((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
        high_bits |= static_cast<std::uint32_t>((q[j] >> 4) & 1) << j;
        high_bits |= static_cast<std::uint32_t>((q[j + 16] >> 4) & 1) << (j + 16);
    }
    for (int b = 0; b < 4; ++b) qh[b] = static_cast<std::uint8_t>(high_bits >> (8 * b));
}

inline void quantize_block(float const* in, BlockQ5_0& block) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        if (amax < std::fabs(in[j])) {
            amax = std::fabs(in[j]);
            max = in[j];
        }
    }
    float const d = max / -16;
    float const id = d != 0 ? 1.0f / d : 0.0f;
    block.d = float_to_f16_bits(d);
    int q[32];
    for (int j = 0; j < 32; ++j)
        q[j] = std::min(31, static_cast<int>(static_cast<std::int8_t>(in[j] * id + 16.5f)));
    pack_q5(q, block.qs, block.qh);
}

inline void quantize_block(float const* in, BlockQ5_1& block) {
    float const min = *std::min_element(in, in + 32);
    float const max = *std::max_element(in, in + 32);
    float const d = (max - min) / 31;
    float const id = d != 0 ? 1.0f / d : 0.0f;
    block.d = float_to_f16_bits(d);
    block.m = float_to_f16_bits(min);
    int q[32];
    for (int j = 0; j < 32; ++j)
        q[j] = std::min(31, static_cast<int>(static_cast<std::uint8_t>((in[j] - min) * id + 0.5f)));
    pack_q5(q, block.qs, block.qh);
}

inline void quantize_block(float const* in, BlockQ8_0& block) {
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(in[j]));
    float const d = amax / 127;
    float const id = d != 0 ? 1.0f / d : 0.0f;
    block.d = float_to_f16_bits(d);
    for (int j = 0; j < 32; ++j) block.qs[j] = static_cast<std::int8_t>(std::round(in[j] * id));
}

}  // namespace tinfer::quant
