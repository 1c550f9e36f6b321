// The sampler's deterministic parts against float64 references: greedy choice, penalties and
// bias, log-probabilities, reproducibility of draws, and rejection of nonsense settings.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/sampling.hpp>
#include "testing.hpp"

namespace {

using tinfer::kernels::SampledToken;
using tinfer::kernels::SamplingParams;
using tinfer::kernels::SamplingWorkspace;
using tinfer::kernels::TokenHistory;

std::vector<std::int32_t> random_tokens(std::mt19937_64& rng, std::size_t count,
                                        std::int32_t vocab) {
    std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
    std::vector<std::int32_t> tokens(count);
    for (auto& t : tokens) t = token(rng);
    return tokens;
}

// Penalties and bias in float64, written from the definitions: repetition over the distinct
// tokens of prompt + output, frequency and presence over output counts, then bias.
std::vector<double> penalised_reference(std::vector<float> const& logits,
                                        SamplingParams const& params,
                                        std::vector<std::int32_t> const& prompt,
                                        std::vector<std::int32_t> const& output) {
    std::vector<double> result(logits.begin(), logits.end());
    std::set<std::int32_t> seen(prompt.begin(), prompt.end());
    seen.insert(output.begin(), output.end());
    std::map<std::int32_t, int> count;
    for (std::int32_t const t : output) ++count[t];
    for (std::int32_t const t : seen) {
        double& x = result[static_cast<std::size_t>(t)];
        x = x > 0 ? x / params.repetition_penalty : x * params.repetition_penalty;
        if (auto const found = count.find(t); found != count.end())
            x -= params.frequency_penalty * found->second + params.presence_penalty;
    }
    for (auto const& [token, bias] : params.logit_bias)
        result[static_cast<std::size_t>(token)] += bias;
    return result;
}

std::vector<double> log_softmax_reference(std::vector<float> const& logits) {
    double const max = *std::ranges::max_element(logits);
    double sum = 0;
    for (float const x : logits) sum += std::exp(x - max);
    std::vector<double> result;
    for (float const x : logits) result.push_back(x - max - std::log(sum));
    return result;
}

SampledToken sample(std::vector<float> const& logits, SamplingParams const& params,
                    SamplingWorkspace& workspace, std::uint64_t request = 0, std::uint32_t step = 0,
                    TokenHistory history = {}) {
    return tinfer::kernels::sample_token(logits, params, history, request, step, workspace);
}

template <class Action>
void expect_request_error(Action&& action, std::string const& mentions) {
    BOOST_CHECK_EXCEPTION(action(), tinfer::RequestError, [&](tinfer::RequestError const& e) {
        bool const names_it = std::string(e.what()).find(mentions) != std::string::npos;
        BOOST_TEST_INFO("message: " << e.what());
        BOOST_TEST(names_it);
        return names_it;
    });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sampler)

BOOST_AUTO_TEST_CASE(greedy_is_argmax_with_ties_to_lowest_id) {
    auto rng = tinfer::testing::seeded_rng(11);
    constexpr std::int32_t vocab = 200;
    SamplingWorkspace workspace(vocab);
    SamplingParams greedy;
    greedy.temperature = 0;
    greedy.top_k = 3;  // filters cannot change an argmax
    greedy.top_p = 0.5f;
    for (int trial = 0; trial < 50; ++trial) {
        std::vector<float> logits = tinfer::testing::random_floats(rng, vocab, -5, 5);
        std::int32_t const expected =
            static_cast<std::int32_t>(std::ranges::max_element(logits) - logits.begin());
        for (std::uint32_t step = 0; step < 4; ++step)
            BOOST_TEST(sample(logits, greedy, workspace, trial, step).token == expected);
    }
    std::vector<float> tied(vocab, -1.0f);
    tied[150] = tied[42] = tied[97] = 3.0f;
    BOOST_TEST(sample(tied, greedy, workspace).token == 42);
    // top_k = 1 at any temperature is also argmax with the same tie rule.
    SamplingParams top_one;
    top_one.top_k = 1;
    for (std::uint32_t step = 0; step < 100; ++step)
        BOOST_TEST(sample(tied, top_one, workspace, 5, step).token == 42);
}

// The blocked argmax against a running scalar one (the loop it replaced): lengths around its
// block of 64, values drawn from a few levels so that ties fall inside and across blocks, -inf
// runs, and both zeros (equal under `>`: the first of them wins).
BOOST_AUTO_TEST_CASE(first_argmax_is_the_first_largest_above_minus_infinity) {
    auto rng = tinfer::testing::seeded_rng(12);
    constexpr float minus_infinity = -std::numeric_limits<float>::infinity();
    std::vector<float> const levels = {minus_infinity, -2.0f, -0.0f, 0.0f, 1.5f, 3.0f};
    std::uniform_int_distribution<std::size_t> level(0, levels.size() - 1);
    std::uniform_int_distribution<int> length(0, 300);
    auto const scalar_argmax = [](std::vector<float> const& x) {
        std::int32_t best = -1;
        for (std::size_t i = 0; i < x.size(); ++i)
            if (x[i] > (best < 0 ? minus_infinity : x[static_cast<std::size_t>(best)]))
                best = static_cast<std::int32_t>(i);
        return best;
    };
    int found = 0;
    for (int trial = 0; trial < 2000; ++trial) {
        std::vector<float> x(static_cast<std::size_t>(length(rng)));
        // A trial draws from the levels up to a random top, so the largest value is often a
        // tie and sometimes a zero or -inf everywhere.
        std::size_t const top = level(rng);
        for (float& v : x) v = levels[std::min(level(rng), top)];
        std::int32_t const expected = scalar_argmax(x);
        BOOST_TEST_INFO("trial " << trial << ", length " << x.size());
        BOOST_TEST(tinfer::kernels::first_argmax(x) == expected);
        found += expected >= 0;
    }
    BOOST_TEST(found > 1000);  // most trials have a finite maximum, some have none
    std::vector<float> zeros(130, minus_infinity);
    zeros[100] = 0.0f;
    zeros[70] = -0.0f;  // equal to +0 under `>`, and first
    BOOST_TEST(tinfer::kernels::first_argmax(zeros) == 70);
}

BOOST_AUTO_TEST_CASE(same_position_gives_same_token_other_steps_other_streams) {
    auto rng = tinfer::testing::seeded_rng(12);
    constexpr std::int32_t vocab = 100;
    constexpr std::uint32_t steps = 200;
    std::vector<float> const flat(vocab, 0.0f);  // uniform: every draw shows the stream
    SamplingParams params;
    params.seed = 987654321;
    SamplingWorkspace workspace(vocab), other_workspace(vocab);

    std::vector<std::int32_t> first, again, other_request, other_seed;
    std::vector<float> const noise = tinfer::testing::random_floats(rng, vocab, -3, 3);
    for (std::uint32_t step = 0; step < steps; ++step) {
        first.push_back(sample(flat, params, workspace, 1, step).token);
        // Unrelated work between draws (another request, other logits) changes nothing.
        sample(noise, params, workspace, 2, step);
    }
    for (std::uint32_t step = 0; step < steps; ++step)
        again.push_back(sample(flat, params, other_workspace, 1, step).token);
    BOOST_TEST(first == again, boost::test_tools::per_element());

    for (std::uint32_t step = 0; step < steps; ++step)
        other_request.push_back(sample(flat, params, workspace, 3, step).token);
    SamplingParams reseeded = params;
    reseeded.seed = params.seed + 1;
    for (std::uint32_t step = 0; step < steps; ++step)
        other_seed.push_back(sample(flat, reseeded, workspace, 1, step).token);
    // Independent uniform streams over 100 tokens agree at a step with probability 1/100.
    auto const agreements = [&](std::vector<std::int32_t> const& other) {
        int same = 0;
        for (std::uint32_t i = 0; i < steps; ++i) same += first[i] == other[i];
        return same;
    };
    constexpr int max_chance_agreements = 12;  // mean 2, P(>= 12) < 1e-5
    BOOST_TEST(agreements(other_request) < max_chance_agreements);
    BOOST_TEST(agreements(other_seed) < max_chance_agreements);
    // Different steps differ: consecutive tokens of one stream are not all the same.
    BOOST_TEST(std::set<std::int32_t>(first.begin(), first.end()).size() > 50u);
}

BOOST_AUTO_TEST_CASE(penalties_and_bias_match_float64_reference) {
    auto rng = tinfer::testing::seeded_rng(13);
    constexpr std::int32_t vocab = 300;
    SamplingWorkspace workspace(vocab);
    for (int trial = 0; trial < 20; ++trial) {
        std::vector<float> const logits = tinfer::testing::random_floats(rng, vocab, -8, 8);
        std::vector<std::int32_t> const prompt = random_tokens(rng, 60, vocab);
        std::vector<std::int32_t> const output = random_tokens(rng, 40, vocab);
        SamplingParams params;
        params.repetition_penalty = 1.0f + 0.1f * static_cast<float>(trial % 5);
        params.presence_penalty = 0.25f * static_cast<float>(trial % 3);
        params.frequency_penalty = -0.5f + 0.2f * static_cast<float>(trial % 4);
        params.logit_bias = {{5, 2.5f}, {17, -3.0f}, {output[0], 1.0f}, {5, 0.5f}};

        std::vector<float> penalised = logits;
        tinfer::kernels::apply_penalties_and_bias(penalised, params, {prompt, output}, workspace);
        std::vector<double> const expected = penalised_reference(logits, params, prompt, output);
        // A few float operations per logit (scale, two multiply-adds, bias): a few ulps.
        double const max_magnitude = 20;
        double const rtol = 8 * std::numeric_limits<float>::epsilon();
        double const atol = rtol * max_magnitude;
        double const error =
            tinfer::testing::scaled_error<float, double>(penalised, expected, atol, rtol);
        BOOST_TEST(error <= 1.0);
        // The workspace returns to its resting state: the same call again gives the same result.
        std::vector<float> again = logits;
        tinfer::kernels::apply_penalties_and_bias(again, params, {prompt, output}, workspace);
        BOOST_TEST(again == penalised, boost::test_tools::per_element());
        BOOST_TEST(std::ranges::all_of(workspace.output_counts, [](auto c) { return c == 0; }));
        BOOST_TEST(std::ranges::all_of(workspace.marks, [](auto m) { return m == 0; }));
    }
}

BOOST_AUTO_TEST_CASE(penalties_steer_greedy_choice) {
    constexpr std::int32_t vocab = 10;
    SamplingWorkspace workspace(vocab);
    std::vector<float> logits(vocab, 0.0f);
    logits[3] = 2.0f;
    logits[7] = 1.5f;
    std::vector<std::int32_t> const prompt = {3};
    std::vector<std::int32_t> const output = {};
    SamplingParams greedy;
    greedy.temperature = 0;
    BOOST_TEST(sample(logits, greedy, workspace, 0, 0, {prompt, output}).token == 3);
    greedy.repetition_penalty = 1.5f;  // 2 / 1.5 < 1.5
    BOOST_TEST(sample(logits, greedy, workspace, 0, 0, {prompt, output}).token == 7);
    greedy.repetition_penalty = 1;
    greedy.logit_bias = {{3, -std::numeric_limits<float>::infinity()}};
    BOOST_TEST(sample(logits, greedy, workspace).token == 7);
    greedy.logit_bias = {{0, 5.0f}};
    BOOST_TEST(sample(logits, greedy, workspace).token == 0);
    // A banned token is never drawn, whatever the temperature.
    SamplingParams hot;
    hot.temperature = 5;
    hot.logit_bias = {{3, -std::numeric_limits<float>::infinity()}};
    for (std::uint32_t step = 0; step < 2000; ++step)
        BOOST_TEST_REQUIRE(sample(logits, hot, workspace, 0, step).token != 3);
}

BOOST_AUTO_TEST_CASE(logprobs_match_float64_log_softmax_of_raw_logits) {
    auto rng = tinfer::testing::seeded_rng(14);
    constexpr std::int32_t vocab = 500;
    SamplingWorkspace workspace(vocab);
    SamplingParams params;
    params.temperature = 0.6f;
    params.top_k = 50;
    params.repetition_penalty = 1.3f;
    params.logprobs = true;
    params.top_logprobs = 7;
    std::vector<std::int32_t> const prompt = {1, 2, 3};
    for (std::uint32_t step = 0; step < 30; ++step) {
        std::vector<float> const logits = tinfer::testing::random_floats(rng, vocab, -10, 10);
        std::vector<double> const reference = log_softmax_reference(logits);
        SampledToken const sampled = sample(logits, params, workspace, 9, step, {prompt, {}});

        double const max_magnitude = 30;  // |logit - log normaliser| stays below this here
        double const rtol = 4 * std::numeric_limits<float>::epsilon();
        double const atol = rtol * max_magnitude;
        BOOST_TEST_REQUIRE(sampled.logprob.has_value());
        std::vector<float> const got_chosen = {*sampled.logprob};
        std::vector<double> const want_chosen = {
            reference[static_cast<std::size_t>(sampled.token)]};
        double const chosen_error =
            tinfer::testing::scaled_error<float, double>(got_chosen, want_chosen, atol, rtol);
        BOOST_TEST(chosen_error <= 1.0);

        std::vector<std::int32_t> order(vocab);
        std::iota(order.begin(), order.end(), 0);
        std::ranges::stable_sort(order, [&](auto a, auto b) { return logits[a] > logits[b]; });
        BOOST_TEST_REQUIRE(sampled.top_logprobs.size() == 7u);
        std::vector<float> got_top;
        std::vector<double> want_top;
        for (std::size_t i = 0; i < sampled.top_logprobs.size(); ++i) {
            BOOST_TEST(sampled.top_logprobs[i].token == order[i]);
            got_top.push_back(sampled.top_logprobs[i].logprob);
            want_top.push_back(reference[static_cast<std::size_t>(order[i])]);
        }
        double const top_error =
            tinfer::testing::scaled_error<float, double>(got_top, want_top, atol, rtol);
        BOOST_TEST(top_error <= 1.0);
    }
    // Not asked for, not computed; the chosen token alone when no alternatives are wanted.
    SamplingParams quiet = params;
    quiet.logprobs = false;
    quiet.top_logprobs = 0;
    SampledToken const silent =
        sample(tinfer::testing::random_floats(rng, vocab), quiet, workspace);
    BOOST_TEST(!silent.logprob.has_value());
    BOOST_TEST(silent.top_logprobs.empty());
    quiet.logprobs = true;
    SampledToken const chosen_only =
        sample(tinfer::testing::random_floats(rng, vocab), quiet, workspace);
    BOOST_TEST(chosen_only.logprob.has_value());
    BOOST_TEST(chosen_only.top_logprobs.empty());

    // More alternatives asked for than the vocabulary has: all of it, in order.
    SamplingWorkspace tiny(3);
    params.top_k = 0;
    params.repetition_penalty = 1;
    std::vector<float> const three = {0.5f, 2.0f, 0.5f};
    SampledToken const all = sample(three, params, tiny);
    BOOST_TEST_REQUIRE(all.top_logprobs.size() == 3u);
    BOOST_TEST(all.top_logprobs[0].token == 1);
    BOOST_TEST(all.top_logprobs[1].token == 0);
    BOOST_TEST(all.top_logprobs[2].token == 2);
}

BOOST_AUTO_TEST_CASE(nonsense_settings_are_rejected_with_the_field_named) {
    constexpr std::int32_t vocab = 16;
    SamplingWorkspace workspace(vocab);
    std::vector<float> const logits(vocab, 0.0f);
    auto const rejects = [&](auto&& change, std::string const& field) {
        SamplingParams params;
        change(params);
        expect_request_error([&] { tinfer::kernels::validate(params, vocab); }, field);
        expect_request_error([&] { sample(logits, params, workspace); }, field);
    };
    float const nan = std::numeric_limits<float>::quiet_NaN();
    float const inf = std::numeric_limits<float>::infinity();
    rejects([](SamplingParams& p) { p.temperature = -0.5f; }, "temperature");
    rejects([&](SamplingParams& p) { p.temperature = nan; }, "temperature");
    rejects([&](SamplingParams& p) { p.temperature = inf; }, "temperature");
    rejects([](SamplingParams& p) { p.top_k = -1; }, "top_k");
    rejects([](SamplingParams& p) { p.top_p = 0; }, "top_p");
    rejects([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
    rejects([&](SamplingParams& p) { p.top_p = nan; }, "top_p");
    rejects([](SamplingParams& p) { p.min_p = -0.1f; }, "min_p");
    rejects([](SamplingParams& p) { p.min_p = 2; }, "min_p");
    rejects([](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
    rejects([&](SamplingParams& p) { p.presence_penalty = nan; }, "presence_penalty");
    rejects([&](SamplingParams& p) { p.frequency_penalty = inf; }, "frequency_penalty");
    rejects([&](SamplingParams& p) { p.logit_bias = {{vocab, 1.0f}}; }, "logit_bias token");
    rejects([](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }, "logit_bias token");
    rejects([&](SamplingParams& p) { p.logit_bias = {{0, inf}}; }, "logit_bias value");
    rejects([](SamplingParams& p) { p.top_logprobs = -1; }, "top_logprobs");
    rejects([](SamplingParams& p) { p.top_logprobs = tinfer::kernels::max_top_logprobs + 1; },
            "top_logprobs");

    // Sensible edge values pass.
    SamplingParams edges;
    edges.top_p = 1;
    edges.min_p = 1;
    edges.top_k = vocab * 2;
    edges.top_logprobs = tinfer::kernels::max_top_logprobs;
    edges.logit_bias = {{0, -inf}};
    BOOST_CHECK_NO_THROW(tinfer::kernels::validate(edges, vocab));
    BOOST_TEST(sample(logits, edges, workspace).token != 0);

    // History tokens outside the vocabulary, and nothing left to sample.
    std::vector<std::int32_t> const bad_history = {3, vocab};
    SamplingParams penalised;
    penalised.repetition_penalty = 1.2f;
    expect_request_error(
        [&] {
            sample(logits, penalised, workspace, 0, 0, {bad_history, {}});
        },
        "outside the vocabulary");
    SamplingParams ban_all;
    for (std::int32_t t = 0; t < vocab; ++t) ban_all.logit_bias.emplace_back(t, -inf);
    expect_request_error([&] { sample(logits, ban_all, workspace); }, "nothing can be sampled");
    BOOST_TEST(std::ranges::all_of(workspace.marks, [](auto m) { return m == 0; }));
}

BOOST_AUTO_TEST_CASE(masked_logits_and_tiny_temperature) {
    constexpr std::int32_t vocab = 64;
    SamplingWorkspace workspace(vocab);
    std::vector<float> logits(vocab, -std::numeric_limits<float>::infinity());
    logits[10] = 1.0f;
    logits[20] = 1.0f - 1e-3f;
    logits[30] = -50.0f;
    SamplingParams params;
    std::set<std::int32_t> drawn;
    for (std::uint32_t step = 0; step < 1000; ++step)
        drawn.insert(sample(logits, params, workspace, 0, step).token);
    BOOST_TEST((drawn == std::set<std::int32_t>{10, 20}));  // -50 is reachable but ~e^-51 likely
    // A temperature so small that (logit - max) / T overflows still picks the best token.
    params.temperature = 1e-30f;
    for (std::uint32_t step = 0; step < 100; ++step)
        BOOST_TEST(sample(logits, params, workspace, 0, step).token == 10);
    std::vector<float> bad = logits;
    bad[5] = std::numeric_limits<float>::quiet_NaN();
    BOOST_CHECK_THROW(sample(bad, params, workspace), tinfer::Error);
}

BOOST_AUTO_TEST_SUITE_END()
