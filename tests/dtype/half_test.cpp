// binary16 and bfloat16 (core/half.hpp) against the ldexp / nearest-value reference, over
// every 16-bit pattern, every midpoint, the overflow boundary and a random float sample; and
// against the compiler's _Float16 and CUDA's host conversions where they exist.
#include <tinfer/core/half.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "check_bits.hpp"
#include "float_reference.hpp"
#include "testing.hpp"

#if defined(TINFER_TEST_HAVE_CUDA_FP8)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace ref = tinfer::testing::reference;
using tinfer::testing::count_mismatches;

namespace {

constexpr std::size_t random_float_count = std::size_t{1} << 21;
constexpr std::uint32_t patterns_16 = std::uint32_t{1} << 16;

std::vector<std::uint16_t> every_16_bit_pattern() {
    std::vector<std::uint16_t> out(patterns_16);
    std::iota(out.begin(), out.end(), std::uint16_t{0});
    return out;
}

// Decoded floats compare bitwise (so -0 and subnormals count); a NaN pattern must give a NaN
// of the same sign (half.hpp keeps it). Returns a code the mismatch counter compares: the
// float's bits, or a marker for "a NaN of this sign".
constexpr std::uint64_t nan_marker = std::uint64_t{1} << 40;
std::uint64_t float_identity(float v) {
    if (std::isnan(v)) return nan_marker | (std::signbit(v) ? 1u : 0u);
    return std::bit_cast<std::uint32_t>(v);
}
// CUDA drops the sign of a NaN when it widens a half.
std::uint64_t float_identity_any_nan(float v) {
    return std::isnan(v) ? nan_marker : std::bit_cast<std::uint32_t>(v);
}
std::uint64_t double_identity(double v) {
    if (std::isnan(v)) return nan_marker | (std::signbit(v) ? 1u : 0u);
    return std::bit_cast<std::uint32_t>(static_cast<float>(v));  // every 16-bit value fits
}

// Encoded halves compare bitwise, except that any NaN stands for any NaN input.
template <std::uint32_t ExponentMask, std::uint32_t MantissaMask>
std::uint64_t half_identity(std::uint16_t bits) {
    if ((bits & ExponentMask) == ExponentMask && (bits & MantissaMask) != 0) return nan_marker;
    return bits;
}
auto const f16_identity = half_identity<0x7c00u, 0x03ffu>;
auto const bf16_identity = half_identity<0x7f80u, 0x007fu>;

std::uint64_t expected_encoding(ref::ValueTable const& table, float x) {
    if (std::isnan(x)) return nan_marker;
    return ref::encode(table, x);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(half_conversions)

BOOST_AUTO_TEST_CASE(constant_evaluation) {
    static_assert(tinfer::float_to_f16_bits(1.0f) == 0x3c00u);
    static_assert(tinfer::f16_bits_to_float(0xc000u) == -2.0f);
    static_assert(tinfer::float_to_bf16_bits(1.0f) == 0x3f80u);
    static_assert(tinfer::bf16_bits_to_float(0x4040u) == 3.0f);
    BOOST_TEST(true);
}

BOOST_AUTO_TEST_CASE(f16_decodes_every_pattern) {
    auto const patterns = every_16_bit_pattern();
    BOOST_TEST(
        count_mismatches<std::uint16_t>(
            "f16 decode vs ldexp", patterns,
            [](std::uint16_t b) { return float_identity(tinfer::f16_bits_to_float(b)); },
            [](std::uint16_t b) { return double_identity(ref::decode(ref::binary16, b)); }) == 0u);
}

BOOST_AUTO_TEST_CASE(bf16_decodes_every_pattern) {
    auto const patterns = every_16_bit_pattern();
    BOOST_TEST(
        count_mismatches<std::uint16_t>(
            "bf16 decode vs ldexp", patterns,
            [](std::uint16_t b) { return float_identity(tinfer::bf16_bits_to_float(b)); },
            [](std::uint16_t b) { return double_identity(ref::decode(ref::bfloat16, b)); }) == 0u);
}

BOOST_AUTO_TEST_CASE(every_pattern_round_trips) {
    auto const patterns = every_16_bit_pattern();
    BOOST_TEST(count_mismatches<std::uint16_t>(
                   "f16 encode(decode(bits))", patterns,
                   [](std::uint16_t b) {
                       return f16_identity(tinfer::float_to_f16_bits(tinfer::f16_bits_to_float(b)));
                   },
                   [](std::uint16_t b) { return f16_identity(b); }) == 0u);
    BOOST_TEST(count_mismatches<std::uint16_t>(
                   "bf16 encode(decode(bits))", patterns,
                   [](std::uint16_t b) {
                       return bf16_identity(
                           tinfer::float_to_bf16_bits(tinfer::bf16_bits_to_float(b)));
                   },
                   [](std::uint16_t b) { return bf16_identity(b); }) == 0u);
}

BOOST_AUTO_TEST_CASE(f16_encodes_like_nearest_value_reference) {
    ref::ValueTable const table(ref::binary16);
    auto rng = tinfer::testing::seeded_rng(0xf16);
    auto const inputs = ref::encoder_inputs(table, random_float_count, rng());
    BOOST_TEST(count_mismatches<float>(
                   "f16 encode vs reference", inputs,
                   [](float x) { return f16_identity(tinfer::float_to_f16_bits(x)); },
                   [&](float x) { return expected_encoding(table, x); }) == 0u);
}

BOOST_AUTO_TEST_CASE(bf16_encodes_like_nearest_value_reference) {
    ref::ValueTable const table(ref::bfloat16);
    auto rng = tinfer::testing::seeded_rng(0xbf16);
    auto const inputs = ref::encoder_inputs(table, random_float_count, rng());
    BOOST_TEST(count_mismatches<float>(
                   "bf16 encode vs reference", inputs,
                   [](float x) { return bf16_identity(tinfer::float_to_bf16_bits(x)); },
                   [&](float x) { return expected_encoding(table, x); }) == 0u);
}

BOOST_AUTO_TEST_CASE(boundaries) {
    // Largest finite, the tie just past it (to even: infinity), smallest subnormal, the tie
    // below it (to even: zero), and signs of zero.
    BOOST_TEST(tinfer::float_to_f16_bits(65504.0f) == 0x7bffu);
    BOOST_TEST(tinfer::float_to_f16_bits(65519.996f) == 0x7bffu);
    BOOST_TEST(tinfer::float_to_f16_bits(65520.0f) == 0x7c00u);
    BOOST_TEST(tinfer::float_to_f16_bits(-INFINITY) == 0xfc00u);
    BOOST_TEST(tinfer::float_to_f16_bits(std::ldexp(1.0f, -24)) == 0x0001u);
    BOOST_TEST(tinfer::float_to_f16_bits(std::ldexp(1.0f, -25)) == 0x0000u);
    BOOST_TEST(tinfer::float_to_f16_bits(std::ldexp(3.0f, -25)) == 0x0002u);
    BOOST_TEST(tinfer::float_to_f16_bits(-0.0f) == 0x8000u);
    BOOST_TEST(tinfer::float_to_bf16_bits(std::bit_cast<float>(0x7f7f8000u)) == 0x7f80u);
    BOOST_TEST(tinfer::float_to_bf16_bits(std::bit_cast<float>(0x7f7f7fffu)) == 0x7f7fu);
    BOOST_TEST(tinfer::float_to_bf16_bits(std::bit_cast<float>(0x00008000u)) == 0x0000u);
    BOOST_TEST(tinfer::float_to_bf16_bits(std::bit_cast<float>(0x00018000u)) == 0x0002u);
    BOOST_TEST(tinfer::float_to_bf16_bits(-0.0f) == 0x8000u);
    BOOST_TEST(std::isnan(tinfer::f16_bits_to_float(tinfer::float_to_f16_bits(NAN))));
    BOOST_TEST(std::isnan(tinfer::bf16_bits_to_float(tinfer::float_to_bf16_bits(-NAN))));
}

#if defined(__FLT16_MAX__)
// The compiler's own binary16 (hardware F16C / AVX512-FP16 or libgcc) as a second opinion.
BOOST_AUTO_TEST_CASE(f16_agrees_with_compiler_float16) {
    auto const patterns = every_16_bit_pattern();
    BOOST_TEST(count_mismatches<std::uint16_t>(
                   "f16 decode vs _Float16", patterns,
                   [](std::uint16_t b) { return float_identity(tinfer::f16_bits_to_float(b)); },
                   [](std::uint16_t b) {
                       return float_identity(static_cast<float>(std::bit_cast<_Float16>(b)));
                   }) == 0u);
    ref::ValueTable const table(ref::binary16);
    auto rng = tinfer::testing::seeded_rng(0xf16f16);
    auto const inputs = ref::encoder_inputs(table, random_float_count, rng());
    BOOST_TEST(count_mismatches<float>(
                   "f16 encode vs _Float16", inputs,
                   [](float x) { return f16_identity(tinfer::float_to_f16_bits(x)); },
                   [](float x) {
                       return f16_identity(std::bit_cast<std::uint16_t>(static_cast<_Float16>(x)));
                   }) == 0u);
}
#endif

#if defined(TINFER_TEST_HAVE_CUDA_FP8)
// CUDA's host implementations: what device code using cuda_fp16.h / cuda_bf16.h would store.
BOOST_AUTO_TEST_CASE(agrees_with_cuda_host_conversions) {
    auto const patterns = every_16_bit_pattern();
    BOOST_TEST(
        count_mismatches<std::uint16_t>(
            "f16 decode vs __half2float", patterns,
            [](std::uint16_t b) { return float_identity_any_nan(tinfer::f16_bits_to_float(b)); },
            [](std::uint16_t b) {
                __half_raw raw;
                raw.x = b;
                return float_identity_any_nan(__half2float(__half(raw)));
            }) == 0u);
    BOOST_TEST(count_mismatches<std::uint16_t>(
                   "bf16 decode vs __bfloat162float", patterns,
                   [](std::uint16_t b) { return float_identity(tinfer::bf16_bits_to_float(b)); },
                   [](std::uint16_t b) {
                       __nv_bfloat16_raw raw;
                       raw.x = b;
                       return float_identity(__bfloat162float(__nv_bfloat16(raw)));
                   }) == 0u);

    auto rng = tinfer::testing::seeded_rng(0xc0da16);
    ref::ValueTable const f16_table(ref::binary16), bf16_table(ref::bfloat16);
    auto const f16_inputs = ref::encoder_inputs(f16_table, random_float_count, rng());
    BOOST_TEST(count_mismatches<float>(
                   "f16 encode vs __float2half_rn", f16_inputs,
                   [](float x) { return f16_identity(tinfer::float_to_f16_bits(x)); },
                   [](float x) {
                       return f16_identity(static_cast<__half_raw>(__float2half_rn(x)).x);
                   }) == 0u);
    auto const bf16_inputs = ref::encoder_inputs(bf16_table, random_float_count, rng());
    BOOST_TEST(count_mismatches<float>(
                   "bf16 encode vs __float2bfloat16_rn", bf16_inputs,
                   [](float x) { return bf16_identity(tinfer::float_to_bf16_bits(x)); },
                   [](float x) {
                       return bf16_identity(
                           static_cast<__nv_bfloat16_raw>(__float2bfloat16_rn(x)).x);
                   }) == 0u);
}
#endif

BOOST_AUTO_TEST_SUITE_END()
