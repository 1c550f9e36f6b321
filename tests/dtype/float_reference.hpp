#pragma once
// An independent reference for small binary float formats, written from the definitions and
// sharing no code with include/tinfer/core: decoding by std::ldexp from the bit fields,
// encoding as "the nearest of all finite values, ties to the even code" found by searching a
// table of every value. Also the float inputs that exercise an encoder. No Boost here: the
// CUDA test uses it too.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace tinfer::testing::reference {

enum class Specials {
    ieee,      // top exponent: mantissa 0 is infinity, otherwise NaN
    only_nan,  // no infinities; only all-ones exponent and mantissa is NaN (fp8 e4m3)
};
enum class Overflow {
    to_infinity,      // IEEE round to nearest: past the largest finite (by rounding) is Inf
    saturate_finite,  // __NV_SATFINITE: clamps to the largest finite of that sign
};

struct FloatFormat {
    int exponent_bits;
    int mantissa_bits;
    Specials specials;
    Overflow overflow;

    int total_bits() const { return 1 + exponent_bits + mantissa_bits; }
    std::uint32_t sign_bit() const { return 1u << (exponent_bits + mantissa_bits); }
    int bias() const { return (1 << (exponent_bits - 1)) - 1; }
    std::uint32_t pattern_count() const { return 1u << total_bits(); }
};

inline constexpr FloatFormat binary16{5, 10, Specials::ieee, Overflow::to_infinity};
inline constexpr FloatFormat bfloat16{8, 7, Specials::ieee, Overflow::to_infinity};
inline constexpr FloatFormat fp8_e4m3{4, 3, Specials::only_nan, Overflow::saturate_finite};
inline constexpr FloatFormat fp8_e5m2{5, 2, Specials::ieee, Overflow::saturate_finite};

// The value of a bit pattern; a NaN pattern gives a NaN of its sign.
inline double decode(FloatFormat const& f, std::uint32_t bits) {
    bool const negative = (bits & f.sign_bit()) != 0;
    double const nan =
        std::copysign(std::numeric_limits<double>::quiet_NaN(), negative ? -1.0 : 1.0);
    std::uint32_t const exponent_max = (1u << f.exponent_bits) - 1;
    std::uint32_t const exponent = (bits >> f.mantissa_bits) & exponent_max;
    std::uint32_t const mantissa = bits & ((1u << f.mantissa_bits) - 1);
    double magnitude;
    if (f.specials == Specials::ieee && exponent == exponent_max) {
        if (mantissa != 0) return nan;
        magnitude = std::numeric_limits<double>::infinity();
    } else if (f.specials == Specials::only_nan && exponent == exponent_max &&
               mantissa == (1u << f.mantissa_bits) - 1) {
        return nan;
    } else if (exponent == 0) {
        magnitude = std::ldexp(static_cast<double>(mantissa), 1 - f.bias() - f.mantissa_bits);
    } else {
        magnitude = std::ldexp(static_cast<double>(mantissa + (1u << f.mantissa_bits)),
                               static_cast<int>(exponent) - f.bias() - f.mantissa_bits);
    }
    return negative ? -magnitude : magnitude;
}

// Every finite non-negative value, indexed by its code (codes ascend with the value), and
// the value one step past the largest, where rounding overflows.
struct ValueTable {
    FloatFormat format;
    std::vector<double> values;
    double past_max;

    explicit ValueTable(FloatFormat const& f) : format(f) {
        for (std::uint32_t code = 0; code < f.sign_bit(); ++code) {
            double const v = decode(f, code);
            if (!std::isfinite(v)) break;
            values.push_back(v);
        }
        double const top_ulp = values.back() - values[values.size() - 2];
        past_max = values.back() + top_ulp;
    }
    std::uint32_t max_finite_code() const { return static_cast<std::uint32_t>(values.size() - 1); }
};

// The expected encoding of a non-NaN x: nearest value, ties to the even code; the virtual
// code past the largest finite value takes part in the tie-break, as IEEE defines overflow.
inline std::uint32_t encode(ValueTable const& t, double x) {
    std::uint32_t const sign = std::signbit(x) ? t.format.sign_bit() : 0u;
    long double const a = std::fabs(static_cast<long double>(x));
    auto const n = static_cast<std::uint32_t>(t.values.size());
    std::uint32_t code;
    if (a >= t.past_max) {
        code = n;
    } else {
        auto const above =
            std::upper_bound(t.values.begin(), t.values.end(), static_cast<double>(a));
        auto const upper =
            static_cast<std::uint32_t>(above - t.values.begin());  // >= 1: values[0] is 0
        long double const lo = t.values[upper - 1];
        long double const hi = upper < n ? t.values[upper] : t.past_max;
        long double const below_distance = a - lo, above_distance = hi - a;
        if (below_distance < above_distance)
            code = upper - 1;
        else if (above_distance < below_distance)
            code = upper;
        else
            code = (upper % 2 == 0) ? upper : upper - 1;
    }
    if (code == n) {
        code = t.format.overflow == Overflow::saturate_finite
                   ? t.max_finite_code()
                   : (((1u << t.format.exponent_bits) - 1) << t.format.mantissa_bits);
    }
    return sign | code;
}

// Floats that exercise an encoder into format t: every representable value, every midpoint
// between neighbours and the floats just either side of it, the overflow boundary, beyond
// it, infinities, NaNs, float subnormals, and `random_count` random floats (half of them any
// bit pattern, half with exponents near the format's range), all with both signs.
inline std::vector<float> encoder_inputs(ValueTable const& t, std::size_t random_count,
                                         std::uint64_t seed) {
    std::vector<float> out;
    auto add_both_signs = [&](float v) {
        out.push_back(v);
        out.push_back(-v);
    };
    auto add_with_neighbours = [&](float v) {
        add_both_signs(v);
        add_both_signs(std::nextafter(v, 0.0f));
        add_both_signs(std::nextafter(v, std::numeric_limits<float>::infinity()));
    };
    for (std::size_t i = 0; i < t.values.size(); ++i) {
        auto const v = static_cast<float>(t.values[i]);
        if (static_cast<double>(v) != t.values[i]) continue;  // bf16 and f16 values all fit
        add_with_neighbours(v);
        double const next = i + 1 < t.values.size() ? t.values[i + 1] : t.past_max;
        double const midpoint = (t.values[i] + next) / 2;
        if (static_cast<double>(static_cast<float>(midpoint)) == midpoint)
            add_with_neighbours(static_cast<float>(midpoint));
    }
    if (t.past_max <= std::numeric_limits<float>::max()) {  // bf16's is 2^128, past float
        auto const past_max = static_cast<float>(t.past_max);
        add_with_neighbours(past_max);
        add_both_signs(2 * past_max);
    }
    float const inf = std::numeric_limits<float>::infinity();
    for (float v : {std::numeric_limits<float>::max(), inf,
                    std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
                    std::nextafter(std::numeric_limits<float>::min(), 0.0f)})
        add_both_signs(v);
    for (std::uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7fa5a5a5u, 0x7fc00001u})
        add_both_signs(std::bit_cast<float>(nan_bits));

    std::mt19937_64 rng(seed);
    int const min_exponent = 1 - t.format.bias() - t.format.mantissa_bits;
    int const max_exponent = static_cast<int>(std::ilogb(t.past_max));
    std::uniform_int_distribution<int> exponent_near(std::max(min_exponent - 4, -126),
                                                     std::min(max_exponent + 2, 127));
    std::uniform_int_distribution<std::uint32_t> any_bits;
    constexpr int float_mantissa_bits = std::numeric_limits<float>::digits - 1;
    constexpr int float_bias = std::numeric_limits<float>::max_exponent - 1;
    constexpr std::uint32_t float_exponent_field = 0x7f800000u;
    for (std::size_t i = 0; i < random_count; ++i) {
        std::uint32_t bits = any_bits(rng);
        if (i % 2 == 1) {
            auto const biased = static_cast<std::uint32_t>(exponent_near(rng) + float_bias);
            bits = (bits & ~float_exponent_field) | (biased << float_mantissa_bits);
        }
        out.push_back(std::bit_cast<float>(bits));
    }
    return out;
}

}  // namespace tinfer::testing::reference
