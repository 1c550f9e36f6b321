#pragma once
// Random weight matrices in every encoding linear and embedding take, with an independent
// float64 decoding written from the GGUF block table (docs/SMOLLM2_GGUF_FACTS.md), not from the
// library's dequantizers.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <tinfer/core/half.hpp>
#include <tinfer/kernels/weight_matrix.hpp>
#include <tinfer/quant/quant_blocks.hpp>

#include "testing.hpp"

namespace tinfer::testing {

struct TestWeights {
    std::vector<std::byte> bytes;
    std::vector<double> decoded;  // [rows][cols]
    kernels::WeightMatrix matrix;
};

inline double f16_value(std::byte const* p) {
    std::uint16_t bits;
    std::memcpy(&bits, p, 2);
    return f16_bits_to_float(bits);
}

// Decodes one stored block (or element, for plain types) by the spec's formulas.
inline void decode_reference(DType type, std::byte const* p, double* out) {
    auto const* u = reinterpret_cast<std::uint8_t const*>(p);
    switch (type) {
        case DType::f32: {
            float f;
            std::memcpy(&f, p, 4);
            out[0] = f;
            return;
        }
        case DType::f16:
            out[0] = f16_value(p);
            return;
        case DType::bf16: {
            std::uint16_t bits;
            std::memcpy(&bits, p, 2);
            std::uint32_t const wide = static_cast<std::uint32_t>(bits) << 16;
            float f;
            std::memcpy(&f, &wide, 4);
            out[0] = f;
            return;
        }
        case DType::q4_0: {
            double const d = f16_value(p);
            for (int j = 0; j < 16; ++j) {
                out[j] = ((u[2 + j] & 15) - 8) * d;
                out[j + 16] = ((u[2 + j] >> 4) - 8) * d;
            }
            return;
        }
        case DType::q4_1: {
            double const d = f16_value(p), m = f16_value(p + 2);
            for (int j = 0; j < 16; ++j) {
                out[j] = (u[4 + j] & 15) * d + m;
                out[j + 16] = (u[4 + j] >> 4) * d + m;
            }
            return;
        }
        case DType::q8_0: {
            double const d = f16_value(p);
            for (int j = 0; j < 32; ++j) out[j] = static_cast<std::int8_t>(u[2 + j]) * d;
            return;
        }
        case DType::q5_0:
        case DType::q5_1: {
            bool const minimum = type == DType::q5_1;
            double const d = f16_value(p), m = minimum ? f16_value(p + 2) : 0.0;
            std::uint8_t const* qh = u + (minimum ? 4 : 2);
            std::uint8_t const* qs = qh + 4;
            std::uint32_t const high =
                qh[0] | qh[1] << 8 | qh[2] << 16 | static_cast<std::uint32_t>(qh[3]) << 24;
            for (int j = 0; j < 32; ++j) {
                int const q = (j < 16 ? qs[j] & 15 : qs[j - 16] >> 4) | ((high >> j) & 1) << 4;
                out[j] = minimum ? q * d + m : (q - 16) * d;
            }
            return;
        }
        case DType::q4_k:
        case DType::q5_k: {
            // d, dmin, 12 bytes of 6-bit scales and minimums, [qh 32], qs 128.
            bool const fifth = type == DType::q5_k;
            double const d = f16_value(p), dmin = f16_value(p + 2);
            std::uint8_t const* sc = u + 4;
            std::uint8_t const* qh = u + 16;
            std::uint8_t const* qs = u + (fifth ? 48 : 16);
            for (int j = 0; j < 8; ++j) {
                int const scale = j < 4 ? sc[j] & 63 : (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
                int const min = j < 4 ? sc[j + 4] & 63 : (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
                for (int l = 0; l < 32; ++l) {
                    int q = j % 2 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 15;
                    if (fifth) q |= ((qh[l] >> j) & 1) << 4;
                    out[32 * j + l] = d * scale * q - dmin * min;
                }
            }
            return;
        }
        case DType::q6_k: {
            // ql 128, qh 64, 16 int8 scales, d. Element i: half h = i / 128, m = i % 128 / 32,
            // l = i % 32: nibble m / 2 of ql[64h + 32(m % 2) + l], bits 2m.. of qh[32h + l].
            double const d = f16_value(p + 208);
            for (int i = 0; i < 256; ++i) {
                int const h = i / 128, m = i % 128 / 32, l = i % 32;
                int const low = u[64 * h + 32 * (m % 2) + l] >> (4 * (m / 2)) & 15;
                int const high = u[128 + 32 * h + l] >> (2 * m) & 3;
                out[i] = d * static_cast<std::int8_t>(u[192 + i / 16]) * ((low | high << 4) - 32);
            }
            return;
        }
        default:
            BOOST_FAIL("no reference decoding for " << name_of(type));
    }
}

// A K-quant block with random quants and sub-block scales (the library has no K-quant
// quantizer), its super-block scales chosen so that the weights span about [-scale, scale].
template <class Block>
void random_k_block(std::mt19937_64& rng, Block& block, float scale) {
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> unit(0.5f, 1.0f);
    auto* bytes = reinterpret_cast<std::uint8_t*>(&block);
    for (std::size_t i = 0; i < sizeof block; ++i) bytes[i] = static_cast<std::uint8_t>(byte(rng));
    if constexpr (requires { block.dmin; }) {
        // w = d s q - dmin m with 6-bit s and m and q below 2^bits.
        float const levels = requires {
            block.qh;
        }
        ? 31.0f : 15.0f;
        block.d = float_to_f16_bits(scale / (63.0f * levels) * unit(rng));
        block.dmin = float_to_f16_bits(scale / 63.0f * unit(rng));
    } else {
        // Q6_K: w = d c (q - 32), c in -128..127.
        block.d =
            float_to_f16_bits(scale / (128.0f * 32.0f) * unit(rng) * (byte(rng) & 1 ? 1 : -1));
    }
}

template <DType T>
TestWeights make_weights(std::mt19937_64& rng, int rows, int cols, float scale = 1.0f) {
    constexpr int elements = kernels::block_elements<T>();
    constexpr std::size_t bytes_per_block = kernels::block_bytes<T>();
    BOOST_REQUIRE(cols % elements == 0);
    TestWeights w;
    std::vector<float> const values =
        random_floats(rng, static_cast<std::size_t>(rows) * cols, -scale, scale);
    std::size_t const blocks = static_cast<std::size_t>(rows) * cols / elements;
    w.bytes.resize(blocks * bytes_per_block);
    for (std::size_t b = 0; b < blocks; ++b) {
        std::byte* out = w.bytes.data() + b * bytes_per_block;
        float const* in = values.data() + b * elements;
        if constexpr (T == DType::f32) {
            std::memcpy(out, in, 4);
        } else if constexpr (T == DType::f16) {
            std::uint16_t const bits = float_to_f16_bits(in[0]);
            std::memcpy(out, &bits, 2);
        } else if constexpr (T == DType::bf16) {
            std::uint16_t const bits = float_to_bf16_bits(in[0]);
            std::memcpy(out, &bits, 2);
        } else if constexpr (elements == quant::k_block_elements) {
            quant::BlockOfT<T> block;
            random_k_block(rng, block, scale);
            std::memcpy(out, &block, sizeof block);
        } else {
            quant::BlockOfT<T> block;
            quant::quantize_block(in, block);
            std::memcpy(out, &block, sizeof block);
        }
    }
    w.decoded.resize(static_cast<std::size_t>(rows) * cols);
    for (std::size_t b = 0; b < blocks; ++b)
        decode_reference(T, w.bytes.data() + b * bytes_per_block, w.decoded.data() + b * elements);
    w.matrix = {T, rows, cols, w.bytes.data()};
    return w;
}

}  // namespace tinfer::testing
