// rmsnorm, rope, swiglu, embedding and the vectorizable f16 decoding against float64 references.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/half.hpp>
#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/embedding.hpp>
#include <tinfer/kernels/rmsnorm.hpp>
#include <tinfer/kernels/rope.hpp>
#include <tinfer/kernels/swiglu.hpp>
#include <tinfer/kernels/weight_matrix.hpp>

#include "testing.hpp"
#include "weights_for_tests.hpp"

namespace tt = tinfer::testing;
namespace k = tinfer::kernels;
using tinfer::DType;

namespace {

constexpr double eps32 = std::numeric_limits<float>::epsilon();

// Relative error bound of rmsnorm: the sum of squares of n terms carries at most (n + 1) u of
// relative error (u = eps/2), the mean, + eps, sqrt (halves what it is given, then rounds) and
// the reciprocal add 4 more roundings, and x * scale * weight 2 more: (n + 1)/2 + 6 u in all. We
// allow (n/2 + 7) eps, about twice that.
template <int width>
void check_rmsnorm(std::uint64_t seed, int rows, float eps) {
    auto rng = tt::seeded_rng(seed);
    std::vector<float> const x =
        tt::random_floats(rng, static_cast<std::size_t>(rows) * width, -3, 3);
    std::vector<float> const weight = tt::random_floats(rng, width, 0.5f, 2.0f);
    std::vector<float> out(x.size());
    tt::poison(std::span<float>(out));
    k::rmsnorm<width>(x.data(), weight.data(), eps, rows, out.data(), 2);

    std::vector<double> ref(x.size());
    for (int r = 0; r < rows; ++r) {
        double sum = 0;
        for (int i = 0; i < width; ++i) sum += double(x[r * width + i]) * x[r * width + i];
        double const scale = 1.0 / std::sqrt(sum / width + double(eps));
        for (int i = 0; i < width; ++i) ref[r * width + i] = x[r * width + i] * scale * weight[i];
    }
    double const rtol = (width / 2.0 + 7) * eps32;
    BOOST_TEST(tt::scaled_error(std::span<float const>(out), std::span<double const>(ref), 1e-30,
                                rtol) <= 1.0);

    // In place gives the same bits.
    std::vector<float> in_place = x;
    k::rmsnorm<width>(in_place.data(), weight.data(), eps, rows, in_place.data(), 1);
    BOOST_TEST(std::memcmp(in_place.data(), out.data(), out.size() * sizeof(float)) == 0);
}

// Bound of one rotated element x0 c - x1 s against float64 with exact angles: c and s are the
// double cos/sin rounded once (u each), each product rounds once and the sum once, so
// |error| <= 3 u (|x0| + |x1|) + u |result| <= 4 u (|x0| + |x1|); we allow 4 eps (|x0| + |x1|).
template <int head_dim>
void check_rope(std::uint64_t seed, double base) {
    auto rng = tt::seeded_rng(seed);
    std::vector<int> const positions = {0, 1, 2, 17, 511, 8191, 100000, 1 << 20};
    int const rows = static_cast<int>(positions.size()), heads = 3;
    std::size_t const stride = heads * head_dim + 5;  // rows wider than the heads they hold
    std::vector<float> const x = tt::random_floats(rng, rows * stride, -2, 2);
    std::vector<float> table(static_cast<std::size_t>(rows) * head_dim);
    tt::poison(std::span<float>(table));
    k::rope_table<head_dim>(base, positions.data(), rows, table.data());
    std::vector<float> out = x;
    k::apply_rope<head_dim>(out.data(), rows, heads, stride, table.data(), 2);

    double worst = 0;
    for (int r = 0; r < rows; ++r) {
        for (int h = 0; h < heads; ++h) {
            for (int i = 0; i < head_dim / 2; ++i) {
                double const theta = positions[r] * std::pow(base, -2.0 * i / head_dim);
                std::size_t const at = r * stride + h * head_dim + 2 * i;
                double const x0 = x[at], x1 = x[at + 1];
                double const ref0 = x0 * std::cos(theta) - x1 * std::sin(theta);
                double const ref1 = x0 * std::sin(theta) + x1 * std::cos(theta);
                double const bound = 4 * eps32 * (std::abs(x0) + std::abs(x1));
                worst = std::max({worst, std::abs(out[at] - ref0) / bound,
                                  std::abs(out[at + 1] - ref1) / bound});
                if (std::isnan(out[at]) || std::isnan(out[at + 1]))
                    worst = std::numeric_limits<double>::infinity();
            }
        }
        // The padding after the heads is not touched.
        for (std::size_t pad = heads * head_dim; pad < stride; ++pad)
            BOOST_TEST(out[r * stride + pad] == x[r * stride + pad]);
    }
    BOOST_TEST(worst <= 1.0, "worst scaled error " << worst);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(elementwise)

BOOST_AUTO_TEST_CASE(f16_branchless_equals_reference_for_all_bits) {
    int mismatches = 0;
    for (std::uint32_t bits = 0; bits <= 0xffffu; ++bits) {
        float const a = k::f16_to_float_branchless(static_cast<std::uint16_t>(bits));
        float const b = tinfer::f16_bits_to_float(static_cast<std::uint16_t>(bits));
        if (std::bit_cast<std::uint32_t>(a) != std::bit_cast<std::uint32_t>(b)) ++mismatches;
    }
    BOOST_TEST(mismatches == 0);
}

// The fixed-order reductions bit for bit: sum_lanes against the pairwise tree written out in
// scalars, and dot_rows<R> against R separate dots, for the row counts attention's scores take
// (the vector trees of sum_lanes_rows pair lanes by shuffles; a wrong pairing changes bits).
template <int R>
void check_dot_rows(int n, std::mt19937_64& rng) {
    std::vector<float> const a = tt::random_floats(rng, static_cast<std::size_t>(n), -2, 2);
    std::vector<float> const b = tt::random_floats(rng, static_cast<std::size_t>(R) * n, -2, 2);
    float rows[R];
    k::dot_rows<R>(tinfer::DynamicExtent{n}, a.data(), b.data(), static_cast<std::size_t>(n), rows);
    for (int r = 0; r < R; ++r) {
        float const alone = k::dot(tinfer::DynamicExtent{n}, a.data(), b.data() + r * n);
        BOOST_TEST(std::bit_cast<std::uint32_t>(rows[r]) == std::bit_cast<std::uint32_t>(alone),
                   "R " << R << ", n " << n << ", row " << r << ": " << rows[r] << " vs " << alone);
    }
}

BOOST_AUTO_TEST_CASE(reductions_keep_their_order_bit_for_bit) {
    auto rng = tt::seeded_rng(2050);
    for (int trial = 0; trial < 200; ++trial) {
        // Magnitudes spread over 2^-20 .. 2^20, so that an addition in another order rounds
        // differently.
        std::uniform_int_distribution<int> exponent(-20, 20);
        std::vector<float> const mantissas = tt::random_floats(rng, k::reduction_lanes, -1, 1);
        float lanes[k::reduction_lanes];
        for (int l = 0; l < k::reduction_lanes; ++l)
            lanes[l] = std::ldexp(mantissas[static_cast<std::size_t>(l)], exponent(rng));
        float level[k::reduction_lanes];
        std::copy(lanes, lanes + k::reduction_lanes, level);
        for (int width = k::reduction_lanes / 2; width > 0; width /= 2)
            for (int l = 0; l < width; ++l) level[l] = level[l] + level[l + width];
        BOOST_TEST(std::bit_cast<std::uint32_t>(k::sum_lanes(lanes)) ==
                   std::bit_cast<std::uint32_t>(level[0]));
    }
    for (int n : {16, 64, 72, 256}) {
        check_dot_rows<1>(n, rng);
        check_dot_rows<4>(n, rng);
        check_dot_rows<8>(n, rng);
        check_dot_rows<16>(n, rng);
    }
}

// The softmax weight function against libm's double exp2: relative error within 2.5e-7 (its
// series error 1.3e-7 plus a few float roundings) over [-126, 0], exactly 0 below and at -inf.
BOOST_AUTO_TEST_CASE(fast_exp2_matches_libm) {
    auto rng = tt::seeded_rng(2100);
    std::vector<float> xs = tt::random_floats(rng, 100000, -126.0f, 0.0f);
    for (float x : {0.0f, -0.5f, -1.0f, -0.25f, -125.999f, -126.0f, -1e-8f}) xs.push_back(x);
    double worst = 0;
    for (float const x : xs) {
        double const exact = std::exp2(static_cast<double>(x));
        worst = std::max(worst, std::abs(tinfer::kernels::fast_exp2(x) - exact) / exact);
    }
    BOOST_TEST(worst <= 2.5e-7, "worst relative error " << worst);
    for (float const x : {-126.01f, -127.0f, -1000.0f, -std::numeric_limits<float>::infinity()})
        BOOST_TEST(tinfer::kernels::fast_exp2(x) == 0.0f, "at " << x);
}

// GeGLU's gate against tanh in double. tanh(u) through fast_exp2 is off by a few float ulps
// absolutely (e's relative error, the quotient and the sign); 0.5 x (1 + tanh) then carries
// that as 0.5 |x| times it, plus its own roundings of |ref|. We allow 4 eps of each.
BOOST_AUTO_TEST_CASE(gelu_tanh_matches_reference) {
    auto rng = tt::seeded_rng(2200);
    std::vector<float> xs = tt::random_floats(rng, 100000, -12.0f, 12.0f);
    for (float x : {0.0f, -0.0f, 1e-8f, -1e-8f, 30.0f, -30.0f, 1e6f, -1e6f}) xs.push_back(x);
    double worst = 0;
    constexpr double eps = std::numeric_limits<float>::epsilon();
    for (float const x : xs) {
        double const d = x;
        double const exact =
            0.5 * d *
            (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (d + 0.044715 * d * d * d)));
        double const got = tinfer::kernels::gelu_tanh(x);
        worst = std::max(worst,
                         std::abs(got - exact) / (4 * eps * (std::abs(exact) + 0.5 * std::abs(d))));
    }
    BOOST_TEST(worst <= 1.0, "worst scaled error " << worst);
}

BOOST_AUTO_TEST_CASE(rmsnorm_matches_reference) {
    check_rmsnorm<576>(10, 7, 1e-5f);
    check_rmsnorm<40>(11, 3, 1e-6f);
    check_rmsnorm<4096>(12, 2, 1e-5f);
}

BOOST_AUTO_TEST_CASE(rope_matches_reference_on_adjacent_pairs) {
    check_rope<64>(20, 100000.0);
    check_rope<128>(21, 10000.0);
    check_rope<16>(22, 500000.0);
}

// silu(g) * up, e = e^-|g| as 2^a with a = log2(e) |g| rounded: the two roundings of a (the
// constant's and the product's) move e relatively by ln 2 * a * 2u = |g| eps, fast_exp2 adds
// 1.1 eps. The result's sensitivity to e is 1 / (1 + e) <= 1 where g < 0 (x e / (1 + e)) and
// e / (1 + e) where g >= 0 (there |g| e^-|g| < 0.37); then 1 + e, the quotient, two products
// and up's product round once each (5u). So (|g| + 3.6) eps at most; we allow (|g| + 4) eps.
BOOST_AUTO_TEST_CASE(swiglu_matches_reference) {
    auto rng = tt::seeded_rng(30);
    std::size_t const n = 3 * 1536 + 7;
    std::vector<float> gate = tt::random_floats(rng, n, -12, 12);
    for (float const g : {0.0f, -0.0f, 1e-8f, -1e-8f, 80.0f, -80.0f, -100.0f, 1e6f, -1e6f})
        gate.push_back(g);
    std::vector<float> const up = tt::random_floats(rng, gate.size(), -3, 3);
    std::vector<float> out(gate.size());
    tt::poison(std::span<float>(out));
    k::swiglu(gate.data(), up.data(), gate.size(), out.data(), 2);
    double worst = 0;
    for (std::size_t i = 0; i < gate.size(); ++i) {
        double const g = gate[i];
        double const ref = g / (1.0 + std::exp(-g)) * up[i];
        double const bound = (std::abs(g) + 4) * eps32 * std::abs(ref) + 1e-30;
        worst = std::max(worst, std::abs(out[i] - ref) / bound);
    }
    BOOST_TEST(worst <= 1.0, "worst scaled error " << worst);
}

// Every encoding's values are exact in float, so the gathered rows equal the decoded table.
template <DType T>
void check_embedding(std::uint64_t seed, int vocab, int width) {
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const table = tt::make_weights<T>(rng, vocab, width);
    std::vector<std::int32_t> tokens = {0, vocab - 1, 5, 5, 17};
    std::uniform_int_distribution<std::int32_t> pick(0, vocab - 1);
    for (int i = 0; i < 20; ++i) tokens.push_back(pick(rng));
    std::vector<float> out(tokens.size() * width);
    tt::poison(std::span<float>(out));
    k::embedding<T>(table.matrix, tokens, out.data());
    int mismatches = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        for (int j = 0; j < width; ++j) {
            double const ref = table.decoded[static_cast<std::size_t>(tokens[i]) * width + j];
            if (out[i * width + j] != ref) ++mismatches;
        }
    }
    BOOST_TEST(mismatches == 0);

    std::vector<float> any(out.size());
    k::embedding_any(table.matrix, tokens, any.data());
    BOOST_TEST(std::memcmp(any.data(), out.data(), out.size() * sizeof(float)) == 0);

    std::vector<std::int32_t> const bad = {1, vocab};
    BOOST_CHECK_THROW(k::embedding<T>(table.matrix, bad, out.data()), tinfer::RequestError);
    std::vector<std::int32_t> const negative = {-1};
    BOOST_CHECK_THROW(k::embedding<T>(table.matrix, negative, out.data()), tinfer::RequestError);
}

BOOST_AUTO_TEST_CASE(embedding_gathers_exact_rows) {
    check_embedding<DType::q8_0>(40, 300, 576);
    check_embedding<DType::f16>(41, 50, 40);
    check_embedding<DType::f32>(42, 50, 64);
    check_embedding<DType::q4_1>(43, 50, 64);
}

BOOST_AUTO_TEST_SUITE_END()
