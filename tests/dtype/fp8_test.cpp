// fp8 e4m3 and e5m2 (core/fp8.hpp) against the ldexp / nearest-value reference over all 256
// patterns, every midpoint, the saturation boundary and a random float sample; and against
// CUDA's own host implementation (cuda_fp8.h) where its headers exist.
#include <tinfer/core/fp8.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "check_bits.hpp"
#include "float_reference.hpp"
#include "testing.hpp"

#if defined(TINFER_TEST_HAVE_CUDA_FP8)
#include <cuda_fp8.h>
#endif

namespace ref = tinfer::testing::reference;
using tinfer::Fp8E4M3;
using tinfer::Fp8E5M2;
using tinfer::testing::count_mismatches;

namespace {

constexpr std::size_t random_float_count = std::size_t{1} << 21;
// cuda_fp8.h turns every NaN into this positive pattern, in both formats.
constexpr std::uint8_t canonical_nan_bits = 0x7f;
// ... and decodes it through the canonical binary16 NaN.
constexpr std::uint16_t f16_canonical_nan_bits = 0x7fff;

std::vector<std::uint8_t> every_8_bit_pattern() {
    std::vector<std::uint8_t> out(std::numeric_limits<std::uint8_t>::max() + 1);
    std::iota(out.begin(), out.end(), std::uint8_t{0});
    return out;
}

template <class Fp8>
struct Case;
template <>
struct Case<Fp8E4M3> {
    static constexpr ref::FloatFormat format = ref::fp8_e4m3;
    static constexpr float max_finite = 448.0f;
#if defined(TINFER_TEST_HAVE_CUDA_FP8)
    static constexpr __nv_fp8_interpretation_t cuda = __NV_E4M3;
#endif
};
template <>
struct Case<Fp8E5M2> {
    static constexpr ref::FloatFormat format = ref::fp8_e5m2;
    static constexpr float max_finite = 57344.0f;
#if defined(TINFER_TEST_HAVE_CUDA_FP8)
    static constexpr __nv_fp8_interpretation_t cuda = __NV_E5M2;
#endif
};
using Fp8Types = std::tuple<Fp8E4M3, Fp8E5M2>;

std::uint64_t decoded_bits(float v) {
    return std::bit_cast<std::uint32_t>(v);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(fp8_conversions)

BOOST_AUTO_TEST_CASE_TEMPLATE(storage_is_one_trivial_byte, Fp8, Fp8Types) {
    static_assert(sizeof(Fp8) == 1 && std::is_trivially_copyable_v<Fp8> &&
                  std::is_trivially_default_constructible_v<Fp8>);
    static_assert(Fp8::from_float(1.0f).to_float() == 1.0f);  // constant evaluation works
    BOOST_TEST(Fp8::max_finite().to_float() == Case<Fp8>::max_finite);
    BOOST_TEST(Fp8::canonical_nan().bits() == canonical_nan_bits);
    BOOST_TEST(Fp8::from_bits(0xa5).bits() == 0xa5);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(decodes_every_pattern, Fp8, Fp8Types) {
    auto const patterns = every_8_bit_pattern();
    ref::ValueTable const f16_table(ref::binary16);
    float const canonical_nan = std::bit_cast<float>(0x7fffe000u);  // f16 0x7fff widened
    BOOST_TEST(count_mismatches<std::uint8_t>(
                   "fp8 decode vs ldexp", patterns,
                   [](std::uint8_t b) { return decoded_bits(Fp8::from_bits(b).to_float()); },
                   [&](std::uint8_t b) {
                       double const v = ref::decode(Case<Fp8>::format, b);
                       return decoded_bits(std::isnan(v) ? canonical_nan : static_cast<float>(v));
                   }) == 0u);
    BOOST_TEST(
        count_mismatches<std::uint8_t>(
            "fp8 is_nan", patterns, [](std::uint8_t b) { return Fp8::from_bits(b).is_nan(); },
            [](std::uint8_t b) { return std::isnan(ref::decode(Case<Fp8>::format, b)); }) == 0u);
    BOOST_TEST(count_mismatches<std::uint8_t>(
                   "fp8 to_f16_bits", patterns,
                   [](std::uint8_t b) { return Fp8::from_bits(b).to_f16_bits(); },
                   [&](std::uint8_t b) {
                       double const v = ref::decode(Case<Fp8>::format, b);
                       return std::isnan(v) ? std::uint32_t{f16_canonical_nan_bits}
                                            : ref::encode(f16_table, v);
                   }) == 0u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(every_pattern_round_trips, Fp8, Fp8Types) {
    auto const patterns = every_8_bit_pattern();
    BOOST_TEST(
        count_mismatches<std::uint8_t>(
            "fp8 encode(decode(bits))", patterns,
            [](std::uint8_t b) { return Fp8::from_float(Fp8::from_bits(b).to_float()).bits(); },
            [](std::uint8_t b) {
                ref::FloatFormat const& f = Case<Fp8>::format;
                double const v = ref::decode(f, b);
                if (std::isnan(v)) return canonical_nan_bits;
                if (!std::isinf(v)) return b;
                // e5m2's infinities saturate to the largest finite value
                return static_cast<std::uint8_t>((b & f.sign_bit()) |
                                                 ref::ValueTable(f).max_finite_code());
            }) == 0u);
}

BOOST_AUTO_TEST_CASE_TEMPLATE(encodes_like_nearest_value_reference, Fp8, Fp8Types) {
    ref::ValueTable const table(Case<Fp8>::format);
    auto rng = tinfer::testing::seeded_rng(0xf8 + Case<Fp8>::format.exponent_bits);
    auto const inputs = ref::encoder_inputs(table, random_float_count, rng());
    BOOST_TEST(
        count_mismatches<float>(
            "fp8 encode vs reference", inputs, [](float x) { return Fp8::from_float(x).bits(); },
            [&](float x) { return std::isnan(x) ? canonical_nan_bits : ref::encode(table, x); }) ==
        0u);
}

BOOST_AUTO_TEST_CASE(saturation_and_ties_by_hand) {
    // e4m3: 448 is the largest; 464 is the tie with the would-be 480 (odd mantissa 111), so it
    // goes down to 448; anything above saturates, infinities too.
    BOOST_TEST(Fp8E4M3::from_float(464.0f).bits() == 0x7e);
    BOOST_TEST(Fp8E4M3::from_float(std::nextafter(464.0f, 1000.0f)).bits() == 0x7e);
    BOOST_TEST(Fp8E4M3::from_float(1e30f).bits() == 0x7e);
    BOOST_TEST(Fp8E4M3::from_float(-INFINITY).bits() == 0xfe);
    BOOST_TEST(Fp8E4M3::from_float(-NAN).bits() == 0x7f);
    // Smallest subnormal 2^-9; its half ties to zero (even), just above rounds up.
    BOOST_TEST(Fp8E4M3::from_float(std::ldexp(1.0f, -9)).bits() == 0x01);
    BOOST_TEST(Fp8E4M3::from_float(std::ldexp(1.0f, -10)).bits() == 0x00);
    BOOST_TEST(Fp8E4M3::from_float(-std::ldexp(1.0f, -10)).bits() == 0x80);
    BOOST_TEST(Fp8E4M3::from_float(std::nextafter(std::ldexp(1.0f, -10), 1.0f)).bits() == 0x01);
    // Largest subnormal 7 * 2^-9 and rounding up into the smallest normal 2^-6.
    BOOST_TEST(Fp8E4M3::from_float(7.5f * std::ldexp(1.0f, -9)).bits() == 0x08);
    // e5m2: largest 57344; 61440 ties towards 65536 (infinity), so it saturates.
    BOOST_TEST(Fp8E5M2::from_float(61440.0f).bits() == 0x7b);
    BOOST_TEST(Fp8E5M2::from_float(std::nextafter(61440.0f, 0.0f)).bits() == 0x7b);
    BOOST_TEST(Fp8E5M2::from_float(INFINITY).bits() == 0x7b);
    BOOST_TEST(Fp8E5M2::from_float(-INFINITY).bits() == 0xfb);
    BOOST_TEST(Fp8E5M2::from_float(NAN).bits() == 0x7f);
    BOOST_TEST(std::isinf(Fp8E5M2::from_bits(0xfc).to_float()));
    BOOST_TEST(Fp8E5M2::from_float(std::ldexp(1.0f, -16)).bits() == 0x01);
    BOOST_TEST(Fp8E5M2::from_float(std::ldexp(1.0f, -17)).bits() == 0x00);
    BOOST_TEST(Fp8E5M2::from_float(std::ldexp(3.0f, -17)).bits() == 0x02);
}

#if defined(TINFER_TEST_HAVE_CUDA_FP8)
// The toolkit's host path of __nv_cvt_float_to_fp8 / __nv_cvt_fp8_to_halfraw: bit for bit,
// NaNs included.
BOOST_AUTO_TEST_CASE_TEMPLATE(agrees_with_cuda_fp8_host_implementation, Fp8, Fp8Types) {
    auto const patterns = every_8_bit_pattern();
    BOOST_TEST(count_mismatches<std::uint8_t>(
                   "fp8 decode vs __nv_cvt_fp8_to_halfraw", patterns,
                   [](std::uint8_t b) { return Fp8::from_bits(b).to_f16_bits(); },
                   [](std::uint8_t b) { return __nv_cvt_fp8_to_halfraw(b, Case<Fp8>::cuda).x; }) ==
               0u);
    ref::ValueTable const table(Case<Fp8>::format);
    auto rng = tinfer::testing::seeded_rng(0xc0da8 + Case<Fp8>::format.exponent_bits);
    auto const inputs = ref::encoder_inputs(table, random_float_count, rng());
    BOOST_TEST(count_mismatches<float>(
                   "fp8 encode vs __nv_cvt_float_to_fp8(__NV_SATFINITE)", inputs,
                   [](float x) { return Fp8::from_float(x).bits(); },
                   [](float x) {
                       return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, Case<Fp8>::cuda);
                   }) == 0u);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
