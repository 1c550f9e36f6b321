// Model drafters in the engine, on the real model: SmolLM2 drafting for itself (a separate
// DraftModelDrafter bound to the same GGUF, all 30 layers) and self-speculation by layer
// skipping (LayerSkipDrafter, the first 8 layers). Greedy output must be plain greedy decoding's
// token for token, alone and in a batch beside requests that do not speculate; a draft model
// equal to the target must have every draft accepted; and after every round the draft cache
// must hold exactly a prefix of the sequence as kept (no rejected draft), and nothing once the
// requests end.
#include <algorithm>
#include <cstdint>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/engine/engine.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/speculative/model_drafters.hpp>

#include "spec_engine_support.hpp"
#include "step_until.hpp"

using namespace tinfer;
using Model = model::Llama<presets::smollm2_135m>;
namespace s = tinfer::sched;

namespace {

using Serving = s::Scheduler<s::ContinuousBatching<16, 512>, s::ChunkedPrefill<128>,
                             s::PreemptByRecompute, s::Fcfs>;
using SelfDraft = spec::DraftModelDrafter<Model>;
using FirstLayers = spec::LayerSkipDrafter<Model, 8>;

static_assert(spec::SequenceDrafter<SelfDraft>);
static_assert(spec::SequenceDrafter<FirstLayers>);
static_assert(spec::TargetAttachedDrafter<FirstLayers, Model>);
static_assert(!spec::SequenceDrafter<DefaultDrafter>);

EngineOptions const options{.kv_budget_bytes = 64ull << 20, .threads = 1};

using testing::golden;
using testing::greedy;
using testing::model_file;

// Plain greedy tokens of each golden prompt, computed once.
std::vector<std::vector<std::int32_t>> const& plain_tokens(int count) {
    static std::vector<std::vector<std::int32_t>> tokens;
    static int computed_for = 0;
    if (computed_for != count) {
        Engine<Model, Serving> engine(model_file(), options);
        tokens.clear();
        for (auto const& g : golden())
            tokens.push_back(engine.generate({greedy(g.prompt, count, 0)}).front().tokens);
        computed_for = count;
    }
    return tokens;
}

// After every round (its events come after the rollback) the draft model holds KV for a prefix
// of the sequence as it finally reads (a rejected draft differs from the token kept at its
// position), in exactly the blocks that prefix needs.
template <class Engine>
struct RollbackWatch {
    Engine const* engine;
    std::vector<std::int32_t> sequence;
    sched::RequestId id{};
    std::vector<std::vector<std::int32_t>> drafts;  // the draft's tokens at each event
    long block_mismatches = 0;

    void on_token(TokenEvent const& e) {
        if (e.token < 0) return;
        sequence.push_back(e.token);
        if (e.finish) return;  // the request is released after its last event
        auto const& drafter = engine->drafter();
        auto const draft = drafter.draft_tokens(static_cast<std::uint64_t>(id));
        drafts.emplace_back(draft.begin(), draft.end());
        using DraftCache = std::remove_cvref_t<decltype(drafter.cache())>;
        if (drafter.cache().used_blocks() !=
            DraftCache::blocks_for(static_cast<std::int64_t>(draft.size())))
            ++block_mismatches;
    }
    long not_prefixes() const {
        return std::ranges::count_if(drafts, [&](auto const& d) {
            return d.size() > sequence.size() || !std::equal(d.begin(), d.end(), sequence.begin());
        });
    }
};

template <class Drafter>
void check_rollback_alone(Drafter drafter, int gamma) {
    using E = Engine<Model, Serving, Host, PagedKv<>, Drafter>;
    E engine(model_file(), options, std::move(drafter));
    auto const& g = golden().front();
    RollbackWatch<E> watch{.engine = &engine, .sequence = g.prompt};
    watch.id =
        engine.submit(greedy(g.prompt, 24, gamma), [&](TokenEvent const& e) { watch.on_token(e); });
    // 24 tokens: at most one step for the prompt and one per token.
    bool working = true;
    testing::step_until([&] { return !working; }, [&] { working = engine.step(); }, 2 * 24,
                        "the speculating request finishing");
    BOOST_TEST(watch.drafts.size() >= 10u);
    BOOST_TEST(watch.not_prefixes() == 0);
    BOOST_TEST(watch.block_mismatches == 0);
    BOOST_TEST(watch.drafts.back().size() > g.prompt.size());
    BOOST_TEST(engine.drafter().live_sequences() == 0);
    BOOST_TEST(engine.drafter().cache().used_blocks() == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(spec_engine_model_drafters)

// A draft model equal to the target proposes the target's own greedy tokens: every draft is
// accepted, and the output is plain greedy decoding's.
BOOST_AUTO_TEST_CASE(smollm2_drafting_for_itself_accepts_every_draft) {
    constexpr int tokens = 16;
    auto const& plain = plain_tokens(tokens);
    Engine<Model, Serving, Host, PagedKv<>, SelfDraft> engine(model_file(), options,
                                                              SelfDraft(model_file()));
    for (int const gamma : {1, 4, 8}) {
        std::vector<GenerationRequest> requests;
        for (auto const& g : golden()) requests.push_back(greedy(g.prompt, tokens, gamma));
        auto const completions = engine.generate(requests);
        for (std::size_t i = 0; i < completions.size(); ++i) {
            BOOST_TEST_CONTEXT("gamma " << gamma << ", " << golden()[i].name) {
                auto const& c = completions[i];
                BOOST_TEST(c.error.empty(), c.error);
                BOOST_TEST(c.tokens == plain[i]);
                BOOST_TEST(c.speculation.drafted > 0);
                BOOST_TEST(c.speculation.accepted == c.speculation.drafted);
                BOOST_TEST(c.speculation.tokens_generated == tokens - 1);
            }
        }
        BOOST_TEST(engine.drafter().live_sequences() == 0);
        BOOST_TEST(engine.drafter().cache().used_blocks() == 0);
    }
    BOOST_TEST(engine.speculation_stats().acceptance_rate() == 1.0);
    BOOST_TEST(engine.cache().live_sequences() == 0);
}

// The first 8 layers draft; their drafts are mostly rejected, and greedy output is plain greedy
// decoding's token for token, in a batch mixing speculating and plain requests.
BOOST_AUTO_TEST_CASE(layer_skipping_keeps_greedy_tokens_in_a_mixed_batch) {
    constexpr int tokens = 16;
    auto const& plain = plain_tokens(tokens);
    Engine<Model, Serving, Host, PagedKv<>, FirstLayers> engine(model_file(), options);
    int const gammas[] = {3, 0, 8, 1, 0, 5};
    std::vector<GenerationRequest> requests;
    for (std::size_t i = 0; i < golden().size(); ++i)
        requests.push_back(greedy(golden()[i].prompt, tokens, gammas[i % std::size(gammas)]));
    auto const completions = engine.generate(requests);
    for (std::size_t i = 0; i < completions.size(); ++i) {
        BOOST_TEST_CONTEXT(golden()[i].name << ", gamma " << requests[i].draft_tokens) {
            BOOST_TEST(completions[i].error.empty(), completions[i].error);
            BOOST_TEST(completions[i].tokens == plain[i]);
            if (requests[i].draft_tokens > 0) BOOST_TEST(completions[i].speculation.drafted > 0);
        }
    }
    BOOST_TEST_MESSAGE("first 8 layers: acceptance "
                       << engine.speculation_stats().acceptance_rate() << ", tokens per pass "
                       << engine.speculation_stats().tokens_per_target_pass());
    BOOST_TEST(engine.drafter().live_sequences() == 0);
    BOOST_TEST(engine.drafter().cache().used_blocks() == 0);
    BOOST_TEST(engine.cache().live_sequences() == 0);
}

// After every round the draft cache holds a prefix of the kept sequence and no more blocks
// than it needs: rejected drafts leave nothing behind.
BOOST_AUTO_TEST_CASE(draft_kv_is_rolled_back_to_the_kept_tokens) {
    BOOST_TEST_CONTEXT("first 8 layers") {
        check_rollback_alone(FirstLayers(), 6);
    }
    BOOST_TEST_CONTEXT("self draft") {
        check_rollback_alone(SelfDraft(model_file()), 4);
    }
}

// Sampling with a model drafter (its drafts drawn from the draft model's filtered
// distribution): a seeded request repeats itself, alone and beside other requests.
BOOST_AUTO_TEST_CASE(seeded_sampling_with_layer_skipping_is_reproducible) {
    auto const sampled = [&](int gamma, std::uint64_t seed) {
        GenerationRequest r = greedy(golden().front().prompt, 16, gamma);
        r.sampling.temperature = 0.8f;
        r.sampling.top_p = 0.95f;
        r.sampling.seed = seed;
        return r;
    };
    Engine<Model, Serving, Host, PagedKv<>, FirstLayers> engine(model_file(), options);
    auto const alone = engine.generate({sampled(3, 7)}).front();
    auto const batch =
        engine.generate({greedy(golden()[1].prompt, 12, 2), sampled(3, 7), sampled(3, 8)});
    BOOST_TEST(alone.tokens.size() == 16u);
    BOOST_TEST(alone.speculation.drafted > 0);
    BOOST_TEST(batch[1].tokens == alone.tokens);
    BOOST_TEST(batch[2].tokens != alone.tokens);
    BOOST_TEST(engine.drafter().live_sequences() == 0);
    BOOST_TEST(engine.drafter().cache().used_blocks() == 0);
}

// A draft cache too small for the request: the drafter proposes nothing, the request decodes
// plainly with the right tokens.
BOOST_AUTO_TEST_CASE(a_full_draft_cache_means_no_drafts_not_wrong_tokens) {
    constexpr int tokens = 16;
    auto const& g = golden().front();
    using Cache = FirstLayers::Cache;
    Engine<Model, Serving, Host, PagedKv<>, FirstLayers> engine(
        model_file(), options, FirstLayers(2 * Cache::bytes_per_block));
    auto const plain = plain_tokens(tokens);
    auto const c = engine.generate({greedy(g.prompt, tokens, 4)}).front();
    BOOST_TEST(c.tokens == plain.front());
    if (g.prompt.size() > 2 * 16) {
        BOOST_TEST(c.speculation.drafted == 0);
        BOOST_TEST(engine.drafter().refused() > 0);
    }
    BOOST_TEST(engine.drafter().cache().used_blocks() == 0);
}

BOOST_AUTO_TEST_SUITE_END()
