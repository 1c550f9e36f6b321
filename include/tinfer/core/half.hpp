#pragma once
// IEEE binary16 and bfloat16 stored as raw bits, converted with round-to-nearest-even.
#include <bit>
#include <cstdint>

#include <tinfer/core/host_device.hpp>

namespace tinfer {

namespace bit_select {
// All 32 bits set where `condition` holds, else none: a select by masks, which GCC 12
// vectorizes where it leaves a chain of ?: as branches (and the loop around it scalar).
TINFER_HOST_DEVICE constexpr std::uint32_t all_ones_if(bool condition) {
    return 0u - static_cast<std::uint32_t>(condition);
}
}  // namespace bit_select

// Without branches, so that a loop over a KV row vectorizes (the fp16 KV cache decodes every
// key and value it attends to through this): normals by rebiasing the exponent, subnormals
// (m x 2^-24) by an exact int-to-float conversion and a power-of-two scale whose result is a
// normal float (so flush-to-zero modes cannot touch it), Inf and NaN with their payload.
TINFER_HOST_DEVICE constexpr float f16_bits_to_float(std::uint16_t h) {
    std::uint32_t const sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t const magnitude = h & 0x7fffu;
    std::uint32_t const normal = (magnitude << 13) + (112u << 23);
    std::uint32_t const special = (magnitude << 13) | 0x7f800000u;
    std::uint32_t const subnormal =
        std::bit_cast<std::uint32_t>(static_cast<float>(static_cast<int>(magnitude)) * 0x1p-24f);
    std::uint32_t const is_normal = bit_select::all_ones_if(magnitude >= 0x0400u);
    std::uint32_t const is_special = bit_select::all_ones_if(magnitude >= 0x7c00u);
    std::uint32_t const bits =
        (special & is_special) | (normal & is_normal & ~is_special) | (subnormal & ~is_normal);
    return std::bit_cast<float>(sign | bits);
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
