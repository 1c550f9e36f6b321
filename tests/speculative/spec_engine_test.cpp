// Speculative decoding inside the engine, on the real model. Greedy speculation must give the
// tokens greedy decoding gives (the float64 reference's, and the engine's own without drafts),
// alone and in a batch beside requests that do not speculate; seeded sampling with speculation
// must repeat itself whatever runs beside it; a stop condition inside a round must end the
// output where decoding without drafts ends it; and rolling the KV cache back after rejected
// drafts must leave no block or sequence behind.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/engine/engine.hpp>
#include <tinfer/presets/presets.hpp>

#include "spec_engine_support.hpp"

using namespace tinfer;
using Model = model::Llama<presets::smollm2_135m>;
namespace s = tinfer::sched;

namespace {

using Continuous =
    s::Scheduler<s::ContinuousBatching<16, 512>, s::WholePrompt, s::PreemptByRecompute, s::Fcfs>;
using Chunked = s::Scheduler<s::ContinuousBatching<16, 64>, s::ChunkedPrefill<32>,
                             s::PreemptByRecompute, s::Fcfs>;

constexpr std::size_t block_bytes = kv::PagedKvCache<presets::smollm2_135m, 16>::bytes_per_block;

using testing::golden;
using testing::greedy;
using testing::model_file;

// A prompt that repeats itself, so prompt lookup finds drafts the model accepts.
std::vector<std::int32_t> repetitive_prompt(std::vector<std::int32_t> const& base) {
    std::vector<std::int32_t> prompt = base;
    prompt.insert(prompt.end(), base.begin(), base.end());
    prompt.insert(prompt.end(), base.begin(), base.begin() + static_cast<long>(base.size() / 2));
    return prompt;
}

// Greedy tokens the reference decides clearly: those before its first near-tie (top-2 margin
// within the tolerance the golden model test uses), at most `count`.
std::size_t clear_greedy_prefix(testing::GoldenPrompt const& g, std::size_t count) {
    constexpr double logit_rtol = 1e-3;
    auto const near_tie = [&](testing::GoldenPosition const& p) {
        return p.top2_margin <= logit_rtol * p.max_abs_logit;
    };
    if (near_tie(g.prefill.back())) return 0;
    for (std::size_t k = 1; k < count; ++k)
        if (near_tie(g.decode[k - 1])) return k;
    return count;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(spec_engine)

// Speculation's output is greedy decoding's: the reference's greedy tokens, and bitwise the
// engine's own tokens without drafts.
BOOST_AUTO_TEST_CASE(greedy_speculation_matches_the_reference_and_plain_decoding) {
    constexpr int tokens = 32;
    std::vector<GenerationRequest> plain, speculating;
    for (auto const& g : golden()) {
        plain.push_back(greedy(g.prompt, tokens, 0));
        speculating.push_back(greedy(g.prompt, tokens, 4));
    }
    Engine<Model, Continuous> engine(model_file(), {.kv_budget_bytes = 64ull << 20, .threads = 1});
    auto const without = engine.generate(plain);
    auto const with = engine.generate(speculating);
    for (std::size_t i = 0; i < golden().size(); ++i) {
        auto const& g = golden()[i];
        BOOST_TEST_CONTEXT(g.name) {
            BOOST_TEST(with[i].error.empty(), with[i].error);
            BOOST_TEST(with[i].tokens == without[i].tokens);
            std::size_t const clear = clear_greedy_prefix(g, tokens);
            BOOST_TEST(clear >= 16u);
            std::vector<std::int32_t> const expected(g.greedy.begin(),
                                                     g.greedy.begin() + static_cast<long>(clear));
            std::vector<std::int32_t> const got(with[i].tokens.begin(),
                                                with[i].tokens.begin() + static_cast<long>(clear));
            BOOST_TEST(got == expected);
            // Every decode pass after the first token is a round; together they made the rest.
            BOOST_TEST(with[i].speculation.tokens_generated == tokens - 1);
            BOOST_TEST(with[i].speculation.accepted <= with[i].speculation.drafted);
            BOOST_TEST(without[i].speculation.rounds == 0);
        }
    }
    spec::SpeculationStats const& run = engine.speculation_stats();
    BOOST_TEST(run.tokens_generated == static_cast<long>(golden().size()) * (tokens - 1));
    BOOST_TEST_MESSAGE("golden prompts, gamma 4: acceptance " << run.acceptance_rate()
                                                              << ", tokens per target pass "
                                                              << run.tokens_per_target_pass());
}

// On a prompt that repeats itself prompt lookup pays off: drafts are accepted and a pass yields
// more than one token, with the same tokens as plain decoding, for every gamma.
BOOST_AUTO_TEST_CASE(repetitive_prompts_accept_drafts_and_keep_greedy_tokens) {
    auto const prompt = repetitive_prompt(golden().front().prompt);
    Engine<Model, Continuous> engine(model_file(), {.kv_budget_bytes = 64ull << 20, .threads = 1});
    auto const plain = engine.generate({greedy(prompt, 24, 0)}).front().tokens;
    for (int const gamma : {1, 3, 8}) {
        BOOST_TEST_CONTEXT("gamma " << gamma) {
            auto const c = engine.generate({greedy(prompt, 24, gamma)}).front();
            BOOST_TEST(c.tokens == plain);
            BOOST_TEST(c.speculation.accepted > 0);
            BOOST_TEST(c.speculation.tokens_per_target_pass() > 1.0);
            BOOST_TEST(c.speculation.drafted <= gamma * c.speculation.rounds);
        }
    }
}

// Speculating and plain requests share passes (and prefill chunks, and a pool small enough to
// refuse some drafts' blocks or preempt); each gets exactly the tokens it gets alone without
// drafts, and the pool is empty once all have ended.
BOOST_AUTO_TEST_CASE(a_mixed_batch_gives_each_request_its_plain_tokens) {
    std::vector<GenerationRequest> plain, mixed;
    int const gammas[] = {0, 2, 5, 0, 8, 1};
    std::size_t index = 0;
    for (auto const& g : golden()) {
        for (bool const repeat : {false, true}) {
            // Repeating the prose (410 tokens) or the code (158) would only make the test
            // slower: the repeated short prompts give the drafts to accept.
            if (repeat && g.prompt.size() > 100) continue;
            auto const prompt = repeat ? repetitive_prompt(g.prompt) : g.prompt;
            int const gamma = gammas[index++ % std::size(gammas)];
            plain.push_back(greedy(prompt, 20, 0));
            mixed.push_back(greedy(prompt, 20, gamma));
        }
    }
    std::vector<std::vector<std::int32_t>> alone;
    {
        Engine<Model, Chunked> engine(model_file(), {.kv_budget_bytes = 64ull << 20, .threads = 1});
        for (auto const& r : plain) alone.push_back(engine.generate({r}).front().tokens);
    }
    for (std::size_t const blocks : {std::size_t{512}, std::size_t{40}}) {
        BOOST_TEST_CONTEXT(blocks << " KV blocks") {
            Engine<Model, Chunked> engine(
                model_file(),
                {.kv_budget_bytes = blocks * block_bytes, .threads = 1, .prefix_caching = false});
            auto const completions = engine.generate(mixed);
            for (std::size_t i = 0; i < mixed.size(); ++i) {
                BOOST_TEST_CONTEXT("request " << i << ", gamma " << mixed[i].draft_tokens) {
                    BOOST_TEST(completions[i].error.empty(), completions[i].error);
                    BOOST_TEST(completions[i].tokens == alone[i]);
                }
            }
            BOOST_TEST(engine.speculation_stats().accepted > 0);
            BOOST_TEST(engine.live_requests() == 0u);
            BOOST_TEST(engine.cache().live_sequences() == 0);
            BOOST_TEST(engine.cache().used_blocks() == 0);
        }
    }
}

// With the prefix cache on, rolled-back blocks must not leak either: once every request has
// ended, the blocks in use are exactly those the prefix cache holds, and it can give them all
// back.
BOOST_AUTO_TEST_CASE(rollback_with_prefix_caching_leaves_only_cached_blocks) {
    Engine<Model, Chunked> engine(model_file(),
                                  {.kv_budget_bytes = 64 * block_bytes, .threads = 1});
    std::vector<GenerationRequest> requests;
    for (auto const& g : golden())
        if (g.prompt.size() <= 200) requests.push_back(greedy(repetitive_prompt(g.prompt), 24, 6));
    auto const completions = engine.generate(requests);
    for (auto const& c : completions) BOOST_TEST(c.tokens.size() == 24u);
    BOOST_TEST(engine.cache().live_sequences() == 0);
    BOOST_TEST(engine.cache().available_blocks() == engine.cache().total_blocks());
}

// A seeded request samples the same tokens with speculation whatever runs beside it: its draws
// depend on (seed, step) and the logits only.
BOOST_AUTO_TEST_CASE(seeded_sampling_with_speculation_is_reproducible) {
    auto const prompt = repetitive_prompt(golden().front().prompt);
    auto const sampled = [&](int gamma, std::uint64_t seed) {
        GenerationRequest r = greedy(prompt, 24, gamma);
        r.sampling.temperature = 0.8f;
        r.sampling.top_p = 0.95f;
        r.sampling.seed = seed;
        return r;
    };
    Engine<Model, Chunked> engine(model_file(), {.kv_budget_bytes = 64ull << 20, .threads = 1});
    auto const alone = engine.generate({sampled(4, 7)}).front();
    auto const again = engine.generate({sampled(4, 7)}).front();
    BOOST_TEST(alone.tokens.size() == 24u);
    BOOST_TEST(again.tokens == alone.tokens);
    auto const batch = engine.generate(
        {greedy(golden()[1].prompt, 16, 3), sampled(4, 7), sampled(0, 7), sampled(4, 8)});
    BOOST_TEST(batch[1].tokens == alone.tokens);
    BOOST_TEST(batch[3].tokens != alone.tokens);  // another seed, another sample
    BOOST_TEST(alone.speculation.rounds > 0);
}

// A stop token inside an accepted run of drafts ends the request there; the rest of the round
// is dropped, and the text and tokens equal those of decoding without drafts.
BOOST_AUTO_TEST_CASE(a_stop_inside_a_round_ends_the_output_where_plain_decoding_does) {
    auto const prompt = repetitive_prompt(golden().front().prompt);
    Engine<Model, Continuous> engine(model_file(), {.kv_budget_bytes = 64ull << 20, .threads = 1});
    auto const reference = engine.generate({greedy(prompt, 24, 0)}).front().tokens;
    BOOST_REQUIRE(reference.size() == 24u);
    // A token first generated late enough to fall inside a round of accepted drafts.
    std::int32_t const stop_token = reference[10];
    auto const first_stop =
        std::find(reference.begin(), reference.end(), stop_token) - reference.begin();
    GenerationRequest plain = greedy(prompt, 24, 0), speculating = greedy(prompt, 24, 8);
    plain.stop_token_ids = speculating.stop_token_ids = {stop_token};
    auto const without = engine.generate({plain}).front();
    auto const with = engine.generate({speculating}).front();
    BOOST_TEST(without.tokens.size() == static_cast<std::size_t>(first_stop + 1));
    BOOST_TEST(with.tokens == without.tokens);
    BOOST_TEST(with.text == without.text);
    BOOST_TEST((with.finish == without.finish));
    BOOST_TEST(engine.cache().live_sequences() == 0);
}

BOOST_AUTO_TEST_CASE(bad_draft_settings_are_refused_at_submit) {
    Engine<Model, Continuous> engine(model_file(), {.kv_budget_bytes = 16ull << 20, .threads = 1});
    GenerationRequest negative = greedy(golden().front().prompt, 4, -1);
    BOOST_CHECK_THROW(engine.submit(negative, {}), RequestError);
    GenerationRequest with_logprobs = greedy(golden().front().prompt, 4, 2);
    with_logprobs.sampling.logprobs = true;
    BOOST_CHECK_THROW(engine.submit(with_logprobs, {}), RequestError);
}

BOOST_AUTO_TEST_SUITE_END()
