// The sampler's draws against the exact filtered distribution, computed here independently in
// float64: chi-square goodness of fit over 10^5 draws per setting, and no draw outside the
// filtered set.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/kernels/sampling.hpp>
#include "chi_square.hpp"
#include "testing.hpp"

namespace {

using tinfer::kernels::SamplingParams;
using tinfer::testing::chi_square;
using tinfer::testing::chi_square_survival;
using tinfer::testing::ChiSquare;

constexpr int draws_per_setting = 100000;
constexpr double significance = 0.001;
// A filter boundary closer than this (in probability or probability ratio) could flip between
// the sampler's float arithmetic and this file's double arithmetic; such inputs are refused.
constexpr double boundary_margin = 1e-5;

// The exact distribution the sampler should draw from: temperature, then top-k, top-p and
// min-p, each on the distribution renormalised over the previous survivors. Ranking is by
// logit, ties to the lower id.
std::vector<double> filtered_distribution(std::vector<float> const& logits,
                                          SamplingParams const& params) {
    std::size_t const vocab = logits.size();
    std::vector<std::size_t> ranked(vocab);
    std::iota(ranked.begin(), ranked.end(), 0);
    std::ranges::stable_sort(ranked,
                             [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
    double const max_logit = logits[ranked[0]];
    std::vector<double> weight(vocab);
    for (std::size_t i = 0; i < vocab; ++i)
        weight[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / params.temperature);

    std::size_t kept = vocab;  // survivors are ranked[0, kept)
    if (params.top_k > 0) kept = std::min(kept, static_cast<std::size_t>(params.top_k));
    if (params.top_p < 1) {
        double total = 0;
        for (std::size_t r = 0; r < kept; ++r) total += weight[ranked[r]];
        double before = 0;
        std::size_t r = 0;
        while (r < kept && before < params.top_p) before += weight[ranked[r++]] / total;
        double const before_last = before - weight[ranked[r - 1]] / total;
        BOOST_REQUIRE_MESSAGE(
            before - params.top_p > boundary_margin && params.top_p - before_last > boundary_margin,
            "top-p boundary too close to call; pick another seed");
        kept = r;
    }
    std::vector<double> probability(vocab, 0.0);
    for (std::size_t r = 0; r < kept; ++r) {
        std::size_t const token = ranked[r];
        double const ratio_to_best = weight[token];  // the best token has weight 1
        if (params.min_p > 0) {
            BOOST_REQUIRE_MESSAGE(std::abs(ratio_to_best - params.min_p) > boundary_margin,
                                  "min-p boundary too close to call; pick another seed");
            if (ratio_to_best < params.min_p) continue;
        }
        probability[token] = weight[token];
    }
    double const total = std::accumulate(probability.begin(), probability.end(), 0.0);
    for (double& p : probability) p /= total;
    return probability;
}

std::vector<long> draw_counts(std::vector<float> const& logits, SamplingParams const& params,
                              std::uint64_t request_id) {
    std::int32_t const vocab = static_cast<std::int32_t>(logits.size());
    tinfer::kernels::SamplingWorkspace workspace(vocab);
    std::vector<long> counts(logits.size(), 0);
    for (int step = 0; step < draws_per_setting; ++step) {
        auto const sampled = tinfer::kernels::sample_token(
            logits, params, {}, request_id, static_cast<std::uint32_t>(step), workspace);
        BOOST_REQUIRE(sampled.token >= 0 && sampled.token < vocab);
        ++counts[static_cast<std::size_t>(sampled.token)];
    }
    return counts;
}

struct Setting {
    std::string name;
    SamplingParams params;
};

std::vector<float> synthetic_logits(std::uint64_t seed, std::size_t vocab) {
    auto rng = tinfer::testing::seeded_rng(seed);
    std::normal_distribution<float> logit(0.0f, 2.0f);
    std::vector<float> logits(vocab);
    for (float& x : logits) x = logit(rng);
    return logits;
}

constexpr std::size_t synthetic_vocab = 128;

}  // namespace

BOOST_AUTO_TEST_SUITE(sampler_statistics)

BOOST_AUTO_TEST_CASE(chi_square_survival_matches_closed_forms) {
    // Two degrees of freedom: Q = exp(-x/2). One: Q = erfc(sqrt(x/2)). Both branches of the
    // incomplete gamma are reached (x/2 below and above a + 1).
    for (double const x : {0.1, 1.0, 3.0, 10.0, 40.0}) {
        BOOST_TEST(chi_square_survival(x, 2) == std::exp(-x / 2),
                   boost::test_tools::tolerance(1e-12));
        BOOST_TEST(chi_square_survival(x, 1) == std::erfc(std::sqrt(x / 2)),
                   boost::test_tools::tolerance(1e-10));
    }
    // Tabulated critical value: chi-square with 10 degrees of freedom exceeds 29.588 with
    // probability 0.001.
    BOOST_TEST(chi_square_survival(29.588, 10) == 0.001, boost::test_tools::tolerance(1e-3));
}

BOOST_AUTO_TEST_CASE(draws_follow_the_filtered_distribution) {
    std::vector<float> const logits = synthetic_logits(20240601, synthetic_vocab);
    auto const with = [](auto&& setter) {
        SamplingParams params;
        params.seed = 0x5eed;
        setter(params);
        return params;
    };
    std::vector<Setting> const settings = {
        {"temperature 0.7", with([](SamplingParams& p) { p.temperature = 0.7f; })},
        {"temperature 1.5", with([](SamplingParams& p) { p.temperature = 1.5f; })},
        {"top-k 5", with([](SamplingParams& p) { p.top_k = 5; })},
        {"top-p 0.9", with([](SamplingParams& p) { p.top_p = 0.9f; })},
        {"min-p 0.1", with([](SamplingParams& p) { p.min_p = 0.1f; })},
        {"temperature 0.8 + top-k 20 + top-p 0.9", with([](SamplingParams& p) {
             p.temperature = 0.8f;
             p.top_k = 20;
             p.top_p = 0.9f;
         })},
        {"temperature 1.2 + top-p 0.8 + min-p 0.05", with([](SamplingParams& p) {
             p.temperature = 1.2f;
             p.top_p = 0.8f;
             p.min_p = 0.05f;
         })},
        {"temperature 0.7 + top-k 10 + top-p 0.95 + min-p 0.1", with([](SamplingParams& p) {
             p.temperature = 0.7f;
             p.top_k = 10;
             p.top_p = 0.95f;
             p.min_p = 0.1f;
         })},
    };
    std::uint64_t request_id = 0;
    for (Setting const& setting : settings) {
        BOOST_TEST_CONTEXT(setting.name) {
            std::vector<double> const expected = filtered_distribution(logits, setting.params);
            std::vector<long> const observed = draw_counts(logits, setting.params, request_id++);
            long drawn_outside = 0;
            std::size_t support = 0;
            for (std::size_t token = 0; token < expected.size(); ++token) {
                if (expected[token] == 0) drawn_outside += observed[token];
                support += expected[token] > 0;
            }
            BOOST_TEST(drawn_outside == 0, "tokens outside the filtered set were drawn");
            ChiSquare const test = chi_square(observed, expected, draws_per_setting);
            BOOST_TEST_MESSAGE(setting.name << ": support " << support << " tokens, chi2 "
                                            << test.statistic << " with " << test.degrees_of_freedom
                                            << " dof, p " << test.p_value);
            BOOST_TEST(test.p_value > significance);
        }
    }
}

// The test has power: draws at temperature 0.7 are told apart from the temperature-1 law.
BOOST_AUTO_TEST_CASE(chi_square_rejects_the_wrong_distribution) {
    std::vector<float> const logits = synthetic_logits(20240601, synthetic_vocab);
    SamplingParams sampled;
    sampled.temperature = 0.7f;
    SamplingParams other;
    other.temperature = 1.0f;
    ChiSquare const test = chi_square(draw_counts(logits, sampled, 0),
                                      filtered_distribution(logits, other), draws_per_setting);
    BOOST_TEST_MESSAGE("temperature 0.7 draws vs temperature 1 law: chi2 "
                       << test.statistic << " with " << test.degrees_of_freedom << " dof, p "
                       << test.p_value);
    BOOST_TEST(test.p_value < significance);
}

// At the real vocabulary size (SmolLM2: 49152) nothing outside the filtered set is ever drawn.
BOOST_AUTO_TEST_CASE(filtered_tokens_are_never_drawn_at_full_vocab) {
    constexpr std::size_t vocab = 49152;
    constexpr int draws = 2000;
    std::vector<float> const logits = synthetic_logits(777, vocab);
    SamplingParams top_p;
    top_p.top_p = 0.5f;
    SamplingParams top_k;
    top_k.top_k = 40;
    top_k.temperature = 2.0f;
    SamplingParams min_p;
    min_p.min_p = 0.2f;
    for (SamplingParams const& params : {top_p, top_k, min_p}) {
        std::vector<double> const expected = filtered_distribution(logits, params);
        tinfer::kernels::SamplingWorkspace workspace(static_cast<std::int32_t>(vocab));
        long drawn_outside = 0;
        for (int step = 0; step < draws; ++step) {
            auto const sampled = tinfer::kernels::sample_token(
                logits, params, {}, 3, static_cast<std::uint32_t>(step), workspace);
            drawn_outside += expected[static_cast<std::size_t>(sampled.token)] == 0;
        }
        BOOST_TEST(drawn_outside == 0);
    }
}

BOOST_AUTO_TEST_SUITE_END()
