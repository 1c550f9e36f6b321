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
#include <tinfer/format/quant_blocks.hpp>
#include <tinfer/kernels/weight_matrix.hpp>

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
        default:
            BOOST_FAIL("no reference decoding for " << name_of(type));
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
