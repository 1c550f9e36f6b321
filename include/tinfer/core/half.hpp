#pragma once
// IEEE binary16 and bfloat16 stored as raw bits, converted with round-to-nearest-even.
#include <bit>
#include <cstdint>

#include <tinfer/core/host_device.hpp>

namespace tinfer {

TINFER_HOST_DEVICE constexpr float f16_bits_to_float(std::uint16_t h) {
    std::uint32_t const sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    if (exponent == 0x1f) {  // Inf or NaN: keep the payload
        return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    }
    if (exponent == 0) {
        if (mantissa == 0) return std::bit_cast<float>(sign);
        // Subnormal half: normalise into a float.
        int shift = 0;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            ++shift;
        }
        mantissa &= 0x3ffu;
        exponent = static_cast<std::uint32_t>(1 - shift);
    }
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

TINFER_HOST_DEVICE constexpr std::uint16_t float_to_f16_bits(float f) {
    std::uint32_t const x = std::bit_cast<std::uint32_t>(f);
    std::uint16_t const sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    std::uint32_t const abs = x & 0x7fffffffu;
    if (abs > 0x7f800000u)
        return static_cast<std::uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds to Inf
    if (abs < 0x38800000u) {
        // Result is subnormal (or zero): value / 2^-24, rounded to nearest even.
        if (abs < 0x33000000u) return sign;  // below half the smallest subnormal
        std::uint32_t const exponent = abs >> 23;
        std::uint32_t const mantissa = (abs & 0x7fffffu) | 0x800000u;
        std::uint32_t const shift = 126u - exponent;  // 14 + (113 - exponent) - 1
        std::uint32_t result = mantissa >> shift;
        std::uint32_t const rest = mantissa & ((1u << shift) - 1u);
        std::uint32_t const halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (result & 1u))) ++result;
        return static_cast<std::uint16_t>(sign | result);
    }
    // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
    std::uint32_t const rebased = abs - (112u << 23);
    std::uint32_t result = rebased >> 13;
    std::uint32_t const rest = rebased & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
    return static_cast<std::uint16_t>(sign | result);
}

TINFER_HOST_DEVICE constexpr float bf16_bits_to_float(std::uint16_t b) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

TINFER_HOST_DEVICE constexpr std::uint16_t float_to_bf16_bits(float f) {
    std::uint32_t const x = std::bit_cast<std::uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
    std::uint32_t const rounding = 0x7fffu + ((x >> 16) & 1u);
    return static_cast<std::uint16_t>((x + rounding) >> 16);
}

}  // namespace tinfer
