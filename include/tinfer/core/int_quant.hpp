#pragma once
// Integer quantization of floats, shared by host code and CUDA kernels (KV-cache codecs):
//   int8: symmetric, one float scale:          x ~ scale * q,         q in [-127, 127]
//   int4: asymmetric, scale and zero per group: x ~ scale * q + zero, q in [0, 15],
//         packed two per byte, the even element in the low nibble.
// Rounding is to nearest, ties to even, done on the float's bits so that host and device give
// bitwise equal codes whatever floating-point contraction the compilers choose.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include <tinfer/core/host_device.hpp>

namespace tinfer {

namespace int_quant_detail {

// Nearest integer to `value`, ties to even, for |value| < 2^31 (callers clamp first).
TINFER_HOST_DEVICE constexpr std::int32_t round_half_even(float value) {
    constexpr int mantissa_bits = std::numeric_limits<float>::digits - 1;
    constexpr int bias = std::numeric_limits<float>::max_exponent - 1;
    constexpr std::uint32_t mantissa_mask = (1u << mantissa_bits) - 1u;
    constexpr std::uint32_t exponent_mask = 2u * bias + 1u;
    constexpr int sign_shift = 31;
    std::uint32_t const bits = std::bit_cast<std::uint32_t>(value);
    bool const negative = (bits >> sign_shift) != 0;
    int const exponent = static_cast<int>((bits >> mantissa_bits) & exponent_mask) - bias;
    if (exponent < -1) return 0;  // |value| < 1/2
    std::uint32_t const significand = (bits & mantissa_mask) | (1u << mantissa_bits);
    std::uint32_t magnitude;
    if (exponent >= mantissa_bits) {
        magnitude = significand << (exponent - mantissa_bits);  // already an integer
    } else {
        std::uint32_t const shift = static_cast<std::uint32_t>(mantissa_bits - exponent);
        magnitude = significand >> shift;
        std::uint32_t const rest = significand & ((1u << shift) - 1u);
        std::uint32_t const halfway = 1u << (shift - 1u);
        if (rest > halfway || (rest == halfway && (magnitude & 1u))) ++magnitude;
    }
    auto const result = static_cast<std::int32_t>(magnitude);
    return negative ? -result : result;
}

TINFER_HOST_DEVICE constexpr float clamp(float value, float lo, float hi) {
    return value < lo ? lo : (value > hi ? hi : value);
}

}  // namespace int_quant_detail

// ---- int8, symmetric ----

inline constexpr std::int8_t int8_max_code = 127;  // -128 is unused so the range is symmetric

// The scale that maps max_abs (the largest |x| to be represented) onto code 127. It is never
// below the smallest normal float, so its inverse stays finite (an all-zero input gets that
// floor too, and quantizes to zeros). max_abs must be finite.
TINFER_HOST_DEVICE constexpr float int8_scale_for(float max_abs) {
    float const scale = max_abs / static_cast<float>(int8_max_code);
    constexpr float smallest_scale = std::numeric_limits<float>::min();
    return scale > smallest_scale ? scale : smallest_scale;
}

// q = clamp(round_half_even(x * inv_scale), -127, 127); NaN becomes 0.
TINFER_HOST_DEVICE constexpr std::int8_t quantize_int8(float x, float inv_scale) {
    constexpr auto limit = static_cast<float>(int8_max_code);
    float const scaled = x * inv_scale;
    if (scaled != scaled) return 0;
    return static_cast<std::int8_t>(
        int_quant_detail::round_half_even(int_quant_detail::clamp(scaled, -limit, limit)));
}

TINFER_HOST_DEVICE constexpr float dequantize_int8(std::int8_t q, float scale) {
    return static_cast<float>(q) * scale;
}

// ---- int4, asymmetric per group ----

inline constexpr int int4_group_size = 32;
inline constexpr std::uint8_t int4_max_code = 15;
inline constexpr int int4_bits = 4;
inline constexpr std::uint8_t nibble_mask = (1u << int4_bits) - 1u;

// One group's parameters: x ~ scale * q + zero, so `zero` is the value code 0 stands for.
struct Int4Group {
    float scale;
    float zero;
};

// Parameters that spread [lo, hi] (a group's minimum and maximum, finite) over codes 0..15:
// code 0 is lo exactly and code 15 is hi up to rounding. The scale is never below the
// smallest normal float, so its inverse stays finite; a constant group therefore gets that
// floor, every element is code 0 and decodes to lo exactly.
TINFER_HOST_DEVICE constexpr Int4Group int4_group_params(float lo, float hi) {
    float const scale = (hi - lo) / static_cast<float>(int4_max_code);
    constexpr float smallest_scale = std::numeric_limits<float>::min();
    return {.scale = scale > smallest_scale ? scale : smallest_scale, .zero = lo};
}

// Parameters of the n values at x (normally n == int4_group_size), from their min and max.
TINFER_HOST_DEVICE constexpr Int4Group int4_group_params(float const* x, int n) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; ++i) {
        lo = x[i] < lo ? x[i] : lo;
        hi = x[i] > hi ? x[i] : hi;
    }
    return int4_group_params(lo, hi);
}

// q = clamp(round_half_even((x - zero) * inv_scale), 0, 15), inv_scale = 1 / group.scale;
// NaN becomes 0.
TINFER_HOST_DEVICE constexpr std::uint8_t quantize_int4(float x, float zero, float inv_scale) {
    float const scaled = (x - zero) * inv_scale;
    if (scaled != scaled) return 0;
    return static_cast<std::uint8_t>(int_quant_detail::round_half_even(
        int_quant_detail::clamp(scaled, 0.0f, static_cast<float>(int4_max_code))));
}

TINFER_HOST_DEVICE inline float dequantize_int4(std::uint8_t q, Int4Group group) {
    return fused_multiply_add(static_cast<float>(q), group.scale, group.zero);
}

// Two 4-bit codes in one byte: element 2i in the low nibble, element 2i+1 in the high one.
TINFER_HOST_DEVICE constexpr std::uint8_t pack_nibbles(std::uint8_t even, std::uint8_t odd) {
    return static_cast<std::uint8_t>((even & nibble_mask) | ((odd & nibble_mask) << int4_bits));
}

// Element `index` (0 = low nibble, 1 = high nibble) of a packed byte.
TINFER_HOST_DEVICE constexpr std::uint8_t unpack_nibble(std::uint8_t packed, int index) {
    return static_cast<std::uint8_t>((packed >> (index * int4_bits)) & nibble_mask);
}

}  // namespace tinfer
