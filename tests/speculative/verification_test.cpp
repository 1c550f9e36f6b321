// verify_drafts on hand-made logits: the greedy rule, penalties that see accepted drafts, the
// sampling rule's edge cases, agreement with sample_token when nothing is drafted, and stats.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/kernels/sampling.hpp>
#include <tinfer/speculative/speculative.hpp>
#include "testing.hpp"

namespace {

using tinfer::kernels::SamplingParams;
using tinfer::spec::DraftProposal;
using tinfer::spec::SequenceView;
using tinfer::spec::SpeculativeWorkspace;
using tinfer::spec::Verdict;

constexpr std::int32_t small_vocab = 6;

// Rows whose argmax is the given token: that token gets logit 3, the others count up from 0.
std::vector<float> rows_with_argmax(std::vector<std::int32_t> const& argmaxes) {
    std::vector<float> rows;
    for (std::int32_t const best : argmaxes)
        for (std::int32_t token = 0; token < small_vocab; ++token)
            rows.push_back(token == best ? 3.0f : 0.1f * static_cast<float>(token));
    return rows;
}

DraftProposal deterministic(std::vector<std::int32_t> const& tokens) {
    DraftProposal proposal;
    for (std::int32_t const token : tokens) proposal.add(token);
    return proposal;
}

SamplingParams greedy() {
    SamplingParams params;
    params.temperature = 0;
    return params;
}

Verdict verify(std::vector<std::int32_t> const& context, DraftProposal const& proposal,
               std::vector<float> const& rows, SamplingParams const& params,
               std::size_t prompt_length = 1, std::uint64_t request_id = 0) {
    SpeculativeWorkspace workspace(static_cast<std::int32_t>(rows.size() / (proposal.size() + 1)));
    return tinfer::spec::verify_drafts({context, prompt_length, request_id}, proposal, rows, params,
                                       workspace);
}

std::vector<float> random_rows(std::mt19937_64& rng, int count, std::int32_t vocab) {
    return tinfer::testing::random_floats(rng, static_cast<std::size_t>(count) * vocab, -3.f, 3.f);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(speculative_verification)

BOOST_AUTO_TEST_CASE(greedy_accepts_matching_drafts_then_the_bonus_token) {
    std::vector<std::int32_t> const context = {0, 5};
    std::vector<float> const rows = rows_with_argmax({2, 4, 1});
    BOOST_TEST((verify(context, deterministic({2, 4}), rows, greedy()) == Verdict{2, 1}));
}

BOOST_AUTO_TEST_CASE(greedy_stops_at_the_first_mismatch_with_the_target_token) {
    std::vector<std::int32_t> const context = {0, 5};
    std::vector<float> const rows = rows_with_argmax({2, 4, 1});
    BOOST_TEST((verify(context, deterministic({2, 3}), rows, greedy()) == Verdict{1, 4}));
    BOOST_TEST((verify(context, deterministic({5, 4}), rows, greedy()) == Verdict{0, 2}));
}

BOOST_AUTO_TEST_CASE(greedy_without_drafts_is_one_greedy_token) {
    std::vector<std::int32_t> const context = {0};
    BOOST_TEST(
        (verify(context, deterministic({}), rows_with_argmax({3}), greedy()) == Verdict{0, 3}));
}

BOOST_AUTO_TEST_CASE(greedy_ties_go_to_the_lower_token_like_sample_token) {
    std::vector<float> const rows = {0.f, 2.f, 0.f, 2.f, 0.f, 0.f, 0.f, 2.f, 0.f, 2.f, 0.f, 0.f};
    std::vector<std::int32_t> const context = {0};
    BOOST_TEST((verify(context, deterministic({3}), rows, greedy()) == Verdict{0, 1}));
    BOOST_TEST((verify(context, deterministic({1}), rows, greedy()) == Verdict{1, 1}));
}

// The target distribution at draft i counts drafts [0, i) as generated output: a presence
// penalty on token 0 after it was drafted turns the argmax to token 1, and once both are
// penalised back to token 0.
BOOST_AUTO_TEST_CASE(penalties_see_the_drafts_before_each_position) {
    std::vector<float> row(small_vocab, 0.f);
    row[0] = 2.0f;
    row[1] = 1.9f;
    std::vector<float> rows;
    for (int i = 0; i < 3; ++i) rows.insert(rows.end(), row.begin(), row.end());
    SamplingParams params = greedy();
    params.presence_penalty = 0.5f;
    std::vector<std::int32_t> const context = {4};  // prompt only, nothing generated
    BOOST_TEST((verify(context, deterministic({0, 1}), rows, params) == Verdict{2, 0}));
    BOOST_TEST((verify(context, deterministic({0, 0}), rows, params) == Verdict{1, 1}));
}

// Greedy verification picks, at every position, exactly the token sample_token picks there
// with the same settings and the drafts as history: checked on random rows with penalties.
BOOST_AUTO_TEST_CASE(greedy_verification_agrees_with_sample_token) {
    auto rng = tinfer::testing::seeded_rng(8101);
    constexpr std::int32_t vocab = 32;
    constexpr int gamma = 4;
    SamplingParams params = greedy();
    params.repetition_penalty = 1.5f;
    params.frequency_penalty = 0.3f;
    tinfer::kernels::SamplingWorkspace sampling(vocab);
    SpeculativeWorkspace workspace(vocab);
    std::uniform_int_distribution<std::int32_t> any_token(0, vocab - 1);
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<float> const rows = random_rows(rng, gamma + 1, vocab);
        std::vector<std::int32_t> tokens = {any_token(rng), any_token(rng), any_token(rng)};
        std::size_t const prompt_length = 2;
        // The greedy chain, token by token, as plain decoding would produce it.
        std::vector<std::int32_t> chain;
        std::vector<std::int32_t> history(tokens.begin() + prompt_length, tokens.end());
        for (int i = 0; i <= gamma; ++i) {
            auto const token =
                tinfer::kernels::sample_token(
                    std::span(rows).subspan(static_cast<std::size_t>(i) * vocab, vocab), params,
                    {std::span(tokens).first(prompt_length), history}, 0, 0, sampling)
                    .token;
            chain.push_back(token);
            history.push_back(token);
        }
        int const wrong_at = trial % (gamma + 1);  // gamma: every draft right
        DraftProposal proposal;
        for (int i = 0; i < gamma; ++i)
            proposal.add(i == wrong_at ? (chain[i] + 1) % vocab : chain[i]);
        Verdict const verdict = tinfer::spec::verify_drafts({tokens, prompt_length, 0}, proposal,
                                                            rows, params, workspace);
        BOOST_TEST(verdict.accepted_drafts == wrong_at);
        BOOST_TEST(verdict.next_token == chain[wrong_at]);
    }
}

// With nothing drafted, the round's token is the one sample_token draws at the same step
// (draw index 0 of the stream discipline), bit for bit, whatever the filters and penalties.
BOOST_AUTO_TEST_CASE(no_drafts_draws_exactly_what_sample_token_draws) {
    auto rng = tinfer::testing::seeded_rng(8102);
    constexpr std::int32_t vocab = 64;
    tinfer::kernels::SamplingWorkspace sampling(vocab);
    SpeculativeWorkspace workspace(vocab);
    SamplingParams params;
    params.seed = 99;
    params.temperature = 0.9f;
    params.top_k = 40;
    params.top_p = 0.9f;
    params.min_p = 0.02f;
    params.presence_penalty = 0.4f;
    params.logit_bias = {{3, 1.5f}};
    std::vector<std::int32_t> const tokens = {1, 2, 3, 4, 5, 3, 3};
    std::size_t const prompt_length = 4;
    DraftProposal const nothing;
    int differences = 0;
    std::vector<std::int32_t> seen;
    for (std::uint64_t request = 0; request < 500; ++request) {
        std::vector<float> const rows = random_rows(rng, 1, vocab);
        auto const expected =
            tinfer::kernels::sample_token(
                rows, params,
                {std::span(tokens).first(prompt_length), std::span(tokens).subspan(prompt_length)},
                request, 3, sampling)
                .token;
        Verdict const verdict = tinfer::spec::verify_drafts({tokens, prompt_length, request},
                                                            nothing, rows, params, workspace);
        differences += verdict != Verdict{0, expected};
        seen.push_back(expected);
    }
    BOOST_TEST(differences == 0);
    std::ranges::sort(seen);
    auto const distinct = std::ranges::unique(seen).begin() - seen.begin();
    BOOST_TEST(distinct > 10, "the draws vary");
}

BOOST_AUTO_TEST_CASE(identical_draft_and_target_distributions_accept_everything) {
    auto rng = tinfer::testing::seeded_rng(8103);
    constexpr std::int32_t vocab = 16;
    constexpr int gamma = 5;
    SamplingParams params;
    params.seed = 7;
    SpeculativeWorkspace workspace(vocab);
    tinfer::kernels::SamplingWorkspace sampling(vocab);
    std::vector<double> q(vocab);
    std::vector<std::int32_t> const context = {0};
    for (std::uint64_t request = 0; request < 300; ++request) {
        std::vector<float> const rows = random_rows(rng, gamma + 1, vocab);
        DraftProposal proposal;
        std::vector<std::int32_t> history;
        for (int i = 0; i < gamma; ++i) {
            auto const row = std::span(rows).subspan(static_cast<std::size_t>(i) * vocab, vocab);
            auto const weights =
                tinfer::spec::filtered_weights(row, params, {context, history}, sampling, q);
            // Any token of positive weight: acceptance must not depend on which.
            std::int32_t token = static_cast<std::int32_t>((request + i) % vocab);
            while (q[token] == 0) token = (token + 1) % vocab;
            proposal.add(token, q, weights.total);
            history.push_back(token);
        }
        Verdict const verdict =
            tinfer::spec::verify_drafts({context, 1, request}, proposal, rows, params, workspace);
        BOOST_TEST_REQUIRE(verdict.accepted_drafts == gamma);
    }
}

// A draft the target's filters exclude (banned by logit bias here) is always rejected, and the
// residual never hands it back.
BOOST_AUTO_TEST_CASE(a_draft_the_target_excludes_is_always_rejected) {
    auto rng = tinfer::testing::seeded_rng(8104);
    constexpr std::int32_t vocab = 8;
    constexpr std::int32_t banned = 5;
    SamplingParams params;
    params.seed = 11;
    params.logit_bias = {{banned, -std::numeric_limits<float>::infinity()}};
    SpeculativeWorkspace workspace(vocab);
    std::vector<std::int32_t> const context = {0};
    std::vector<double> q(vocab, 1.0);  // uniform draft distribution
    for (std::uint64_t request = 0; request < 500; ++request) {
        std::vector<float> const rows = random_rows(rng, 2, vocab);
        DraftProposal proposal;
        proposal.add(banned, q, vocab);
        Verdict const verdict =
            tinfer::spec::verify_drafts({context, 1, request}, proposal, rows, params, workspace);
        BOOST_TEST_REQUIRE(verdict.accepted_drafts == 0);
        BOOST_TEST_REQUIRE(verdict.next_token != banned);
    }
}

BOOST_AUTO_TEST_CASE(verdicts_depend_only_on_the_stream_position) {
    auto rng = tinfer::testing::seeded_rng(8105);
    constexpr std::int32_t vocab = 16;
    std::vector<float> const rows = random_rows(rng, 4, vocab);
    std::vector<double> const q(vocab, 1.0);
    DraftProposal proposal;
    for (std::int32_t const token : {3, 7, 1}) proposal.add(token, q, vocab);
    SamplingParams params;
    params.seed = 5;
    std::vector<std::int32_t> const context = {2, 9};
    std::vector<Verdict> first;
    SpeculativeWorkspace workspace(vocab);
    for (std::uint64_t request = 0; request < 50; ++request)
        first.push_back(
            tinfer::spec::verify_drafts({context, 1, request}, proposal, rows, params, workspace));
    // Again, with a fresh workspace and in reverse order.
    SpeculativeWorkspace fresh(vocab);
    int differences = 0;
    for (std::uint64_t request = 50; request-- > 0;)
        differences += tinfer::spec::verify_drafts({context, 1, request}, proposal, rows, params,
                                                   fresh) != first[request];
    BOOST_TEST(differences == 0);
    BOOST_TEST(std::ranges::count(first, first.front()) < 50, "requests get different draws");
}

BOOST_AUTO_TEST_CASE(malformed_rounds_are_refused) {
    std::vector<std::int32_t> const context = {0};
    std::vector<float> const one_row = rows_with_argmax({1});
    SpeculativeWorkspace workspace(small_vocab);
    // Two drafts need three rows.
    BOOST_CHECK_THROW(tinfer::spec::verify_drafts({context, 1, 0}, deterministic({1, 2}), one_row,
                                                  greedy(), workspace),
                      tinfer::Error);
    std::vector<float> const two_rows = rows_with_argmax({1, 2});
    BOOST_CHECK_THROW(tinfer::spec::verify_drafts({context, 1, 0}, deterministic({small_vocab}),
                                                  two_rows, greedy(), workspace),
                      tinfer::Error);
    DraftProposal proposal;
    std::vector<double> const q(small_vocab, 0.0);
    BOOST_CHECK_THROW(proposal.add(1, q, 1.0), tinfer::Error);
}

BOOST_AUTO_TEST_CASE(stats_count_rounds_drafts_and_tokens) {
    tinfer::spec::SpeculationStats stats;
    BOOST_TEST(stats.acceptance_rate() == 0.0);
    BOOST_TEST(stats.tokens_per_target_pass() == 0.0);
    stats.record(4, {4, 9});  // all accepted: 5 tokens
    stats.record(4, {1, 2});  // 2 tokens
    stats.record(0, {0, 3});  // nothing drafted: 1 token
    BOOST_TEST(stats.rounds == 3);
    BOOST_TEST(stats.drafted == 8);
    BOOST_TEST(stats.accepted == 5);
    BOOST_TEST(stats.tokens_generated == 8);
    BOOST_TEST(stats.acceptance_rate() == 5.0 / 8.0);
    BOOST_TEST(stats.tokens_per_target_pass() == 8.0 / 3.0);
}

BOOST_AUTO_TEST_CASE(rollback_keeps_the_old_last_token_and_the_accepted_drafts) {
    // 10 tokens, 9 of them cached; 2 drafts accepted: positions 0..11 hold the 9, the old last
    // token and the two drafts; the new last token is run next round.
    BOOST_TEST(tinfer::spec::kv_length_after_round(10, {2, 7}) == 12);
    BOOST_TEST(tinfer::spec::kv_length_after_round(10, {0, 7}) == 10);
    std::vector<std::int32_t> tokens = {1, 2};
    tinfer::spec::append_round_tokens(tokens, deterministic({5, 6, 7}), {2, 9});
    BOOST_TEST((tokens == std::vector<std::int32_t>{1, 2, 5, 6, 9}));
}

BOOST_AUTO_TEST_SUITE_END()
