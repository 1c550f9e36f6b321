#pragma once
// A weight matrix as GGUF stores it, viewed in place (in the file's mapping): `rows` output
// features, each a contiguous run of `cols` input features (GGUF's ne0) in the encoding `type`.
// Kernels read it block by block; no float copy of a whole matrix is ever made.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include <tinfer/core/dispatch.hpp>
#include <tinfer/core/dtype.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/core/half.hpp>
#include <tinfer/quant/quant_blocks.hpp>

namespace tinfer::kernels {

// How the bytes at `data` are arranged: as the GGUF stores the rows, or repacked into 16-row
// strips for int8 products (kernels/int8_dot.hpp; the types has_int8_dot names).
enum class WeightLayout { gguf, int8_strips };

struct WeightMatrix {
    DType type = DType::f32;
    int rows = 0;  // output features
    int cols = 0;  // input features: the contiguous row length
    std::byte const* data = nullptr;
    WeightLayout layout = WeightLayout::gguf;
};

constexpr bool is_plain_weight_type(DType t) {
    return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

// Elements that share one encoded unit (a quantization block; 1 for plain types).
template <DType T>
constexpr int block_elements() {
    if constexpr (is_plain_weight_type(T)) {
        return 1;
    } else {
        return quant::BlockOfT<T>::elements;
    }
}

template <DType T>
constexpr std::size_t block_bytes() {
    if constexpr (T == DType::f32) {
        return sizeof(float);
    } else if constexpr (T == DType::f16 || T == DType::bf16) {
        return sizeof(std::uint16_t);
    } else {
        return sizeof(quant::BlockOfT<T>);
    }
}

template <DType T>
constexpr std::size_t row_bytes(int cols) {
    return static_cast<std::size_t>(cols / block_elements<T>()) * block_bytes<T>();
}

template <DType T>
std::byte const* row_pointer(WeightMatrix const& w, int row) {
    return w.data + static_cast<std::size_t>(row) * row_bytes<T>(w.cols);
}

// IEEE half to float without branches, so a loop of them vectorizes (core/half.hpp's
// conversion normalises subnormals in a loop). Bitwise equal to f16_bits_to_float for every
// input, NaN payloads included.
inline float f16_to_float_branchless(std::uint16_t h) {
    constexpr std::uint32_t exponent_mask = 0x7c00u << 13;  // the half's exponent, moved up
    constexpr std::uint32_t rebias = (127u - 15u) << 23;
    std::uint32_t bits = (static_cast<std::uint32_t>(h) & 0x7fffu) << 13;
    std::uint32_t const exponent = bits & exponent_mask;
    bits += rebias;
    // Inf/NaN: move the exponent the rest of the way to all ones.
    bits += exponent == exponent_mask ? rebias : 0u;
    // Zero/subnormal: let the FPU normalise by subtracting the implicit one it now carries.
    float const subnormal =
        std::bit_cast<float>(bits + (1u << 23)) - std::bit_cast<float>(113u << 23);
    std::uint32_t const magnitude = exponent == 0 ? std::bit_cast<std::uint32_t>(subnormal) : bits;
    return std::bit_cast<float>(magnitude | (static_cast<std::uint32_t>(h) & 0x8000u) << 16);
}

// Decodes one row of `cols` elements to float.
template <DType T>
void dequantize_row(std::byte const* row, int cols, float* out) {
    if constexpr (T == DType::f32) {
        std::memcpy(out, row, static_cast<std::size_t>(cols) * sizeof(float));
    } else if constexpr (T == DType::f16 || T == DType::bf16) {
        auto const* bits = reinterpret_cast<std::uint16_t const*>(row);
#pragma omp simd simdlen(16)
        for (int k = 0; k < cols; ++k) {
            if constexpr (T == DType::f16) {
                out[k] = f16_to_float_branchless(bits[k]);
            } else {
                out[k] = std::bit_cast<float>(static_cast<std::uint32_t>(bits[k]) << 16);
            }
        }
    } else if constexpr (T == DType::q4_0 || T == DType::q4_1 || T == DType::q8_0) {
        // The formats of quant_blocks.hpp, decoded with straight-line loops over whole blocks
        // (and branch-free scales) that the compiler turns into vector code: the same values.
        // simdlen(16): left to itself GCC decodes 16 nibbles 4 at a time, which halved decode
        // speed.
        using Block = quant::BlockOfT<T>;
        auto const* blocks = reinterpret_cast<Block const*>(row);
        int const count = cols / Block::elements;
        for (int b = 0; b < count; ++b) {
            Block const& block = blocks[b];
            float* values = out + b * Block::elements;
            float const d = f16_to_float_branchless(block.d);
            if constexpr (T == DType::q8_0) {
#pragma omp simd simdlen(16)
                for (int j = 0; j < 32; ++j) values[j] = static_cast<float>(block.qs[j]) * d;
            } else {
                float const offset = [&] {
                    if constexpr (T == DType::q4_1) {
                        return f16_to_float_branchless(block.m);
                    } else {
                        return 0.0f;
                    }
                }();
                constexpr int bias = T == DType::q4_0 ? 8 : 0;
#pragma omp simd simdlen(16)
                for (int j = 0; j < 16; ++j) {
                    values[j] = static_cast<float>((block.qs[j] & 0x0f) - bias) * d + offset;
                }
#pragma omp simd simdlen(16)
                for (int j = 0; j < 16; ++j) {
                    values[j + 16] = static_cast<float>((block.qs[j] >> 4) - bias) * d + offset;
                }
            }
        }
    } else {
        using Block = quant::BlockOfT<T>;
        auto const* blocks = reinterpret_cast<Block const*>(row);
        int const count = cols / Block::elements;
        for (int b = 0; b < count; ++b)
            quant::dequantize_block(blocks[b], out + b * Block::elements);
    }
}

// Weight encodings the host kernels take at run time (a model's token embedding may be stored
// differently from its layers): each is one instantiation of linear/embedding.
template <class Body>
decltype(auto) dispatch_weight_type(DType type, Body&& body) {
    return dispatch<DType::q4_1, DType::q8_0, DType::q4_0, DType::f16, DType::bf16, DType::f32,
                    DType::q5_0, DType::q5_1, DType::q4_k, DType::q6_k, DType::q5_k, DType::q2_k,
                    DType::q3_k>(
        type, std::forward<Body>(body), [](DType a, DType b) { return a == b; }, "weight dtype");
}

// A matrix whose rows are not a whole number of blocks cannot be read block by block.
template <DType T>
void check_weight_matrix(WeightMatrix const& w, char const* name) {
    if (w.type != T) {
        throw Error(std::string(name) + ": stored as " + std::string(name_of(w.type)) +
                    ", kernel compiled for " + std::string(name_of(T)));
    }
    if (w.cols % block_elements<T>() != 0) {
        throw Error(std::string(name) + ": row length " + std::to_string(w.cols) +
                    " is not a multiple of " + std::to_string(block_elements<T>()) + " (" +
                    std::string(name_of(T)) + " block)");
    }
}

}  // namespace tinfer::kernels
