// int8 (symmetric) and int4 (asymmetric, grouped) quantization of core/int_quant.hpp: error
// bounds derived from the scale, ties to even against std::nearbyint, saturation, NaN, and
// nibble packing over every byte.
#include <tinfer/core/int_quant.hpp>

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "testing.hpp"

namespace {

constexpr float eps = std::numeric_limits<float>::epsilon();
constexpr int cases = 20000;
constexpr float int8_limit = tinfer::int8_max_code;
constexpr float int4_limit = tinfer::int4_max_code;

// Scales spread over many binades, so the bounds are checked where relative errors bite.
float random_scale(std::mt19937_64& rng) {
    std::uniform_real_distribution<float> exponent(-30.0f, 30.0f);
    return std::exp2(exponent(rng));
}

// The reference rounding: the C library's nearbyint in the default to-nearest-even mode.
double nearest_even(double v) {
    BOOST_REQUIRE(std::fegetround() == FE_TONEAREST);
    return std::nearbyint(v);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(int_quantization)

BOOST_AUTO_TEST_CASE(int8_round_trip_error_is_half_a_step) {
    auto rng = tinfer::testing::seeded_rng(8);
    double worst = 0;
    for (int c = 0; c < cases; ++c) {
        float const scale = random_scale(rng);
        float const inv_scale = 1.0f / scale;
        std::uniform_real_distribution<float> inside(-int8_limit * scale, int8_limit * scale);
        float const x = inside(rng);
        std::int8_t const q = tinfer::quantize_int8(x, inv_scale);
        double const error = std::abs(double{x} - tinfer::dequantize_int8(q, scale));
        // Exact rounding errs by at most scale/2; 1/scale, x*inv_scale and q*scale each add a
        // relative eps/2 on a quantity of at most 127 steps.
        double const bound = scale * (0.5 + 2 * int8_limit * eps);
        worst = std::max(worst, error / bound);
    }
    BOOST_TEST_MESSAGE("int8 worst error / bound " << worst);
    BOOST_TEST(worst <= 1.0);
    BOOST_TEST(worst > 0.5);  // the sample does reach near-half-step errors
}

BOOST_AUTO_TEST_CASE(int8_rounds_half_to_even) {
    // With power-of-two scales x * inv_scale is exact, so codes must equal nearbyint's.
    auto rng = tinfer::testing::seeded_rng(88);
    std::uniform_real_distribution<float> inside(-int8_limit, int8_limit);
    for (int exponent : {-20, -3, 0, 5, 20}) {
        float const scale = std::ldexp(1.0f, exponent);
        float const inv_scale = std::ldexp(1.0f, -exponent);
        for (int k = -tinfer::int8_max_code; k < tinfer::int8_max_code; ++k) {
            float const tie = (static_cast<float>(k) + 0.5f) * scale;
            BOOST_TEST(tinfer::quantize_int8(tie, inv_scale) == nearest_even(k + 0.5));
        }
        for (int c = 0; c < cases; ++c) {
            float const steps = inside(rng);
            BOOST_TEST(tinfer::quantize_int8(steps * scale, inv_scale) == nearest_even(steps));
        }
    }
}

BOOST_AUTO_TEST_CASE(int8_saturates_and_maps_nan_to_zero) {
    float const inv_scale = 4.0f;
    for (float x : {127.5f / 4, 32.0f, 1e30f, std::numeric_limits<float>::infinity()}) {
        BOOST_TEST(tinfer::quantize_int8(x, inv_scale) == 127);
        BOOST_TEST(tinfer::quantize_int8(-x, inv_scale) == -127);  // never -128
    }
    BOOST_TEST(tinfer::quantize_int8(std::nanf(""), inv_scale) == 0);
    BOOST_TEST(tinfer::quantize_int8(-0.0f, inv_scale) == 0);
}

BOOST_AUTO_TEST_CASE(int8_scale_maps_max_abs_to_the_top_code) {
    auto rng = tinfer::testing::seeded_rng(127);
    for (int c = 0; c < cases; ++c) {
        float const max_abs = random_scale(rng) * int8_limit;
        float const scale = tinfer::int8_scale_for(max_abs);
        BOOST_TEST(scale == max_abs / int8_limit);
        BOOST_TEST(tinfer::quantize_int8(max_abs, 1.0f / scale) == 127);
        BOOST_TEST(tinfer::quantize_int8(-max_abs, 1.0f / scale) == -127);
    }
    // An all-zero (or vanishing) input still gets a scale with a finite inverse.
    for (float max_abs : {0.0f, std::numeric_limits<float>::denorm_min(), 1e-40f}) {
        float const scale = tinfer::int8_scale_for(max_abs);
        BOOST_TEST(std::isfinite(1.0f / scale));
        BOOST_TEST(tinfer::quantize_int8(0.0f, 1.0f / scale) == 0);
        BOOST_TEST(tinfer::quantize_int8(max_abs, 1.0f / scale) ==
                   nearest_even(double{max_abs} / scale));
    }
    static_assert(tinfer::int8_scale_for(254.0f) == 2.0f);
}

BOOST_AUTO_TEST_CASE(int4_group_round_trip_error_is_half_a_step) {
    auto rng = tinfer::testing::seeded_rng(4);
    double worst = 0;
    std::vector<float> group(tinfer::int4_group_size);
    for (int c = 0; c < cases; ++c) {
        float const spread = random_scale(rng);
        std::uniform_real_distribution<float> offset_dist(-100 * spread, 100 * spread);
        float const offset = offset_dist(rng);
        std::uniform_real_distribution<float> value(offset - spread, offset + spread);
        for (float& x : group) x = value(rng);
        auto const params = tinfer::int4_group_params(group.data(), tinfer::int4_group_size);
        float const lo = *std::min_element(group.begin(), group.end());
        float const hi = *std::max_element(group.begin(), group.end());
        BOOST_TEST(params.zero == lo);
        BOOST_TEST(params.scale == (hi - lo) / int4_limit);  // the documented rule
        float const inv_scale = 1.0f / params.scale;
        for (float const x : group) {
            std::uint8_t const q = tinfer::quantize_int4(x, params.zero, inv_scale);
            BOOST_TEST(q <= tinfer::int4_max_code);
            double const error = std::abs(double{x} - tinfer::dequantize_int4(q, params));
            // Exact rounding errs by at most scale/2; x - zero, 1/scale and the product each
            // add a relative eps/2 on at most 15 steps, and the fused decode adds eps/2 of the
            // result, whose magnitude is at most max(|lo|, |hi|) plus a step.
            double const magnitude = std::max(std::abs(lo), std::abs(hi)) + params.scale;
            double const bound = params.scale * (0.5 + 2 * int4_limit * eps) + eps * magnitude;
            worst = std::max(worst, error / bound);
        }
        BOOST_TEST(tinfer::quantize_int4(lo, params.zero, inv_scale) == 0);
        BOOST_TEST(tinfer::quantize_int4(hi, params.zero, inv_scale) == tinfer::int4_max_code);
        BOOST_TEST(tinfer::dequantize_int4(0, params) == lo);
    }
    BOOST_TEST_MESSAGE("int4 worst error / bound " << worst);
    BOOST_TEST(worst <= 1.0);
    BOOST_TEST(worst > 0.4);
}

BOOST_AUTO_TEST_CASE(int4_rounds_half_to_even_and_clamps) {
    tinfer::Int4Group const unit{.scale = 0.25f, .zero = -1.0f};  // power of two: exact steps
    float const inv_scale = 4.0f;
    for (int k = 0; k < tinfer::int4_max_code; ++k) {
        float const tie = unit.zero + (static_cast<float>(k) + 0.5f) * unit.scale;
        BOOST_TEST(tinfer::quantize_int4(tie, unit.zero, inv_scale) == nearest_even(k + 0.5));
        BOOST_TEST(tinfer::dequantize_int4(static_cast<std::uint8_t>(k), unit) ==
                   unit.zero + static_cast<float>(k) * unit.scale);
    }
    BOOST_TEST(tinfer::quantize_int4(-1e30f, unit.zero, inv_scale) == 0);
    BOOST_TEST(tinfer::quantize_int4(1e30f, unit.zero, inv_scale) == tinfer::int4_max_code);
    BOOST_TEST(tinfer::quantize_int4(std::numeric_limits<float>::infinity(), unit.zero,
                                     inv_scale) == tinfer::int4_max_code);
    BOOST_TEST(tinfer::quantize_int4(std::nanf(""), unit.zero, inv_scale) == 0);
}

BOOST_AUTO_TEST_CASE(int4_constant_group_decodes_exactly) {
    std::vector<float> const group(tinfer::int4_group_size, -3.75f);
    auto const params = tinfer::int4_group_params(group.data(), tinfer::int4_group_size);
    BOOST_TEST(std::isfinite(1.0f / params.scale));
    std::uint8_t const q = tinfer::quantize_int4(group[0], params.zero, 1.0f / params.scale);
    BOOST_TEST(q == 0);
    BOOST_TEST(tinfer::dequantize_int4(q, params) == -3.75f);
}

BOOST_AUTO_TEST_CASE(nibbles_pack_every_byte) {
    constexpr int byte_values = 256;
    for (int b = 0; b < byte_values; ++b) {
        auto const byte = static_cast<std::uint8_t>(b);
        std::uint8_t const even = tinfer::unpack_nibble(byte, 0);
        std::uint8_t const odd = tinfer::unpack_nibble(byte, 1);
        BOOST_TEST(even == (b & 0x0f));  // element 2i is the low nibble
        BOOST_TEST(odd == (b >> 4));
        BOOST_TEST(tinfer::pack_nibbles(even, odd) == byte);
    }
    // Bits above a code's four are dropped rather than spilling into the neighbour.
    BOOST_TEST(tinfer::pack_nibbles(0xf3, 0x00) == 0x03);
    BOOST_TEST(tinfer::pack_nibbles(0x00, 0x1c) == 0xc0);
    static_assert(tinfer::pack_nibbles(1, 2) == 0x21);
}

BOOST_AUTO_TEST_SUITE_END()
