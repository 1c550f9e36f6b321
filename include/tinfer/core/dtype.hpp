#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tinfer {

// Element types of weights, activations and the KV cache. Quantized block formats (GGUF's)
// are listed too so a ModelConfig can name its weight type.
enum class DType : std::uint8_t {
    f32,
    f16,
    bf16,
    fp8_e4m3,
    fp8_e5m2,
    int8,
    int4,
    q4_0,
    q4_1,
    q5_0,
    q5_1,
    q8_0,
    q2_k,
    q3_k,
    q4_k,
    q5_k,
    q6_k,
};

constexpr std::string_view name_of(DType t) {
    switch (t) {
        case DType::f32:
            return "f32";
        case DType::f16:
            return "f16";
        case DType::bf16:
            return "bf16";
        case DType::fp8_e4m3:
            return "fp8_e4m3";
        case DType::fp8_e5m2:
            return "fp8_e5m2";
        case DType::int8:
            return "int8";
        case DType::int4:
            return "int4";
        case DType::q4_0:
            return "q4_0";
        case DType::q4_1:
            return "q4_1";
        case DType::q5_0:
            return "q5_0";
        case DType::q5_1:
            return "q5_1";
        case DType::q8_0:
            return "q8_0";
        case DType::q2_k:
            return "q2_k";
        case DType::q3_k:
            return "q3_k";
        case DType::q4_k:
            return "q4_k";
        case DType::q5_k:
            return "q5_k";
        case DType::q6_k:
            return "q6_k";
    }
    return "?";
}

// Storage of one element in bits (block formats: bits per element including their scales).
constexpr double bits_per_element(DType t) {
    switch (t) {
        case DType::f32:
            return 32;
        case DType::f16:
        case DType::bf16:
            return 16;
        case DType::fp8_e4m3:
        case DType::fp8_e5m2:
        case DType::int8:
            return 8;
        case DType::int4:
            return 4;
        case DType::q4_0:
            return 18.0 * 8 / 32;
        case DType::q4_1:
            return 20.0 * 8 / 32;
        case DType::q5_0:
            return 22.0 * 8 / 32;
        case DType::q5_1:
            return 24.0 * 8 / 32;
        case DType::q8_0:
            return 34.0 * 8 / 32;
        case DType::q2_k:
            return 84.0 * 8 / 256;
        case DType::q3_k:
            return 110.0 * 8 / 256;
        case DType::q4_k:
            return 144.0 * 8 / 256;
        case DType::q5_k:
            return 176.0 * 8 / 256;
        case DType::q6_k:
            return 210.0 * 8 / 256;
    }
    return 0;
}

// Bytes one element occupies in a KV cache (int4 packs two per byte).
constexpr double kv_bytes_per_element(DType t) {
    return bits_per_element(t) / 8;
}

}  // namespace tinfer
