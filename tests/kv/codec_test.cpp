// KV codecs: storage size per vector (compile time), and round-trip error within a bound
// derived from each format, checked element by element on seeded random vectors of several
// magnitudes. Each quantizing codec must also come close to its bound somewhere, so a codec
// that stored floats unchanged (or a bound far too loose) would not pass unnoticed.
#include <boost/test/unit_test.hpp>

#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/kv/codec.hpp>
#include <tinfer/kv/codec_pairs.hpp>

#include "testing.hpp"

using namespace tinfer;
using namespace tinfer::kv;

namespace {

// Storage per vector, from the formats: codes plus one float scale per vector (fp8, int8) or
// a float scale and zero point per group of 32 (int4).
static_assert(Fp32Codec::vector_bytes<64> == 64 * 4);
static_assert(Fp16Codec::vector_bytes<64> == 64 * 2);
static_assert(Bf16Codec::vector_bytes<128> == 128 * 2);
static_assert(Fp8E4M3Codec::vector_bytes<64> == 64 + 4);
static_assert(Fp8E5M2Codec::vector_bytes<128> == 128 + 4);
static_assert(Int8Codec::vector_bytes<64> == 64 + 4);
static_assert(Int4Codec::vector_bytes<64> == 64 / 2 + 2 * 8);
static_assert(Int4Codec::vector_bytes<128> == 128 / 2 + 4 * 8);

static_assert(KvCodec<Fp32Codec, 64> && KvCodec<Fp16Codec, 64> && KvCodec<Bf16Codec, 64> &&
              KvCodec<Fp8E4M3Codec, 64> && KvCodec<Fp8E5M2Codec, 64> && KvCodec<Int8Codec, 64> &&
              KvCodec<Int4Codec, 128>);
static_assert(!KvCodec<int, 64> && !KvCodec<float, 64>);

constexpr double eps32 = std::numeric_limits<float>::epsilon();  // 2^-23
// Slack for the float arithmetic around the format's own rounding (a division or a
// multiplication by the scale, each within half an ulp): a few float epsilons of |x|.
constexpr double arithmetic_rtol = 4 * eps32;

// Worst error of a format with `mantissa_bits` explicit bits, round to nearest, whose
// subnormals are multiples of 2^subnormal_exponent; everything in units of `unit` (the scale).
double float_format_bound(double x, int mantissa_bits, int subnormal_exponent, double unit) {
    double const normal = std::abs(x) * std::ldexp(1.0, -(mantissa_bits + 1));
    double const subnormal = unit * std::ldexp(1.0, subnormal_exponent - 1);
    return std::max(normal, subnormal) + arithmetic_rtol * std::abs(x);
}

double max_abs(std::vector<float> const& v, std::size_t first, std::size_t n) {
    double m = 0;
    for (std::size_t i = first; i < first + n; ++i) m = std::max(m, std::abs(double(v[i])));
    return m;
}

// Per-element bound of each codec on vector x (HeadDim elements).
struct Fp16Bound {
    double operator()(std::vector<float> const& x, std::size_t i) const {
        return float_format_bound(x[i], 10, -24, 1.0);
    }
};
struct Bf16Bound {
    double operator()(std::vector<float> const& x, std::size_t i) const {
        return float_format_bound(x[i], 7, -133, 1.0);
    }
};
template <class Fp8Type>
struct Fp8Bound {
    double operator()(std::vector<float> const& x, std::size_t i) const {
        using F = typename Fp8Type::format;
        double const scale = max_abs(x, 0, x.size()) / Fp8Type::max_finite().to_float();
        return float_format_bound(x[i], F::mantissa_bits, F::subnormal_exponent, scale);
    }
};
// Symmetric int8: the scale max|x|/127 and rounding to nearest: half a step.
struct Int8Bound {
    double operator()(std::vector<float> const& x, std::size_t i) const {
        double const scale = max_abs(x, 0, x.size()) / 127;
        return scale / 2 + arithmetic_rtol * (std::abs(x[i]) + 127 * scale);
    }
};
// Asymmetric int4: the group's range over 15 steps, rounding to nearest: half a step.
struct Int4Bound {
    double operator()(std::vector<float> const& x, std::size_t i) const {
        std::size_t const group = i / 32 * 32;
        double lo = x[group], hi = x[group];
        for (std::size_t j = group; j < group + 32; ++j) {
            lo = std::min(lo, double(x[j]));
            hi = std::max(hi, double(x[j]));
        }
        double const scale = (hi - lo) / 15;
        return scale / 2 + arithmetic_rtol * (std::abs(x[i]) + std::abs(lo) + 15 * scale);
    }
};

// Round trips vectors of uniform values in [-magnitude, magnitude]; returns the largest
// error as a fraction of the bound (must be <= 1).
template <class Codec, int HeadDim, class Bound>
double worst_error_ratio(std::mt19937_64& rng, float magnitude, Bound bound) {
    double worst = 0;
    std::array<std::byte, Codec::template vector_bytes<HeadDim>> stored{};
    std::vector<float> decoded(HeadDim);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> x = testing::random_floats(rng, HeadDim, -magnitude, magnitude);
        if (trial % 4 == 0) x[static_cast<std::size_t>(trial) % HeadDim] *= 16;  // an outlier
        testing::poison(std::span<float>(decoded));
        Codec::template encode<HeadDim>(x.data(), stored.data());
        Codec::template decode<HeadDim>(stored.data(), decoded.data());
        for (std::size_t i = 0; i < x.size(); ++i) {
            double const error = std::abs(double(decoded[i]) - double(x[i]));
            if (std::isnan(error)) return std::numeric_limits<double>::infinity();
            worst = std::max(worst, error / bound(x, i));
        }
    }
    return worst;
}

template <class Codec, int HeadDim, class Bound>
void check_codec(std::uint64_t seed, Bound bound) {
    auto rng = testing::seeded_rng(seed);
    double worst = 0;
    for (float const magnitude : {1e-3f, 1.0f, 300.0f}) {
        double const ratio = worst_error_ratio<Codec, HeadDim>(rng, magnitude, bound);
        BOOST_TEST_MESSAGE(Codec::name << " head_dim " << HeadDim << " magnitude " << magnitude
                                       << ": worst error / bound = " << ratio);
        BOOST_TEST(ratio <= 1.0, Codec::name << " exceeds its bound at magnitude " << magnitude);
        worst = std::max(worst, ratio);
    }
    // Random values land anywhere between two codes, so some element comes near half a step.
    BOOST_TEST(worst >= 0.5, Codec::name << " never came near its bound: " << worst);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_codec)

BOOST_AUTO_TEST_CASE(fp32_is_exact) {
    auto rng = testing::seeded_rng(401);
    std::vector<float> x = testing::random_floats(rng, 64, -1e6f, 1e6f);
    x[3] = -0.0f;
    x[5] = std::numeric_limits<float>::denorm_min();
    std::array<std::byte, Fp32Codec::vector_bytes<64>> stored{};
    std::vector<float> decoded(64, std::numeric_limits<float>::quiet_NaN());
    Fp32Codec::encode<64>(x.data(), stored.data());
    Fp32Codec::decode<64>(stored.data(), decoded.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
        BOOST_TEST(std::bit_cast<std::uint32_t>(decoded[i]) == std::bit_cast<std::uint32_t>(x[i]));
    }
}

BOOST_AUTO_TEST_CASE(fp16_within_half_an_ulp) {
    check_codec<Fp16Codec, 64>(402, Fp16Bound{});
}
// The fp16 row decode (eight at a time in hardware where the build has F16C, then one by one)
// gives half.hpp's floats bitwise, for every pattern the encoder can store (all but the
// signaling NaNs, which it never writes and the hardware would quiet), in rows whose length
// leaves a tail after the groups of eight.
BOOST_AUTO_TEST_CASE(fp16_row_decode_equals_the_scalar_conversion) {
    std::vector<std::uint16_t> patterns;
    for (std::uint32_t b = 0; b < (1u << 16); ++b) {
        bool const signaling_nan = (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0 && !(b & 0x200u);
        if (!signaling_nan) patterns.push_back(static_cast<std::uint16_t>(b));
    }
    constexpr int row = 44;  // five groups of eight and a tail of four
    patterns.resize(patterns.size() / row * row + row, 0x3c00u);
    std::vector<float> decoded(patterns.size());
    for (std::size_t i = 0; i < patterns.size(); i += row)
        Fp16Codec::decode(DynamicExtent{row}, reinterpret_cast<std::byte const*>(&patterns[i]),
                          &decoded[i]);
    std::size_t mismatches = 0;
    for (std::size_t i = 0; i < patterns.size(); ++i)
        mismatches += std::bit_cast<std::uint32_t>(decoded[i]) !=
                      std::bit_cast<std::uint32_t>(f16_bits_to_float(patterns[i]));
    BOOST_TEST(mismatches == 0u);
}

BOOST_AUTO_TEST_CASE(bf16_within_half_an_ulp) {
    check_codec<Bf16Codec, 128>(403, Bf16Bound{});
}
BOOST_AUTO_TEST_CASE(fp8_e4m3_within_half_an_ulp_of_the_scaled_value) {
    check_codec<Fp8E4M3Codec, 64>(404, Fp8Bound<Fp8E4M3>{});
    check_codec<Fp8E4M3Codec, 128>(405, Fp8Bound<Fp8E4M3>{});
}
BOOST_AUTO_TEST_CASE(fp8_e5m2_within_half_an_ulp_of_the_scaled_value) {
    check_codec<Fp8E5M2Codec, 64>(406, Fp8Bound<Fp8E5M2>{});
}
BOOST_AUTO_TEST_CASE(int8_within_half_a_step) {
    check_codec<Int8Codec, 64>(407, Int8Bound{});
    check_codec<Int8Codec, 128>(408, Int8Bound{});
}
BOOST_AUTO_TEST_CASE(int4_within_half_a_step_of_its_group) {
    check_codec<Int4Codec, 64>(409, Int4Bound{});
    check_codec<Int4Codec, 128>(410, Int4Bound{});
}

// Zeros must stay zeros (the scales have a floor, so nothing divides by zero), and int4 keeps
// a constant group exact (its zero point is the value itself).
template <class Codec>
void check_exact_on(std::vector<float> const& x) {
    std::array<std::byte, Codec::template vector_bytes<64>> stored{};
    std::vector<float> decoded(64, std::numeric_limits<float>::quiet_NaN());
    Codec::template encode<64>(x.data(), stored.data());
    Codec::template decode<64>(stored.data(), decoded.data());
    for (std::size_t i = 0; i < x.size(); ++i) {
        BOOST_TEST(decoded[i] == x[i], Codec::name << " element " << i);
    }
}

BOOST_AUTO_TEST_CASE(zero_vectors_decode_to_zero) {
    std::vector<float> const zeros(64, 0.0f);
    check_exact_on<Fp16Codec>(zeros);
    check_exact_on<Bf16Codec>(zeros);
    check_exact_on<Fp8E4M3Codec>(zeros);
    check_exact_on<Fp8E5M2Codec>(zeros);
    check_exact_on<Int8Codec>(zeros);
    check_exact_on<Int4Codec>(zeros);
}

BOOST_AUTO_TEST_CASE(int4_constant_groups_are_exact) {
    std::vector<float> x(64, 0.7f);
    std::fill(x.begin() + 32, x.end(), -3.25f);
    check_exact_on<Int4Codec>(x);
}

// The (K, V) pairs a program picks by name at start-up (serve's --kv-cache-dtype): each name
// reaches the pair of exactly those codecs, K apart from V, and a pair outside the list is
// refused naming the list. The expected table is written here, not read from the list.
BOOST_AUTO_TEST_CASE(codec_pairs_are_chosen_by_name_at_run_time) {
    std::vector<std::pair<std::string, std::pair<DType, DType>>> const expected = {
        {"fp32", {DType::f32, DType::f32}},
        {"fp16", {DType::f16, DType::f16}},
        {"bf16", {DType::bf16, DType::bf16}},
        {"fp8_e4m3", {DType::fp8_e4m3, DType::fp8_e4m3}},
        {"fp8_e5m2", {DType::fp8_e5m2, DType::fp8_e5m2}},
        {"int8", {DType::int8, DType::int8}},
        {"int4", {DType::int4, DType::int4}},
        {"int8,int4", {DType::int8, DType::int4}}};
    BOOST_TEST(kv_codec_pair_names().size() == expected.size());
    auto const dtypes_of = []<class Pair>() {
        return std::pair{Pair::Key::dtype, Pair::Value::dtype};
    };
    for (auto const& [name, dtypes] : expected) {
        BOOST_TEST_CONTEXT(name) {
            BOOST_TEST((with_kv_codecs(name, dtypes_of) == dtypes));
            auto const comma = name.find(',');
            std::string const key = name.substr(0, comma);
            std::string const value = comma == std::string::npos ? key : name.substr(comma + 1);
            BOOST_TEST((with_kv_codecs(key, value, dtypes_of) == dtypes));
            BOOST_TEST(with_kv_codecs(name, []<class Pair>() { return Pair::name(); }) == name);
        }
    }
    // int4 keys with int8 values are not compiled in (the order matters); neither is int3.
    for (std::string const refused : {"int4,int8", "int3", "fp32,"}) {
        BOOST_TEST_CONTEXT(refused) {
            BOOST_CHECK_EXCEPTION(
                with_kv_codecs(refused, dtypes_of), tinfer::Error, [](tinfer::Error const& e) {
                    std::string const what = e.what();
                    BOOST_TEST_MESSAGE(what);
                    return what.find(
                               "fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, int4, int8,int4") !=
                           std::string::npos;
                });
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
