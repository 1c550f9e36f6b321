// linear on stored weights against a float64 product of the independently decoded weights.
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/kernels/linear.hpp>

#include "testing.hpp"
#include "weights_for_tests.hpp"

namespace tt = tinfer::testing;
using tinfer::DType;

namespace {

// Error bound of one output y = sum_k w_k x_k against float64: decoding a weight rounds at most
// once (the quantized value times an f16 scale is exact in float, adding Q4_1's minimum rounds),
// each product rounds once and a float32 sum of `cols` terms in any order adds at most
// (cols - 1) roundings, each at most u = eps/2 of the running magnitude <= sum |w_k x_k|. So
// |y - ref| <= (cols + 2) u sum |w_k x_k|; we allow (cols + 2) eps, twice that.
template <DType T>
void check_against_reference(std::uint64_t seed, int rows, int cols, int tokens, int threads) {
    BOOST_TEST_MESSAGE(name_of(T) << " rows " << rows << " cols " << cols << " tokens " << tokens
                                  << " threads " << threads);
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    std::vector<float> y(static_cast<std::size_t>(tokens) * rows);
    tt::poison(std::span<float>(y));
    tinfer::kernels::linear<T>(w.matrix, x.data(), tokens, y.data(), threads);

    double const rtol = tt::float32_sum_rtol(static_cast<std::size_t>(cols) + 2);
    double worst = 0;
    for (int t = 0; t < tokens; ++t) {
        for (int o = 0; o < rows; ++o) {
            double ref = 0, magnitude = 0;
            for (int k = 0; k < cols; ++k) {
                double const term = w.decoded[static_cast<std::size_t>(o) * cols + k] *
                                    x[static_cast<std::size_t>(t) * cols + k];
                ref += term;
                magnitude += std::abs(term);
            }
            double const got = y[static_cast<std::size_t>(t) * rows + o];
            double const error = std::isnan(got) ? std::numeric_limits<double>::infinity()
                                                 : std::abs(got - ref) / (rtol * magnitude);
            worst = std::max(worst, error);
        }
    }
    BOOST_TEST(worst <= 1.0, "worst scaled error " << worst);
}

template <DType T>
void check_shapes(std::uint64_t seed) {
    // SmolLM2's q/o, k/v, gate/up, down projections, then small shapes with leftover rows.
    check_against_reference<T>(seed + 1, 576, 576, 5, 2);
    check_against_reference<T>(seed + 2, 192, 576, 1, 1);
    check_against_reference<T>(seed + 3, 1536, 576, 3, 2);
    check_against_reference<T>(seed + 4, 576, 1536, 9, 2);
    check_against_reference<T>(seed + 5, 37, 96, 13, 2);
    check_against_reference<T>(seed + 6, 3, 64, 2, 1);
}

// Each token's outputs alone, in a batch, and with other thread counts: bitwise the same.
template <DType T>
void check_batch_invariance(std::uint64_t seed, int rows, int cols) {
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
    int const tokens = 23;
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    std::vector<float> batch(static_cast<std::size_t>(tokens) * rows);
    tt::poison(std::span<float>(batch));
    tinfer::kernels::linear<T>(w.matrix, x.data(), tokens, batch.data(), 2);

    std::vector<float> alone(rows);
    for (int t = 0; t < tokens; ++t) {
        tt::poison(std::span<float>(alone));
        tinfer::kernels::linear<T>(w.matrix, x.data() + static_cast<std::size_t>(t) * cols, 1,
                                   alone.data(), 1);
        BOOST_TEST(std::memcmp(alone.data(), batch.data() + static_cast<std::size_t>(t) * rows,
                               rows * sizeof(float)) == 0,
                   "token " << t << " alone differs from the batch");
    }
    // An odd sub-batch starting mid-tile, on one thread.
    int const first = 3, count = 7;
    std::vector<float> part(static_cast<std::size_t>(count) * rows);
    tinfer::kernels::linear<T>(w.matrix, x.data() + static_cast<std::size_t>(first) * cols, count,
                               part.data(), 1);
    BOOST_TEST(std::memcmp(part.data(), batch.data() + static_cast<std::size_t>(first) * rows,
                           part.size() * sizeof(float)) == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(linear)

BOOST_AUTO_TEST_CASE(q4_0_matches_reference) {
    check_shapes<DType::q4_0>(100);
}
BOOST_AUTO_TEST_CASE(q4_1_matches_reference) {
    check_shapes<DType::q4_1>(200);
}
BOOST_AUTO_TEST_CASE(q8_0_matches_reference) {
    check_shapes<DType::q8_0>(300);
}
BOOST_AUTO_TEST_CASE(f16_matches_reference) {
    check_shapes<DType::f16>(400);
    check_against_reference<DType::f16>(401, 21, 40, 6, 2);  // row length not a multiple of 16
}
BOOST_AUTO_TEST_CASE(bf16_matches_reference) {
    check_shapes<DType::bf16>(500);
}
BOOST_AUTO_TEST_CASE(f32_matches_reference) {
    check_shapes<DType::f32>(600);
    check_against_reference<DType::f32>(601, 21, 40, 6, 2);
}

BOOST_AUTO_TEST_CASE(batch_invariant_bitwise) {
    check_batch_invariance<DType::q4_1>(700, 576, 576);
    check_batch_invariance<DType::q8_0>(701, 37, 96);
    check_batch_invariance<DType::f32>(702, 21, 40);
}

BOOST_AUTO_TEST_CASE(any_dispatches_on_stored_type) {
    auto rng = tt::seeded_rng(800);
    tt::TestWeights const w = tt::make_weights<DType::q8_0>(rng, 64, 64);
    std::vector<float> const x = tt::random_floats(rng, 64 * 2);
    std::vector<float> direct(2 * 64), dispatched(2 * 64),
        scratch(tinfer::kernels::linear_scratch_floats(64));
    tinfer::kernels::linear<DType::q8_0>(w.matrix, x.data(), 2, direct.data(), 1);
    tinfer::kernels::linear_any(w.matrix, x.data(), 2, dispatched.data(), 1, scratch);
    BOOST_TEST(std::memcmp(direct.data(), dispatched.data(), direct.size() * sizeof(float)) == 0);
}

BOOST_AUTO_TEST_CASE(rejects_wrong_type_and_small_scratch) {
    auto rng = tt::seeded_rng(900);
    tt::TestWeights const w = tt::make_weights<DType::q8_0>(rng, 8, 64);
    std::vector<float> const x(64, 1.0f);
    std::vector<float> y(8), scratch(tinfer::kernels::linear_scratch_floats(64));
    BOOST_CHECK_THROW(tinfer::kernels::linear<DType::q4_1>(w.matrix, x.data(), 1, y.data(), 1),
                      tinfer::Error);
    BOOST_CHECK_THROW(
        tinfer::kernels::linear<DType::q8_0>(w.matrix, x.data(), 1, y.data(), 2, scratch),
        tinfer::Error);
}

BOOST_AUTO_TEST_SUITE_END()
