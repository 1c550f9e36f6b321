// PromptLookupDrafter: which earlier occurrence it copies from, and what it proposes.
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/speculative/drafters.hpp>
#include "testing.hpp"

namespace {

using tinfer::spec::DraftProposal;
using Tokens = std::vector<std::int32_t>;

template <class Drafter>
Tokens lookup(Drafter const& drafter, Tokens const& tokens, int max_drafts) {
    tinfer::kernels::SamplingParams const params;
    DraftProposal proposal;
    proposal.add(99);  // stale content must be cleared
    drafter.propose({{tokens, 0, 0}, max_drafts, params}, proposal);
    for (int i = 0; i < proposal.size(); ++i)
        BOOST_TEST(proposal.distribution(i).weights.empty(), "prompt lookup is deterministic");
    return Tokens(proposal.tokens().begin(), proposal.tokens().end());
}

}  // namespace

static_assert(tinfer::spec::Drafter<tinfer::spec::PromptLookupDrafter<3, 1>>);

BOOST_AUTO_TEST_SUITE(speculative_prompt_lookup)

BOOST_AUTO_TEST_CASE(copies_the_continuation_of_an_earlier_match) {
    tinfer::spec::PromptLookupDrafter<3> const drafter;
    BOOST_TEST((lookup(drafter, {1, 2, 3, 4, 9, 8, 1, 2, 3}, 3) == Tokens{4, 9, 8}));
    BOOST_TEST((lookup(drafter, {1, 2, 3, 4, 9, 8, 1, 2, 3}, 1) == Tokens{4}));
}

BOOST_AUTO_TEST_CASE(no_match_proposes_nothing) {
    tinfer::spec::PromptLookupDrafter<3> const drafter;
    BOOST_TEST(lookup(drafter, {1, 2, 3, 4, 5}, 4).empty());
    BOOST_TEST(lookup(drafter, {7}, 4).empty());
    BOOST_TEST(lookup(drafter, {}, 4).empty());
    BOOST_TEST(lookup(drafter, {1, 2, 1}, 0).empty());
}

BOOST_AUTO_TEST_CASE(of_several_matches_the_most_recent_wins) {
    tinfer::spec::PromptLookupDrafter<2> const drafter;
    BOOST_TEST((lookup(drafter, {7, 1, 5, 0, 7, 1, 6, 0, 7, 1}, 2) == Tokens{6, 0}));
}

BOOST_AUTO_TEST_CASE(the_longest_ngram_wins_over_a_more_recent_shorter_one) {
    Tokens const tokens = {1, 2, 3, 8, 5, 3, 9, 1, 2, 3};
    // "1 2 3" occurred at 0 (then 8); "3" alone occurred most recently at 5 (then 9).
    BOOST_TEST((lookup(tinfer::spec::PromptLookupDrafter<3>{}, tokens, 1) == Tokens{8}));
    BOOST_TEST((lookup(tinfer::spec::PromptLookupDrafter<1>{}, tokens, 1) == Tokens{9}));
    // "2 3" also occurred only at 1.
    BOOST_TEST((lookup(tinfer::spec::PromptLookupDrafter<2>{}, tokens, 1) == Tokens{8}));
}

BOOST_AUTO_TEST_CASE(ngrams_shorter_than_the_minimum_are_not_used) {
    Tokens const tokens = {4, 5, 6, 9, 6};  // only the 1-gram "6" recurs
    BOOST_TEST(lookup(tinfer::spec::PromptLookupDrafter<3, 2>{}, tokens, 2).empty());
    BOOST_TEST((lookup(tinfer::spec::PromptLookupDrafter<3, 1>{}, tokens, 2) == Tokens{9, 6}));
}

BOOST_AUTO_TEST_CASE(a_continuation_reaching_the_end_extends_the_repetition) {
    tinfer::spec::PromptLookupDrafter<2> const drafter;
    BOOST_TEST((lookup(drafter, {1, 2, 1, 2}, 5) == Tokens{1, 2, 1, 2, 1}));
    BOOST_TEST((lookup(drafter, {5, 5}, 3) == Tokens{5, 5, 5}));
    BOOST_TEST((lookup(drafter, {1, 2, 3, 1, 2}, 4) == Tokens{3, 1, 2, 3}));
}

BOOST_AUTO_TEST_SUITE_END()
