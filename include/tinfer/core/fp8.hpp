#pragma once
// 8-bit floats of the OCP FP8 formats, as CUDA's cuda_fp8.h defines them:
//   e4m3 ("FN"): bias 7, no infinities, only S.1111.111 is NaN, largest finite 448;
//   e5m2: IEEE-like, bias 15, infinities and NaNs, largest finite 57344.
// Encoding rounds to nearest, ties to even, and saturates like __NV_SATFINITE: a finite
// overflow or an infinity becomes the largest finite value of its sign, and any NaN becomes
// the positive canonical NaN 0x7f (the sign of a NaN is dropped, as cuda_fp8.h does).
#include <bit>
#include <cstdint>

#include <tinfer/core/half.hpp>
#include <tinfer/core/host_device.hpp>

namespace tinfer {

// The bit layout of one FP8 format and the constants derived from it.
template <int ExponentBits, int MantissaBits, bool HasInfinity>
struct Fp8Format {
    static_assert(1 + ExponentBits + MantissaBits == 8, "an FP8 format has 8 bits");

    static constexpr int exponent_bits = ExponentBits;
    static constexpr int mantissa_bits = MantissaBits;
    static constexpr int bias = (1 << (ExponentBits - 1)) - 1;
    static constexpr std::uint32_t mantissa_mask = (1u << MantissaBits) - 1u;
    static constexpr std::uint32_t exponent_field_max = (1u << ExponentBits) - 1u;
    static constexpr std::uint8_t sign_bit = 0x80u;
    static constexpr std::uint8_t magnitude_mask = 0x7fu;
    // Canonical NaN: all exponent and mantissa bits set, sign clear (cuda_fp8.h's choice).
    static constexpr std::uint8_t canonical_nan = magnitude_mask;
    // IEEE-like formats reserve the top exponent for Inf/NaN; e4m3 reserves only S.1111.111.
    static constexpr std::uint8_t max_finite_bits =
        HasInfinity
            ? static_cast<std::uint8_t>(((exponent_field_max - 1u) << MantissaBits) | mantissa_mask)
            : static_cast<std::uint8_t>(canonical_nan - 1u);
    static constexpr std::uint8_t infinity_bits =
        static_cast<std::uint8_t>(exponent_field_max << MantissaBits);  // only if HasInfinity
    static constexpr bool has_infinity = HasInfinity;
    // Exponents of the largest finite value and of the smallest normal value, unbiased.
    static constexpr int max_exponent = static_cast<int>(max_finite_bits >> MantissaBits) - bias;
    static constexpr int min_normal_exponent = 1 - bias;
    // Subnormals are integer multiples of this power of two.
    static constexpr int subnormal_exponent = min_normal_exponent - MantissaBits;
};

using Fp8E4M3Format = Fp8Format<4, 3, false>;
using Fp8E5M2Format = Fp8Format<5, 2, true>;

namespace fp8_detail {

inline constexpr int float_mantissa_bits = 23;
inline constexpr int float_bias = 127;
inline constexpr std::uint32_t float_sign_bit = 0x80000000u;
inline constexpr std::uint32_t float_magnitude_mask = 0x7fffffffu;
inline constexpr std::uint32_t float_infinity_bits = 0x7f800000u;
inline constexpr std::uint32_t float_mantissa_mask = (1u << float_mantissa_bits) - 1u;
inline constexpr std::uint32_t float_implicit_bit = 1u << float_mantissa_bits;
// Moves the sign between a float's bit 31 and an FP8's bit 7.
inline constexpr int sign_shift = 24;
// cuda_fp8.h decodes a NaN through the canonical half NaN; we return the same float.
inline constexpr std::uint16_t f16_canonical_nan = 0x7fffu;

TINFER_HOST_DEVICE constexpr float power_of_two(int exponent) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(exponent + float_bias)
                                << float_mantissa_bits);
}

// Rounds `significand` (an integer) right by `shift` bits, to nearest, ties to even.
TINFER_HOST_DEVICE constexpr std::uint32_t shift_right_rne(std::uint32_t significand,
                                                           std::uint32_t shift) {
    std::uint32_t result = significand >> shift;
    std::uint32_t const rest = significand & ((1u << shift) - 1u);
    std::uint32_t const halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (result & 1u))) ++result;
    return result;
}

template <class Format>
TINFER_HOST_DEVICE constexpr std::uint8_t encode(float value) {
    std::uint32_t const x = std::bit_cast<std::uint32_t>(value);
    std::uint8_t const sign = static_cast<std::uint8_t>((x & float_sign_bit) >> sign_shift);
    std::uint32_t const abs = x & float_magnitude_mask;
    if (abs > float_infinity_bits) return Format::canonical_nan;

    auto const saturated = static_cast<std::uint8_t>(sign | Format::max_finite_bits);
    int const exponent = static_cast<int>(abs >> float_mantissa_bits) - float_bias;
    // At twice the largest binade everything (Inf included) rounds past the largest finite.
    if (exponent > Format::max_exponent) return saturated;

    constexpr auto dropped_bits =
        static_cast<std::uint32_t>(float_mantissa_bits - Format::mantissa_bits);
    std::uint32_t magnitude;
    if (exponent >= Format::min_normal_exponent) {
        // Normal: rebias the exponent; a carry out of the mantissa bumps the exponent, which is
        // the correct rounding up to the next binade.
        std::uint32_t const rebiased =
            (static_cast<std::uint32_t>(exponent + Format::bias) << float_mantissa_bits) |
            (abs & float_mantissa_mask);
        magnitude = shift_right_rne(rebiased, dropped_bits);
    } else {
        // Subnormal or zero: the value in units of 2^subnormal_exponent, rounded.
        std::uint32_t const shift =
            dropped_bits + static_cast<std::uint32_t>(Format::min_normal_exponent - exponent);
        // Below half the smallest subnormal (float subnormals included): rounds to zero.
        if (shift > float_mantissa_bits + 1u) return sign;
        magnitude = shift_right_rne((abs & float_mantissa_mask) | float_implicit_bit, shift);
    }
    if (magnitude > Format::max_finite_bits) return saturated;
    return static_cast<std::uint8_t>(sign | magnitude);
}

template <class Format>
TINFER_HOST_DEVICE constexpr bool is_nan_bits(std::uint8_t bits) {
    std::uint32_t const abs = bits & Format::magnitude_mask;
    if constexpr (Format::has_infinity) return abs > Format::infinity_bits;
    return abs == Format::canonical_nan;
}

// Without branches (each case computed, one kept by masks), so that the FP8 KV codecs' row
// loop vectorizes: they decode every key and value attention reads. Normals rebias the
// exponent; subnormals are mantissa x 2^subnormal_exponent, exact in float and normal there;
// a NaN gives the canonical half NaN's float (sign dropped), an infinity its signed float.
template <class Format>
TINFER_HOST_DEVICE constexpr float decode(std::uint8_t bits) {
    std::uint32_t const sign = static_cast<std::uint32_t>(bits & Format::sign_bit) << sign_shift;
    std::uint32_t const exponent_field = (bits & Format::magnitude_mask) >> Format::mantissa_bits;
    std::uint32_t const mantissa = bits & Format::mantissa_mask;
    std::uint32_t const normal =
        ((exponent_field - Format::bias + float_bias) << float_mantissa_bits) |
        (mantissa << (float_mantissa_bits - Format::mantissa_bits));
    std::uint32_t const subnormal = std::bit_cast<std::uint32_t>(
        static_cast<float>(static_cast<int>(mantissa)) * power_of_two(Format::subnormal_exponent));
    std::uint32_t const is_subnormal = bit_select::all_ones_if(exponent_field == 0);
    std::uint32_t magnitude = (normal & ~is_subnormal) | (subnormal & is_subnormal);
    if constexpr (Format::has_infinity) {
        std::uint32_t const is_infinity =
            bit_select::all_ones_if(exponent_field == Format::exponent_field_max);
        magnitude = (magnitude & ~is_infinity) | (float_infinity_bits & is_infinity);
    }
    std::uint32_t const is_nan = bit_select::all_ones_if(is_nan_bits<Format>(bits));
    std::uint32_t const nan = std::bit_cast<std::uint32_t>(f16_bits_to_float(f16_canonical_nan));
    return std::bit_cast<float>(((sign | magnitude) & ~is_nan) | (nan & is_nan));
}

}  // namespace fp8_detail

// One FP8 value held as its bits: trivially copyable, one byte, usable in device code.
template <class Format>
class Fp8 {
  public:
    using format = Format;

    Fp8() = default;

    TINFER_HOST_DEVICE static constexpr Fp8 from_bits(std::uint8_t bits) {
        Fp8 result;
        result.bits_ = bits;
        return result;
    }
    TINFER_HOST_DEVICE static constexpr Fp8 from_float(float value) {
        return from_bits(fp8_detail::encode<Format>(value));
    }

    TINFER_HOST_DEVICE constexpr std::uint8_t bits() const { return bits_; }
    TINFER_HOST_DEVICE constexpr float to_float() const {
        return fp8_detail::decode<Format>(bits_);
    }
    // Every FP8 value is exact in binary16; NaN becomes CUDA's canonical half NaN 0x7fff.
    TINFER_HOST_DEVICE constexpr std::uint16_t to_f16_bits() const {
        return float_to_f16_bits(to_float());
    }
    TINFER_HOST_DEVICE constexpr bool is_nan() const {
        return fp8_detail::is_nan_bits<Format>(bits_);
    }

    TINFER_HOST_DEVICE static constexpr Fp8 max_finite() {
        return from_bits(Format::max_finite_bits);
    }
    TINFER_HOST_DEVICE static constexpr Fp8 canonical_nan() {
        return from_bits(Format::canonical_nan);
    }

    // Bitwise equality (so NaN == NaN and +0 != -0): this is a storage type, not arithmetic.
    friend constexpr bool operator==(Fp8, Fp8) = default;

  private:
    std::uint8_t bits_;
};

using Fp8E4M3 = Fp8<Fp8E4M3Format>;
using Fp8E5M2 = Fp8<Fp8E5M2Format>;

static_assert(sizeof(Fp8E4M3) == 1 && sizeof(Fp8E5M2) == 1);
static_assert(Fp8E4M3::max_finite().to_float() == 448.0f);
static_assert(Fp8E5M2::max_finite().to_float() == 57344.0f);

}  // namespace tinfer
