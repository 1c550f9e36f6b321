// Speculative sampling is exact: with a deliberately wrong draft distribution, the generated
// tokens still follow the target's distribution. A synthetic bigram "model" (the next token's
// logits are a seeded random row chosen by the last token) gives every distribution in closed
// form; 10^5 generations of 4 tokens are compared by chi-square with the exact law of
// (a) the first token, (b) the first two tokens, (c) the fourth token (which crosses round
// boundaries and rollbacks). Deliberately broken rules show the test has the power to notice.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/speculative/drafters.hpp>
#include <tinfer/speculative/speculative.hpp>
#include "bigram_model.hpp"
#include "chi_square.hpp"
#include "testing.hpp"

namespace {

using tinfer::kernels::SamplingParams;
using tinfer::spec::DraftProposal;
using tinfer::spec::ModelDrafter;
using tinfer::testing::chi_square;
using tinfer::testing::ChiSquare;
using tinfer::testing::speculative::BigramDraftModel;
using tinfer::testing::speculative::BigramTable;
using tinfer::testing::speculative::random_bigram;
using Tokens = std::vector<std::int32_t>;
using Matrix = std::vector<std::vector<double>>;  // [last token][next token]

constexpr std::int32_t vocab = 8;
constexpr long repetitions = 100000;
constexpr int generated_length = 4;
constexpr double significance = 0.001;
constexpr float logit_scale = 1.5f;

BigramTable const& target_table() {
    static BigramTable const table = random_bigram(31337, vocab, logit_scale);
    return table;
}
// Unrelated to the target: a wrong draft model, so many drafts are rejected.
BigramTable const& draft_table() {
    static BigramTable const table = random_bigram(4242, vocab, logit_scale);
    return table;
}

// The filtered next-token law in float64, from the closed form: softmax(row / temperature)
// over the row's top_k tokens (no two logits of a random row tie).
Matrix transition(BigramTable const& table, SamplingParams const& params) {
    Matrix law(vocab, std::vector<double>(vocab, 0.0));
    for (std::int32_t last = 0; last < vocab; ++last) {
        auto const row = table.row(last);
        Tokens ranked(vocab);
        std::iota(ranked.begin(), ranked.end(), 0);
        std::ranges::sort(ranked, [&](std::int32_t a, std::int32_t b) { return row[a] > row[b]; });
        int const kept = params.top_k > 0 ? std::min(params.top_k, vocab) : vocab;
        double total = 0;
        for (int r = 0; r < kept; ++r) {
            double const weight = std::exp((static_cast<double>(row[ranked[r]]) - row[ranked[0]]) /
                                           params.temperature);
            law[last][ranked[r]] = weight;
            total += weight;
        }
        for (double& p : law[last]) p /= total;
    }
    return law;
}

struct ExactLaws {
    std::vector<double> first;   // [vocab]
    std::vector<double> pair;    // [vocab * vocab]: first * vocab + second
    std::vector<double> fourth;  // [vocab]
};

ExactLaws exact_laws(Matrix const& law, std::int32_t last) {
    ExactLaws laws{law[last], std::vector<double>(vocab * vocab), law[last]};
    for (std::int32_t a = 0; a < vocab; ++a)
        for (std::int32_t b = 0; b < vocab; ++b)
            laws.pair[a * vocab + b] = law[last][a] * law[a][b];
    for (int step = 1; step < 4; ++step) {
        std::vector<double> next(vocab, 0.0);
        for (std::int32_t a = 0; a < vocab; ++a)
            for (std::int32_t b = 0; b < vocab; ++b) next[b] += laws.fourth[a] * law[a][b];
        laws.fourth = next;
    }
    return laws;
}

struct Counts {
    std::vector<long> first = std::vector<long>(vocab);
    std::vector<long> pair = std::vector<long>(vocab * vocab);
    std::vector<long> fourth = std::vector<long>(vocab);

    void record(std::span<std::int32_t const> generated) {
        ++first[generated[0]];
        ++pair[generated[0] * vocab + generated[1]];
        if (generated.size() >= 4) ++fourth[generated[3]];
    }
};

ChiSquare report(std::string const& what, std::vector<long> const& observed,
                 std::vector<double> const& expected) {
    ChiSquare const test = chi_square(observed, expected, repetitions);
    BOOST_TEST_MESSAGE(what << ": chi2 " << test.statistic << " with " << test.degrees_of_freedom
                            << " dof, p " << test.p_value);
    return test;
}

template <class Drafter>
void check_exactness(std::string const& name, Drafter& drafter, Tokens const& prompt, int gamma,
                     SamplingParams const& params) {
    ExactLaws const laws = exact_laws(transition(target_table(), params), prompt.back());
    tinfer::spec::SpeculativeWorkspace workspace(vocab);
    tinfer::spec::SpeculationStats stats;
    Counts counts;
    for (long rep = 0; rep < repetitions; ++rep) {
        Tokens const tokens = tinfer::testing::speculative::generate_speculatively(
            drafter, target_table(), prompt, generated_length, gamma, params,
            static_cast<std::uint64_t>(rep), workspace, &stats);
        counts.record(std::span(tokens).subspan(prompt.size()));
    }
    BOOST_TEST_MESSAGE(name << ": acceptance " << stats.acceptance_rate() << ", tokens per pass "
                            << stats.tokens_per_target_pass());
    // A meaningful check needs drafts both accepted and rejected.
    BOOST_TEST(stats.acceptance_rate() > 0.05);
    BOOST_TEST(stats.acceptance_rate() < 0.9);
    BOOST_TEST(report(name + ", first token", counts.first, laws.first).p_value > significance);
    BOOST_TEST(report(name + ", first two tokens", counts.pair, laws.pair).p_value > significance);
    BOOST_TEST(report(name + ", fourth token", counts.fourth, laws.fourth).p_value > significance);
}

SamplingParams sampled(float temperature, int top_k = 0) {
    SamplingParams params;
    params.temperature = temperature;
    params.top_k = top_k;
    params.seed = 0x5bec;
    return params;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(speculative_exactness)

BOOST_AUTO_TEST_CASE(chi_square_p_value_matches_closed_forms) {
    using tinfer::testing::chi_square_survival;
    for (double const x : {0.1, 1.0, 3.0, 10.0, 40.0}) {
        BOOST_TEST(chi_square_survival(x, 2) == std::exp(-x / 2),
                   boost::test_tools::tolerance(1e-12));
        BOOST_TEST(chi_square_survival(x, 1) == std::erfc(std::sqrt(x / 2)),
                   boost::test_tools::tolerance(1e-10));
    }
    BOOST_TEST(chi_square_survival(29.588, 10) == 0.001, boost::test_tools::tolerance(1e-3));
}

BOOST_AUTO_TEST_CASE(sampling_with_a_wrong_draft_model_follows_the_target) {
    ModelDrafter<BigramDraftModel> drafter(draft_table());
    check_exactness("draft model, temperature 1, gamma 3", drafter, {3, 1, 4}, 3, sampled(1.0f));
}

BOOST_AUTO_TEST_CASE(sampling_with_filters_and_a_wrong_draft_model_follows_the_target) {
    ModelDrafter<BigramDraftModel> drafter(draft_table());
    check_exactness("draft model, temperature 0.8 + top-k 5, gamma 2", drafter, {5, 0}, 2,
                    sampled(0.8f, 5));
}

BOOST_AUTO_TEST_CASE(sampling_with_prompt_lookup_drafts_follows_the_target) {
    tinfer::spec::PromptLookupDrafter<2> drafter;
    check_exactness("prompt lookup, temperature 1, gamma 3", drafter, {2, 6, 2, 6, 2}, 3,
                    sampled(1.0f));
}

// Power: outputs that follow the draft model instead of the target (a verifier that always
// accepts) are rejected by a huge margin; the same counts fit the draft model's own law, which
// also checks that ModelDrafter draws exactly from q.
BOOST_AUTO_TEST_CASE(always_accepting_drafts_is_detected) {
    SamplingParams const params = sampled(1.0f);
    Tokens const prompt = {3, 1, 4};
    ModelDrafter<BigramDraftModel> drafter(draft_table());
    DraftProposal proposal;
    Counts counts;
    for (long rep = 0; rep < repetitions; ++rep) {
        drafter.propose({{prompt, prompt.size(), static_cast<std::uint64_t>(rep)}, 2, params},
                        proposal);
        counts.record(proposal.tokens());
    }
    ExactLaws const target = exact_laws(transition(target_table(), params), prompt.back());
    ExactLaws const draft = exact_laws(transition(draft_table(), params), prompt.back());
    BOOST_TEST(report("always accept vs target, first token", counts.first, target.first).p_value <
               1e-12);
    BOOST_TEST(report("always accept vs target, first two", counts.pair, target.pair).p_value <
               1e-12);
    BOOST_TEST(report("drafts vs draft law, first token", counts.first, draft.first).p_value >
               significance);
    BOOST_TEST(report("drafts vs draft law, first two", counts.pair, draft.pair).p_value >
               significance);
}

// Power against a subtle bug: on rejection, drawing from p instead of norm(max(0, p - q)).
// That law is min(p, q) + (1 - sum min(p, q)) p, not p, and the test sees it.
BOOST_AUTO_TEST_CASE(resampling_from_the_target_after_a_rejection_is_detected) {
    SamplingParams const params = sampled(1.0f);
    Tokens const prompt = {3, 1, 4};
    ModelDrafter<BigramDraftModel> drafter(draft_table());
    tinfer::kernels::SamplingWorkspace sampling(vocab);
    std::vector<double> p(vocab);
    DraftProposal proposal;
    std::vector<long> first(vocab);
    for (long rep = 0; rep < repetitions; ++rep) {
        auto const request = static_cast<std::uint64_t>(rep);
        drafter.propose({{prompt, prompt.size(), request}, 1, params}, proposal);
        auto const target = tinfer::spec::filtered_weights(target_table().row(prompt.back()),
                                                           params, {prompt, {}}, sampling, p);
        std::int32_t const draft = proposal.tokens()[0];
        double const u = tinfer::spec::speculative_uniform(
            params, request, 0, tinfer::spec::SpeculativeDraw::acceptance);
        std::int32_t token = draft;
        if (!(u * proposal.distribution(0).probability(draft) < p[draft] / target.total))
            token = tinfer::spec::draw_by_weight(
                vocab, [&](std::int32_t t) { return p[t]; }, target.total,
                tinfer::spec::speculative_uniform(params, request, 0,
                                                  tinfer::spec::SpeculativeDraw::target_token));
        ++first[token];
    }
    ExactLaws const laws = exact_laws(transition(target_table(), params), prompt.back());
    BOOST_TEST(report("resample from p after rejection, first token", first, laws.first).p_value <
               1e-6);
}

BOOST_AUTO_TEST_SUITE_END()
