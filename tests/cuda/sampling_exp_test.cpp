// The sampling exponential both samplers share (core/sampling_exp.hpp), on the CPU:
// within 2 ulp of e^x (float64 reference) and never decreasing, over a sweep of every 61st float
// of the range a weight's exponent takes, with exact values where the samplers rely on them
// (e^0 = 1: the best token weighs 1; -inf and deep underflow give 0; NaN stays NaN). The device
// side is compared with this bitwise by cuda_sampling_test on a GPU. Also the other half of what
// the samplers share: the codes the device sampler writes for a row the host refuses decode to the
// host's own exceptions (kernels/sampling.hpp).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <random>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/sampling_exp.hpp>
#include <tinfer/kernels/sampling.hpp>

using tinfer::sampling_exp;

namespace {

// |got - exact| in units of the float spacing at exact (the least subnormal below the normals).
double ulps(float got, double exact) {
    float const rounded = static_cast<float>(exact);
    if (std::isinf(rounded)) return std::isinf(got) ? 0 : 1e30;
    double const magnitude = std::abs(static_cast<double>(rounded));
    double const spacing =
        magnitude < std::numeric_limits<float>::min()
            ? std::numeric_limits<float>::denorm_min()
            : std::nextafter(static_cast<float>(magnitude), std::numeric_limits<float>::max()) -
                  magnitude;
    return std::abs(static_cast<double>(got) - exact) / spacing;
}

}  // namespace

BOOST_AUTO_TEST_CASE(sampling_exp_is_accurate_and_monotone) {
    double worst = 0;
    float worst_at = 0;
    long decreasing = 0, checked = 0;
    float previous = 0;
    constexpr std::uint32_t stride = 61;  // every 61st float: all exponents, varied mantissas
    auto const check = [&](float x) {
        float const y = sampling_exp(x);
        double const error = ulps(y, std::exp(static_cast<double>(x)));
        if (error > worst) {
            worst = error;
            worst_at = x;
        }
        if (checked > 0 && y < previous) ++decreasing;
        previous = y;
        ++checked;
    };
    // Increasing x: the negative floats from -104 up to -0 have decreasing bit patterns, the
    // positive ones from +0 up to 89 increasing ones.
    for (std::uint32_t bits = std::bit_cast<std::uint32_t>(-104.0f); bits > 0x8000'0000u;
         bits -= std::min(stride, bits - 0x8000'0000u))
        check(std::bit_cast<float>(bits));
    for (std::uint32_t bits = 0; bits < std::bit_cast<std::uint32_t>(89.0f); bits += stride)
        check(std::bit_cast<float>(bits));
    BOOST_TEST_MESSAGE(checked << " inputs, worst " << worst << " ulp at " << worst_at);
    BOOST_TEST(worst <= 2.0, "worst error " << worst << " ulp at " << worst_at);
    BOOST_TEST(decreasing == 0);
}

BOOST_AUTO_TEST_CASE(sampling_exp_special_values) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    BOOST_TEST(sampling_exp(0.0f) == 1.0f);
    BOOST_TEST(sampling_exp(-0.0f) == 1.0f);
    BOOST_TEST(sampling_exp(-inf) == 0.0f);
    BOOST_TEST(sampling_exp(-200.0f) == 0.0f);
    BOOST_TEST(sampling_exp(inf) == inf);
    BOOST_TEST(sampling_exp(100.0f) == inf);
    BOOST_TEST(std::isnan(sampling_exp(std::numeric_limits<float>::quiet_NaN())));
    // The weight of the best token is exactly 1 at any temperature.
    for (float const t : {0.01f, 0.7f, 1.0f, 3.0f})
        BOOST_TEST(tinfer::sampling_weight(5.5f, 5.5f, t) == 1.0f);
}

namespace {

// The exception `action` throws: its dynamic type and message ("" and "none" when it throws none).
template <class Action>
std::pair<std::string, std::string> thrown_by(Action action) {
    try {
        action();
    } catch (std::exception const& error) {
        return {typeid(error).name(), error.what()};
    }
    return {"none", ""};
}

}  // namespace

// A NaN or +inf logit, or every logit -inf: the host sampler throws; the device writes a code in
// place of the token, and check_sampled_tokens must throw exactly the same exception (type and
// message) for it, for the first refused row, whatever the drawn rows around it.
BOOST_AUTO_TEST_CASE(device_refusal_codes_throw_the_host_samplers_errors) {
    namespace k = tinfer::kernels;
    constexpr std::int32_t vocab = 97;
    std::mt19937_64 rng(1515);
    std::normal_distribution<float> logit(0.0f, 3.0f);
    k::SamplingWorkspace workspace(vocab);
    constexpr float nan = std::numeric_limits<float>::quiet_NaN();
    constexpr float inf = std::numeric_limits<float>::infinity();
    for (int trial = 0; trial < 24; ++trial) {
        std::vector<float> logits(vocab);
        for (float& l : logits) l = logit(rng);
        std::int32_t first_bad = -1;  // the token the host names; -1: the all -inf row
        if (trial % 3 == 2) {
            std::fill(logits.begin(), logits.end(), -inf);
        } else {
            first_bad = static_cast<std::int32_t>(rng() % vocab);
            logits[first_bad] = trial % 3 == 0 ? nan : inf;
            for (std::int32_t t = first_bad + 1; t < vocab; ++t)  // later bad tokens are not named
                if (rng() % 8 == 0) logits[t] = rng() % 2 ? nan : inf;
        }
        k::SamplingParams params;
        params.temperature = trial % 2 ? 0.0f : 0.8f;
        auto const host = thrown_by([&] {
            k::sample_token(logits, params, {}, 7, static_cast<std::uint32_t>(trial), workspace);
        });
        std::int32_t const code =
            first_bad < 0 ? k::all_logits_masked : k::nonfinite_logit_code(first_bad);
        BOOST_TEST_CONTEXT("trial " << trial << ", first bad token " << first_bad) {
            BOOST_TEST(code < 0);
            BOOST_TEST(host.first != "none");
            std::vector<std::int32_t> const rows{3, 0, code, vocab - 1, k::nonfinite_logit_code(0)};
            auto const device = thrown_by([&] { k::check_sampled_tokens(rows); });
            BOOST_TEST(device.first == host.first);
            BOOST_TEST(device.second == host.second);
        }
    }
    // Rows that all drew a token pass.
    std::vector<std::int32_t> const drawn{0, 1, vocab - 1};
    BOOST_CHECK_NO_THROW(k::check_sampled_tokens(drawn));
}
