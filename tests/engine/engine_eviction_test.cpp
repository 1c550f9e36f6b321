// Token eviction driven by the engine: a request under AttentionSinks / HeavyHitters keeps at
// most max_kept() cache slots after every step, and its greedy tokens equal those of a direct
// loop (model + cache + the policy's select_kept + retain_slots, one token at a time) written
// here independently of the engine.
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/engine/engine.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/presets/presets.hpp>

#include "step_until.hpp"
#include "testing.hpp"

using namespace tinfer;
using Model = model::Llama<presets::smollm2_135m>;
namespace s = tinfer::sched;

namespace {

// Greedy generation the slow, obvious way: prefill, then one token per step, evicting after
// every step exactly as the scheduler's contract says.
template <class Eviction>
std::vector<std::int32_t> direct_greedy(Model const& model, std::vector<std::int32_t> prompt,
                                        int new_tokens) {
    kv::ContiguousKvCache<presets::smollm2_135m> cache(1, 512);
    Model::Workspace ws(256, 1);
    std::vector<float> logits(presets::smollm2_135m.vocab);
    std::vector<float> scores(512, 0.0f);
    int evicted = 0;
    std::vector<std::int32_t> out;
    std::vector<std::int32_t> pending = std::move(prompt);
    int position = 0;
    while (static_cast<int>(out.size()) < new_tokens) {
        std::span<float> score_span;
        if constexpr (Eviction::needs_attention_scores) score_span = scores;
        SequenceChunk const chunk{.slot = 0,
                                  .first_position = position,
                                  .tokens = pending,
                                  .first_cache_slot = position - evicted,
                                  .attention_scores = score_span};
        model.forward(std::span(&chunk, 1), cache, ws, logits);
        position += static_cast<int>(pending.size());
        auto const next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) -
                                                    logits.begin());
        out.push_back(next);
        pending = {next};
        int const held = cache.tokens(0);
        if (held > Eviction::max_kept()) {
            std::span<float const> kept_scores;
            if constexpr (Eviction::needs_attention_scores)
                kept_scores = std::span<float const>(scores).first(static_cast<std::size_t>(held));
            auto const kept = Eviction::select_kept(held, kept_scores);
            cache.retain_slots(0, kept);
            std::vector<float> compacted(scores.size(), 0.0f);
            for (std::size_t i = 0; i < kept.size(); ++i) compacted[i] = scores[kept[i]];
            scores = compacted;
            evicted += held - static_cast<int>(kept.size());
        }
    }
    return out;
}

template <class Eviction>
void engine_matches_direct_loop() {
    using Scheduler = s::Scheduler<s::ContinuousBatching<4, 256>, s::ChunkedPrefill<64>,
                                   s::PreemptByRecompute, s::Fcfs, Eviction>;
    auto file = gguf::File::open(testing::model_path());
    auto const model = Model::bind(file);
    Engine<Model, Scheduler> engine(gguf::File::open(testing::model_path()),
                                    {.kv_budget_bytes = 16ull << 20, .threads = 1});
    auto rng = testing::seeded_rng(31);
    std::uniform_int_distribution<std::int32_t> token(17, 49151);
    std::vector<GenerationRequest> requests(2);
    for (auto& r : requests) {
        r.prompt_tokens.resize(40);
        for (auto& t : r.prompt_tokens) t = token(rng);
        r.max_tokens = 48;  // 88 tokens in all, well past the 32 kept
        r.ignore_eos = true;
        r.sampling.temperature = 0;
    }
    int most_held = 0;
    std::vector<Completion> results(requests.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        Completion& c = results[i];
        engine.submit(requests[i], [&](TokenEvent const& e) {
            if (e.token >= 0) c.tokens.push_back(e.token);
            if (!e.error.empty()) c.error = e.error;
        });
    }
    // Two requests of 40 + 48 tokens: 2 prefill chunks and 47 decodes each, batched.
    bool working = true;
    testing::step_until([&] { return !working; },
                        [&] {
                            working = engine.step();
                            for (int seq = 0; seq < 4; ++seq)
                                if (engine.cache().is_live(seq))
                                    most_held = std::max(most_held, engine.cache().tokens(seq));
                        },
                        200, "both evicting requests finishing");
    BOOST_TEST_MESSAGE("most cache slots held after a step: " << most_held);
    BOOST_TEST(most_held <= Eviction::max_kept());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        BOOST_TEST(results[i].error.empty(), results[i].error);
        BOOST_TEST(
            (results[i].tokens == direct_greedy<Eviction>(model, requests[i].prompt_tokens, 48)));
    }
    BOOST_TEST(engine.cache().live_sequences() == 0);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(engine_eviction)

BOOST_AUTO_TEST_CASE(attention_sinks_in_the_engine_equal_the_direct_loop) {
    engine_matches_direct_loop<s::AttentionSinks<4, 28>>();
}

BOOST_AUTO_TEST_CASE(heavy_hitters_in_the_engine_equal_the_direct_loop) {
    engine_matches_direct_loop<s::HeavyHitters<16, 16>>();
}

BOOST_AUTO_TEST_SUITE_END()
