// Stop conditions: token-level reasons, and the stop-string matcher against a naive reference
// over random texts cut into random token pieces.
#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/core/error.hpp>
#include <tinfer/engine/stop_conditions.hpp>
#include "testing.hpp"

namespace {

using tinfer::FinishReason;
using tinfer::StopConditions;
using tinfer::StopStringMatcher;

// Naive reference: generation stops where the first stop string is complete. Scanning end
// positions in order, the first one at which some stop string ends is the stop point; of the
// stop strings ending there, the longest starts earliest. Returns where the emitted text ends.
std::size_t first_completed_stop(std::string const& text, std::vector<std::string> const& stops) {
    for (std::size_t end = 1; end <= text.size(); ++end) {
        std::size_t start = std::string::npos;
        for (std::string const& stop : stops)
            if (stop.size() <= end && text.compare(end - stop.size(), stop.size(), stop) == 0)
                start = std::min(start, end - stop.size());
        if (start != std::string::npos) return start;
    }
    return std::string::npos;
}

// Naive reference for what must be held back: the longest suffix of `text` that is a proper
// prefix of a stop string.
std::size_t longest_held_suffix(std::string const& text, std::vector<std::string> const& stops) {
    std::size_t longest = 0;
    for (std::string const& stop : stops)
        for (std::size_t length = 1; length < stop.size() && length <= text.size(); ++length)
            if (text.compare(text.size() - length, length, stop, 0, length) == 0)
                longest = std::max(longest, length);
    return longest;
}

std::string random_text(std::mt19937_64& rng, std::string_view alphabet, std::size_t length) {
    std::uniform_int_distribution<std::size_t> pick(0, alphabet.size() - 1);
    std::string text;
    for (std::size_t i = 0; i < length; ++i) text += alphabet[pick(rng)];
    return text;
}

struct Outcome {
    std::string emitted;
    bool stopped;
};

// Feeds `text` cut at random places (empty pieces included) and checks, after every piece, that
// exactly the text that can no longer start a stop string has been emitted.
Outcome run_matcher(std::string const& text, std::vector<std::string> const& stops,
                    std::mt19937_64& rng) {
    constexpr std::size_t max_piece = 5;
    std::uniform_int_distribution<std::size_t> piece_length(0, max_piece);
    StopStringMatcher matcher(stops);
    Outcome outcome{"", false};
    std::size_t fed = 0;
    while (fed < text.size()) {
        std::size_t const length = std::min(piece_length(rng), text.size() - fed);
        auto const result = matcher.feed(std::string_view(text).substr(fed, length));
        fed += length;
        outcome.emitted += result.text;
        if (result.stopped) {
            outcome.stopped = true;
            BOOST_TEST(matcher.stopped());
            return outcome;
        }
        std::string const seen = text.substr(0, fed);
        BOOST_TEST_REQUIRE(outcome.emitted.size() == seen.size() - longest_held_suffix(seen, stops),
                           "after " << fed << " bytes of '" << text << "'");
    }
    outcome.emitted += matcher.flush();
    return outcome;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(stop_conditions)

BOOST_AUTO_TEST_CASE(matcher_agrees_with_naive_reference_on_random_splits) {
    auto rng = tinfer::testing::seeded_rng(31);
    std::vector<std::vector<std::string>> const fixed_sets = {
        {"ab", "abc", "aab"}, {"aaa"}, {"abab", "ba"}, {"c"}, {"abcab", "bca", "cc"}};
    std::uniform_int_distribution<int> stop_count(1, 4), stop_length(1, 4), text_length(0, 40);
    int stopped_runs = 0, unstopped_runs = 0;
    for (int trial = 0; trial < 4000; ++trial) {
        std::vector<std::string> stops;
        if (trial % 2 == 0) {
            stops = fixed_sets[static_cast<std::size_t>(trial / 2) % fixed_sets.size()];
        } else {
            for (int i = stop_count(rng); i > 0; --i)
                stops.push_back(
                    random_text(rng, "abc", static_cast<std::size_t>(stop_length(rng))));
        }
        std::string const text =
            random_text(rng, "abcd", static_cast<std::size_t>(text_length(rng)));
        std::size_t const stop_at = first_completed_stop(text, stops);
        Outcome const outcome = run_matcher(text, stops, rng);
        BOOST_TEST_CONTEXT("text '" << text << "'") {
            BOOST_TEST(outcome.stopped == (stop_at != std::string::npos));
            BOOST_TEST(outcome.emitted == text.substr(0, stop_at));
        }
        (outcome.stopped ? stopped_runs : unstopped_runs)++;
    }
    // Both outcomes were exercised many times.
    BOOST_TEST(stopped_runs > 500);
    BOOST_TEST(unstopped_runs > 500);
}

BOOST_AUTO_TEST_CASE(stop_string_split_across_tokens_is_never_emitted) {
    StopStringMatcher matcher({"</answer>", "\n\nUser:"});
    std::string emitted;
    for (std::string_view const piece : {"The result is 42", "</", "ans", "wer", "> and more"}) {
        auto const result = matcher.feed(piece);
        emitted += result.text;
        if (result.stopped) break;
    }
    BOOST_TEST(matcher.stopped());
    BOOST_TEST(emitted == "The result is 42");
    BOOST_TEST(matcher.feed("more").stopped);
    BOOST_TEST(matcher.flush().empty());

    // Overlapping stop strings: the one completed first wins, however the text is cut.
    for (std::size_t cut = 1; cut <= 4; ++cut) {
        StopStringMatcher overlapping({"abab", "ba"});
        std::string const text = "xabab";
        std::string out;
        for (std::size_t at = 0; at < text.size() && !overlapping.stopped(); at += cut)
            out += overlapping.feed(std::string_view(text).substr(at, cut)).text;
        BOOST_TEST(overlapping.stopped());
        BOOST_TEST(out == "xa");
    }
    // "ab", "abc" and "aab": "aab" and "ab" complete together; the longer one starts earlier.
    StopStringMatcher prefixes({"ab", "abc", "aab"});
    BOOST_TEST(prefixes.feed("xa").text == "x");
    auto const last = prefixes.feed("ab");
    BOOST_TEST(last.stopped);
    BOOST_TEST(last.text == "");

    // A false start is released as soon as it cannot be a stop string any more.
    StopStringMatcher other({"</answer>"});
    BOOST_TEST(other.feed("a </an").text == "a ");
    BOOST_TEST(other.feed("t").text == "</ant");
    BOOST_TEST(other.feed("x</").text == "x");
    BOOST_TEST(other.flush() == "</");
}

BOOST_AUTO_TEST_CASE(token_conditions) {
    // EOS and an end-of-turn token (Gemma's <end_of_turn> beside <eos>): both end generation.
    constexpr std::int32_t eos = 2, end_of_turn = 106;
    std::array<std::int32_t, 2> const ends{eos, end_of_turn};
    StopConditions conditions{
        .max_new_tokens = 5, .stop_token_ids = {7, 9}, .stop_strings = {}, .ignore_eos = false};
    BOOST_CHECK_NO_THROW(tinfer::validate(conditions));
    BOOST_TEST((tinfer::token_finish_reason(conditions, eos, ends, 1) == FinishReason::stop_token));
    BOOST_TEST((tinfer::token_finish_reason(conditions, end_of_turn, ends, 1) ==
                FinishReason::stop_token));
    BOOST_TEST((tinfer::token_finish_reason(conditions, 9, ends, 1) == FinishReason::stop_token));
    BOOST_TEST(!tinfer::token_finish_reason(conditions, 3, ends, 4).has_value());
    BOOST_TEST((tinfer::token_finish_reason(conditions, 3, ends, 5) == FinishReason::length));
    BOOST_TEST((tinfer::token_finish_reason(conditions, 7, ends, 5) == FinishReason::stop_token));
    BOOST_TEST((tinfer::token_finish_reason(conditions, end_of_turn, ends, 5) ==
                FinishReason::stop_token));
    conditions.ignore_eos = true;
    BOOST_TEST(!tinfer::token_finish_reason(conditions, eos, ends, 1).has_value());
    BOOST_TEST(!tinfer::token_finish_reason(conditions, end_of_turn, ends, 1).has_value());
    BOOST_TEST((tinfer::token_finish_reason(conditions, 9, ends, 1) == FinishReason::stop_token));
    BOOST_TEST(tinfer::name_of(FinishReason::stop_string) == "stop_string");

    auto const rejected = [&](auto&& change) {
        StopConditions bad = conditions;
        change(bad);
        BOOST_CHECK_THROW(tinfer::validate(bad), tinfer::RequestError);
    };
    rejected([](StopConditions& c) { c.max_new_tokens = 0; });
    rejected([](StopConditions& c) { c.stop_token_ids = {-1}; });
    rejected([](StopConditions& c) { c.stop_strings = {"ok", ""}; });
    BOOST_CHECK_THROW(StopStringMatcher({""}), tinfer::RequestError);
}

BOOST_AUTO_TEST_SUITE_END()
