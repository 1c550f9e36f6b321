// Int8 activations: the quantizer against its definition, and the integer linear kernels (the
// AVX-512 VNNI path where the build has it, and the portable path always) against a float64
// product of the decoded weights and the dequantized activations; batch invariance; the fused
// gated and accumulating epilogues against the separate operations.
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/kernels/int8_activations.hpp>
#include <tinfer/kernels/linear.hpp>
#include <tinfer/kernels/swiglu.hpp>

#include "testing.hpp"
#include "weights_for_tests.hpp"

namespace tt = tinfer::testing;
namespace k = tinfer::kernels;
using k::Isa;
using tinfer::DType;

namespace {

struct QuantizedRows {
    std::vector<std::byte> bytes;
    std::size_t stride = 0;
    k::Int8Rows view() const { return {bytes.data(), stride}; }
};

template <Isa isa = Isa::native>
QuantizedRows quantize(std::vector<float> const& x, int tokens, int cols) {
    QuantizedRows q;
    q.stride = k::int8_row_bytes(cols);
    q.bytes.assign(q.stride * static_cast<std::size_t>(tokens), std::byte{0x5a});  // poison
    for (int t = 0; t < tokens; ++t) {
        k::quantize_row_int8<isa>(x.data() + static_cast<std::size_t>(t) * cols, cols,
                                  q.bytes.data() + q.stride * static_cast<std::size_t>(t));
    }
    return q;
}

// The weight offset c_j each block's activation sum is multiplied by (see int8_dot.hpp): its
// size bounds the cancellation the integer path's float arithmetic works against.
template <DType T>
double offset_magnitude(double const* decoded_block) {
    double lo = decoded_block[0], hi = decoded_block[0];
    for (int i = 0; i < 32; ++i) {
        lo = std::min(lo, decoded_block[i]);
        hi = std::max(hi, decoded_block[i]);
    }
    double const scale_bound = std::max(std::abs(lo), std::abs(hi));
    if constexpr (T == DType::q8_0) return 128.0 * scale_bound / 127.0 * 2;
    if constexpr (T == DType::q4_0) return 8.0 * scale_bound / 7.0 * 2;
    return std::abs(lo) + scale_bound;
}

// Error bound: the integer sums are exact; per output the float arithmetic is a few roundings
// per block (scale product, conversion-free int -> float, two fused multiply-adds) over terms
// bounded by sum |w_k x_k| + sum_j |c_j| sum_k |x_k|, then a 16-lane sum. We allow
// (8 * blocks + 32) eps of that magnitude.
template <DType T, Isa isa>
void check_against_reference(std::uint64_t seed, int rows, int cols, int tokens, int threads) {
    BOOST_TEST_MESSAGE(name_of(T) << (isa == Isa::native ? " native" : " portable") << " rows "
                                  << rows << " cols " << cols << " tokens " << tokens);
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    QuantizedRows const q = quantize(x, tokens, cols);
    std::vector<float> y(static_cast<std::size_t>(tokens) * rows);
    tt::poison(std::span<float>(y));
    k::linear_int8<T, isa>(w.matrix, q.view(), tokens, y.data(), threads);

    int const blocks = cols / 32;
    double const rtol = tt::float32_sum_rtol(8 * static_cast<std::size_t>(blocks) + 32);
    double worst = 0;
    for (int t = 0; t < tokens; ++t) {
        auto const* row = reinterpret_cast<k::Int8Group const*>(q.bytes.data() + q.stride * t);
        for (int o = 0; o < rows; ++o) {
            double ref = 0, magnitude = 0;
            double const* wrow = w.decoded.data() + static_cast<std::size_t>(o) * cols;
            for (int b = 0; b < blocks; ++b) {
                double block_abs_x = 0;
                for (int i = b * 32; i < b * 32 + 32; ++i) {
                    double const xv = k::int8_row_value(row, i);
                    ref += wrow[i] * xv;
                    magnitude += std::abs(wrow[i] * xv);
                    block_abs_x += std::abs(xv);
                }
                magnitude += offset_magnitude<T>(wrow + b * 32) * block_abs_x;
            }
            double const got = y[static_cast<std::size_t>(t) * rows + o];
            double const error = std::isnan(got) ? std::numeric_limits<double>::infinity()
                                                 : std::abs(got - ref) / (rtol * magnitude);
            worst = std::max(worst, error);
        }
    }
    BOOST_TEST(worst <= 1.0, "worst scaled error " << worst);
}

template <DType T, Isa isa>
void check_shapes(std::uint64_t seed) {
    // SmolLM2's q/o, k/v, gate/up, down projections; block counts with every partial group.
    check_against_reference<T, isa>(seed + 1, 576, 576, 5, 2);
    check_against_reference<T, isa>(seed + 2, 192, 576, 1, 1);
    check_against_reference<T, isa>(seed + 3, 1536, 576, 3, 2);
    check_against_reference<T, isa>(seed + 4, 576, 1536, 9, 2);
    check_against_reference<T, isa>(seed + 5, 37, 96, 13, 2);
    check_against_reference<T, isa>(seed + 6, 3, 32, 2, 1);
    check_against_reference<T, isa>(seed + 7, 5, 160, 6, 1);
}

// Each token alone, in a batch, on other thread counts and from an odd offset: bitwise equal.
template <DType T, Isa isa>
void check_batch_invariance(std::uint64_t seed, int rows, int cols) {
    auto rng = tt::seeded_rng(seed);
    tt::TestWeights const w = tt::make_weights<T>(rng, rows, cols);
    int const tokens = 23;
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    QuantizedRows const q = quantize(x, tokens, cols);
    std::vector<float> batch(static_cast<std::size_t>(tokens) * rows);
    tt::poison(std::span<float>(batch));
    k::linear_int8<T, isa>(w.matrix, q.view(), tokens, batch.data(), 2);
    std::vector<float> alone(rows);
    for (int t = 0; t < tokens; ++t) {
        tt::poison(std::span<float>(alone));
        k::linear_int8<T, isa>(w.matrix, {q.bytes.data() + q.stride * t, q.stride}, 1, alone.data(),
                               1);
        BOOST_TEST(std::memcmp(alone.data(), batch.data() + static_cast<std::size_t>(t) * rows,
                               rows * sizeof(float)) == 0,
                   "token " << t << " alone differs from the batch");
    }
    int const first = 3, count = 7;
    std::vector<float> part(static_cast<std::size_t>(count) * rows);
    k::linear_int8<T, isa>(w.matrix, {q.bytes.data() + q.stride * first, q.stride}, count,
                           part.data(), 1);
    BOOST_TEST(std::memcmp(part.data(), batch.data() + static_cast<std::size_t>(first) * rows,
                           part.size() * sizeof(float)) == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(int8_linear)

BOOST_AUTO_TEST_CASE(quantized_rows_follow_the_definition) {
    auto rng = tt::seeded_rng(1000);
    for (int const cols : {32, 96, 128, 160, 576, 1536}) {
        std::vector<float> x = tt::random_floats(rng, static_cast<std::size_t>(cols), -3.f, 3.f);
        for (int i = 64; i < std::min(cols, 96); ++i)
            x[static_cast<std::size_t>(i)] = 0;  // all-zero block
        QuantizedRows const native = quantize<Isa::native>(x, 1, cols);
        QuantizedRows const portable = quantize<Isa::portable>(x, 1, cols);
        BOOST_TEST(
            std::memcmp(native.bytes.data(), portable.bytes.data(), native.bytes.size()) == 0,
            "native and portable quantizers differ at cols " << cols);
        auto const* row = reinterpret_cast<k::Int8Group const*>(native.bytes.data());
        for (int b = 0; b < cols / 32; ++b) {
            float amax = 0;
            for (int i = b * 32; i < b * 32 + 32; ++i) amax = std::max(amax, std::abs(x[i]));
            double const d = amax / 127.0;
            k::Int8Group const& g = row[b / 4];
            int const j = b % 4;
            BOOST_TEST(std::abs(g.scale[j * 4] - d) <= 1e-6 * d);
            long sum = 0;
            for (int i = b * 32; i < b * 32 + 32; ++i) {
                double const value = k::int8_row_value(row, i);
                BOOST_TEST(std::abs(value - x[i]) <= 0.5 * d * (1 + 1e-5) + 1e-30,
                           "element " << i << " of cols " << cols);
                sum += std::lround(d > 0 ? value / g.scale[j * 4] : 0.0);
            }
            BOOST_TEST(std::abs(g.sum[j * 4] - g.scale[j * 4] * sum) <=
                       1e-6 * std::abs(g.scale[j * 4] * sum) + 1e-30);
            for (int l = 1; l < 4; ++l) BOOST_TEST(g.sum[j * 4 + l] == 0.0f);
        }
        // A partial last group is zero past its blocks, so it adds nothing to any product.
        int const blocks = cols / 32;
        if (blocks % 4 != 0) {
            k::Int8Group const& last = row[blocks / 4];
            for (int i = (blocks % 4) * 16; i < 64; ++i) {
                BOOST_TEST(last.low[i] == 0);
                BOOST_TEST(last.high[i] == 0);
            }
            for (int l = (blocks % 4) * 4; l < 16; ++l) {
                BOOST_TEST(last.scale[l] == 0.0f);
                BOOST_TEST(last.sum[l] == 0.0f);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(q4_0_matches_reference) {
    check_shapes<DType::q4_0, Isa::native>(1100);
    check_shapes<DType::q4_0, Isa::portable>(1150);
}
BOOST_AUTO_TEST_CASE(q4_1_matches_reference) {
    check_shapes<DType::q4_1, Isa::native>(1200);
    check_shapes<DType::q4_1, Isa::portable>(1250);
}
BOOST_AUTO_TEST_CASE(q8_0_matches_reference) {
    check_shapes<DType::q8_0, Isa::native>(1300);
    check_shapes<DType::q8_0, Isa::portable>(1350);
}

BOOST_AUTO_TEST_CASE(batch_invariant_bitwise) {
    check_batch_invariance<DType::q4_1, Isa::native>(1400, 576, 576);
    check_batch_invariance<DType::q8_0, Isa::native>(1401, 37, 96);
    check_batch_invariance<DType::q4_0, Isa::native>(1402, 21, 160);
    check_batch_invariance<DType::q4_1, Isa::portable>(1403, 37, 96);
}

// The fused epilogues are the separate operations, bitwise: gated = swiglu of two products,
// accumulate = y + product; for float and int8 rows.
BOOST_AUTO_TEST_CASE(fused_epilogues_equal_separate_operations) {
    auto rng = tt::seeded_rng(1500);
    int const rows = 37, cols = 160, tokens = 9;
    tt::TestWeights const gate = tt::make_weights<DType::q4_1>(rng, rows, cols);
    tt::TestWeights const up = tt::make_weights<DType::q4_1>(rng, rows, cols);
    std::vector<float> const x = tt::random_floats(rng, static_cast<std::size_t>(tokens) * cols);
    std::vector<float> const base = tt::random_floats(rng, static_cast<std::size_t>(tokens) * rows);
    QuantizedRows const q = quantize(x, tokens, cols);
    std::vector<float> buffer(k::linear_scratch_floats(cols));
    std::size_t const n = static_cast<std::size_t>(tokens) * rows;

    auto const check = [&](auto rows_view, auto separate) {
        std::vector<float> g(n), u(n), fused(n);
        separate(gate, g.data());
        separate(up, u.data());
        k::swiglu(g.data(), u.data(), n, g.data());
        k::gated_linear_team<DType::q4_1>(gate.matrix, up.matrix, rows_view, tokens, fused.data(),
                                          rows, buffer.data());
        BOOST_TEST(std::memcmp(g.data(), fused.data(), n * sizeof(float)) == 0);

        std::vector<float> sum = base, product(n);
        separate(gate, product.data());
        for (std::size_t i = 0; i < n; ++i) product[i] = base[i] + product[i];
        k::linear_team<DType::q4_1>(gate.matrix, rows_view, tokens, sum.data(), rows,
                                    k::Store::accumulate, buffer.data());
        BOOST_TEST(std::memcmp(sum.data(), product.data(), n * sizeof(float)) == 0);
    };
    check(k::FloatRows{x.data(), static_cast<std::size_t>(cols)},
          [&](tt::TestWeights const& w, float* y) {
              k::linear<DType::q4_1>(w.matrix, x.data(), tokens, y, 1);
          });
    check(q.view(), [&](tt::TestWeights const& w, float* y) {
        k::linear_int8<DType::q4_1>(w.matrix, q.view(), tokens, y, 1);
    });
}

BOOST_AUTO_TEST_SUITE_END()
