// ModelDrafter over a synthetic bigram model: what it proposes, how it keeps the draft model
// in line with the sequence (rollback), and self-drafting accepting everything.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/speculative/drafters.hpp>
#include <tinfer/speculative/speculative.hpp>
#include "bigram_model.hpp"
#include "testing.hpp"

namespace {

using tinfer::kernels::SamplingParams;
using tinfer::spec::DraftProposal;
using tinfer::spec::ModelDrafter;
using tinfer::testing::speculative::BigramDraftModel;
using tinfer::testing::speculative::BigramTable;
using tinfer::testing::speculative::random_bigram;
using Tokens = std::vector<std::int32_t>;

constexpr std::int32_t vocab = 12;

std::int32_t argmax(std::span<float const> row) {
    return static_cast<std::int32_t>(std::ranges::max_element(row) - row.begin());
}

SamplingParams greedy() {
    SamplingParams params;
    params.temperature = 0;
    return params;
}

SamplingParams sampled(float temperature, std::uint64_t seed) {
    SamplingParams params;
    params.temperature = temperature;
    params.seed = seed;
    return params;
}

Tokens proposed(DraftProposal const& proposal) {
    return Tokens(proposal.tokens().begin(), proposal.tokens().end());
}

}  // namespace

static_assert(tinfer::spec::Drafter<ModelDrafter<BigramDraftModel>>);

BOOST_AUTO_TEST_SUITE(speculative_model_drafter)

BOOST_AUTO_TEST_CASE(greedy_drafts_follow_the_draft_models_argmax_chain) {
    BigramTable const table = random_bigram(9201, vocab, 2.0f);
    ModelDrafter<BigramDraftModel> drafter(table);
    Tokens const tokens = {3, 7, 4};
    DraftProposal proposal;
    drafter.propose({{tokens, 1, 0}, 4, greedy()}, proposal);
    Tokens expected;
    std::int32_t last = tokens.back();
    for (int i = 0; i < 4; ++i) expected.push_back(last = argmax(table.row(last)));
    BOOST_TEST(proposed(proposal) == expected);
    for (int i = 0; i < proposal.size(); ++i) BOOST_TEST(proposal.distribution(i).weights.empty());
    // The sequence, then every draft but the last, has been run.
    BOOST_TEST(drafter.model().length() == 3 + 3);
}

BOOST_AUTO_TEST_CASE(a_rejected_draft_is_rolled_back_and_accepted_ones_are_not_rerun) {
    BigramTable const table = random_bigram(9202, vocab, 2.0f);
    ModelDrafter<BigramDraftModel> drafter(table);
    Tokens tokens = {3, 7, 4};
    DraftProposal proposal;
    drafter.propose({{tokens, 1, 0}, 4, greedy()}, proposal);
    Tokens const drafts = proposed(proposal);
    BOOST_TEST(drafter.model().tokens_run() == 6);

    // The target kept the first draft and then chose something other than the second.
    tokens.push_back(drafts[0]);
    tokens.push_back((drafts[1] + 1) % vocab);
    drafter.propose({{tokens, 1, 0}, 2, greedy()}, proposal);
    BOOST_TEST((drafter.model().truncations() == std::vector<int>{4}));
    // Only the correction and the first new draft were run.
    BOOST_TEST(drafter.model().tokens_run() == 6 + 2);
    BOOST_TEST(proposal.tokens()[0] == argmax(table.row(tokens.back())));
    BOOST_TEST((std::ranges::equal(drafter.tokens_run().first(tokens.size()), tokens)));

    // Proposing again for the same sequence runs its last token again and gives the same drafts.
    Tokens const before = proposed(proposal);
    drafter.propose({{tokens, 1, 0}, 2, greedy()}, proposal);
    BOOST_TEST(proposed(proposal) == before);
    BOOST_TEST(drafter.model().truncations().back() == static_cast<int>(tokens.size()) - 1);

    drafter.reset();
    BOOST_TEST(drafter.model().length() == 0);
    BOOST_TEST(drafter.tokens_run().empty());
}

BOOST_AUTO_TEST_CASE(sampled_drafts_carry_the_filtered_draft_distribution) {
    BigramTable const table = random_bigram(9203, vocab, 2.0f);
    ModelDrafter<BigramDraftModel> drafter(table);
    SamplingParams params;
    params.seed = 3;
    params.temperature = 0.7f;
    params.top_k = 5;
    Tokens const tokens = {2, 6};
    DraftProposal proposal;
    drafter.propose({{tokens, 1, 0}, 3, params}, proposal);
    BOOST_TEST_REQUIRE(proposal.size() == 3);
    std::int32_t last = tokens.back();
    for (int i = 0; i < proposal.size(); ++i) {
        // q in float64 from the closed form: softmax(row / 0.7) over the row's top 5.
        auto const row = table.row(last);
        Tokens ranked(vocab);
        std::iota(ranked.begin(), ranked.end(), 0);
        std::ranges::sort(ranked, [&](std::int32_t a, std::int32_t b) { return row[a] > row[b]; });
        std::vector<double> q(vocab, 0.0);
        double total = 0;
        for (int r = 0; r < 5; ++r)
            total += q[ranked[r]] = std::exp((row[ranked[r]] - row[ranked[0]]) / 0.7);
        auto const distribution = proposal.distribution(i);
        double worst = 0;
        for (std::int32_t token = 0; token < vocab; ++token)
            worst = std::max(worst, std::abs(distribution.probability(token) - q[token] / total));
        BOOST_TEST(worst < 1e-6);
        BOOST_TEST(q[distribution.token] > 0);
        last = distribution.token;
    }
}

// rollback (the engine's hook after a round) drops exactly the positions past the longest
// prefix of the kept sequence the draft model has run, and nothing when all of it was kept.
BOOST_AUTO_TEST_CASE(rollback_keeps_the_run_prefix_of_the_kept_sequence) {
    BigramTable const table = random_bigram(9207, vocab, 2.0f);
    ModelDrafter<BigramDraftModel> drafter(table);
    Tokens sequence = {3, 7, 4, 1};
    DraftProposal proposal;
    drafter.propose({{sequence, 2, 0}, 4, greedy()}, proposal);
    BOOST_TEST_REQUIRE(proposal.size() == 4);
    // It ran the sequence and the first three drafts (the last one is not run).
    BOOST_TEST(drafter.model().length() == 4 + 3);
    Tokens const drafts = proposed(proposal);
    // Two drafts accepted, then a correction that differs from the third.
    Tokens kept = sequence;
    kept.insert(kept.end(), drafts.begin(), drafts.begin() + 2);
    kept.push_back((drafts[2] + 1) % vocab);
    drafter.rollback(kept);
    BOOST_TEST(drafter.model().length() == 4 + 2);
    BOOST_TEST((Tokens(drafter.tokens_run().begin(), drafter.tokens_run().end()) ==
                Tokens(kept.begin(), kept.begin() + 6)));
    auto const truncations = drafter.model().truncations().size();
    drafter.rollback(kept);  // nothing past the kept tokens: no truncation
    BOOST_TEST(drafter.model().truncations().size() == truncations);
    // All drafts accepted: only the bonus token is new, the model keeps everything it ran.
    drafter.propose({{kept, 2, 0}, 3, greedy()}, proposal);
    Tokens all = kept;
    for (std::int32_t const t : proposal.tokens()) all.push_back(t);
    all.push_back(0);
    int const before = drafter.model().length();
    drafter.rollback(all);
    BOOST_TEST(drafter.model().length() == before);
}

// A model drafting for itself: greedy speculation accepts every draft and produces exactly
// greedy decoding; sampling speculation also accepts every draft (p / q = 1).
BOOST_AUTO_TEST_CASE(self_drafting_accepts_every_draft) {
    BigramTable const table = random_bigram(9204, vocab, 2.0f);
    constexpr int gamma = 4;
    constexpr int new_tokens = 40;
    Tokens const prompt = {1, 5, 9};
    tinfer::spec::SpeculativeWorkspace workspace(vocab);

    Tokens greedy_decoding = prompt;
    while (greedy_decoding.size() < prompt.size() + new_tokens)
        greedy_decoding.push_back(argmax(table.row(greedy_decoding.back())));

    for (SamplingParams const& params : {greedy(), sampled(0.8f, 4)}) {
        ModelDrafter<BigramDraftModel> drafter(table);
        tinfer::spec::SpeculationStats stats;
        Tokens const generated = tinfer::testing::speculative::generate_speculatively(
            drafter, table, prompt, new_tokens, gamma, params, 17, workspace, &stats);
        BOOST_TEST_MESSAGE("temperature " << params.temperature << ": " << stats.rounds
                                          << " rounds, acceptance " << stats.acceptance_rate()
                                          << ", tokens per target pass "
                                          << stats.tokens_per_target_pass());
        BOOST_TEST(stats.acceptance_rate() == 1.0);
        BOOST_TEST(stats.tokens_per_target_pass() == gamma + 1.0);
        if (params.temperature == 0)
            BOOST_TEST((Tokens(generated.begin(), generated.begin() + greedy_decoding.size()) ==
                        greedy_decoding));
    }
}

// A wrong draft model under greedy verification still produces exactly greedy decoding of the
// target, only with fewer accepted drafts.
BOOST_AUTO_TEST_CASE(greedy_speculation_with_a_wrong_drafter_is_greedy_decoding) {
    BigramTable const target = random_bigram(9205, vocab, 2.0f);
    BigramTable const draft = random_bigram(9206, vocab, 2.0f);
    constexpr int new_tokens = 60;
    Tokens const prompt = {0, 4};
    Tokens expected = prompt;
    while (expected.size() < prompt.size() + new_tokens)
        expected.push_back(argmax(target.row(expected.back())));
    ModelDrafter<BigramDraftModel> drafter(draft);
    tinfer::spec::SpeculativeWorkspace workspace(vocab);
    tinfer::spec::SpeculationStats stats;
    Tokens const generated = tinfer::testing::speculative::generate_speculatively(
        drafter, target, prompt, new_tokens, 3, greedy(), 0, workspace, &stats);
    BOOST_TEST_MESSAGE("wrong drafter: acceptance " << stats.acceptance_rate());
    BOOST_TEST(stats.acceptance_rate() < 1.0);
    BOOST_TEST((Tokens(generated.begin(), generated.begin() + expected.size()) == expected));
}

BOOST_AUTO_TEST_SUITE_END()
