// The float32 forward pass on the real model against the float64 numpy reference
// (tests/reference/llama_reference.py): every prefill position and the first 16 decode steps
// within a tolerance derived from the measured float32 error (golden_tolerance.hpp), the greedy
// continuation up to the first reference near-tie, and batch invariance (all prompts in one batch,
// or prefilled in pieces, bitwise as alone).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "../reference/golden_logits.hpp"
#include "golden_tolerance.hpp"
#include "logit_metrics.hpp"
#include "testing.hpp"

namespace tt = tinfer::testing;
constexpr tinfer::ModelConfig smollm2 = tinfer::presets::smollm2_135m;
using Model = tinfer::model::Llama<smollm2>;
using Cache = tinfer::kv::ContiguousKvCache<smollm2>;
constexpr int vocab = smollm2.vocab;

namespace {

std::span<float const> row(std::vector<float> const& logits, std::size_t r) {
    return {logits.data() + r * vocab, static_cast<std::size_t>(vocab)};
}

// Everything the golden comparison produced, kept for the batch tests.
struct PromptRun {
    std::vector<float> prefill_logits;  // [prompt tokens][vocab]
    std::vector<float> first_decode;    // [vocab], after feeding greedy[0]
};

struct Fixture {
    tinfer::gguf::File file = tinfer::gguf::File::open(tt::model_path());
    Model model = Model::bind(file);
    std::vector<tt::GoldenPrompt> prompts =
        tt::load_golden_logits(tt::data_dir() / "reference" / "golden_logits.bin");
    int total_prompt_tokens() const {
        int n = 0;
        for (auto const& p : prompts) n += static_cast<int>(p.prompt.size());
        return n;
    }
    int longest() const {
        std::size_t n = 0;
        for (auto const& p : prompts) n = std::max(n, p.prompt.size() + p.greedy.size());
        return static_cast<int>(n);
    }
    std::vector<PromptRun> runs;
};

Fixture& fixture() {
    static std::unique_ptr<Fixture> f = std::make_unique<Fixture>();
    return *f;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(golden)

BOOST_AUTO_TEST_CASE(logits_and_greedy_match_float64_reference) {
    Fixture& f = fixture();
    BOOST_REQUIRE(!f.prompts.empty());
    Cache cache(1, f.longest());
    Model::Workspace ws(f.total_prompt_tokens(), 1);
    for (tt::GoldenPrompt const& prompt : f.prompts) {
        BOOST_TEST_CONTEXT("prompt " << prompt.name) {
            cache.clear(0);
            PromptRun run;
            int const n = static_cast<int>(prompt.prompt.size());
            run.prefill_logits.resize(static_cast<std::size_t>(n) * vocab);
            tt::poison(std::span<float>(run.prefill_logits));
            tinfer::SequenceChunk const prefill{0, 0, prompt.prompt, true};
            f.model.forward(std::span(&prefill, 1), cache, ws, run.prefill_logits);
            double worst = 0;
            for (int i = 0; i < n; ++i) {
                double const e =
                    tt::scaled_golden_error(row(run.prefill_logits, i), prompt.prefill[i]);
                BOOST_TEST(e <= 1.0, "prefill position " << i << ": scaled error " << e);
                worst = std::max(worst, e);
            }
            BOOST_TEST_MESSAGE(prompt.name << ": worst prefill error " << worst
                                           << " of the tolerance");

            // Teacher-forced decode of the reference's greedy tokens. Our argmax must follow the
            // reference's until the first position whose reference margin is within tolerance.
            bool tie_seen = false;
            auto const check_greedy = [&](std::span<float const> ours,
                                          tt::GoldenPosition const& ref, std::size_t k) {
                if (tie_seen) return;
                if (ref.top2_margin <= 2 * tt::golden_tolerance(ref)) {
                    BOOST_TEST_MESSAGE(prompt.name << ": greedy[" << k << "] is a near-tie (margin "
                                                   << ref.top2_margin
                                                   << "), greedy compared up to it");
                    tie_seen = true;
                    return;
                }
                BOOST_TEST(tt::argmax(ours) == prompt.greedy[k], "greedy[" << k << "]");
            };
            check_greedy(row(run.prefill_logits, n - 1), prompt.prefill.back(), 0);
            std::vector<float> logits(vocab);
            double worst_decode = 0;
            for (std::size_t i = 0; i < prompt.decode.size(); ++i) {
                tt::poison(std::span<float>(logits));
                std::span<std::int32_t const> const token(&prompt.greedy[i], 1);
                tinfer::SequenceChunk const decode{0, n + static_cast<int>(i), token};
                f.model.forward(std::span(&decode, 1), cache, ws, logits);
                if (i == 0) run.first_decode = logits;
                if (!prompt.decode[i].logits.empty()) {
                    double const e = tt::scaled_golden_error(logits, prompt.decode[i]);
                    BOOST_TEST(e <= 1.0, "decode step " << i << ": scaled error " << e);
                    worst_decode = std::max(worst_decode, e);
                }
                if (i + 1 < prompt.greedy.size()) check_greedy(logits, prompt.decode[i], i + 1);
            }
            BOOST_TEST_MESSAGE(prompt.name << ": worst decode error " << worst_decode
                                           << " of the tolerance");
            f.runs.push_back(std::move(run));
        }
    }
}

// All prompts prefilled in one step, then all decoded in one step, then decoded one at a time,
// on two threads where the single runs used one: bitwise the logits of each alone.
BOOST_AUTO_TEST_CASE(batch_equals_alone_bitwise) {
    Fixture& f = fixture();
    BOOST_REQUIRE_MESSAGE(f.runs.size() == f.prompts.size(), "needs the golden run's logits");
    int const count = static_cast<int>(f.prompts.size());
    Cache cache(count, f.longest());
    Model::Workspace ws(f.total_prompt_tokens(), 2);
    std::vector<tinfer::SequenceChunk> chunks;
    for (int s = 0; s < count; ++s) chunks.push_back({s, 0, f.prompts[s].prompt});
    std::vector<float> logits(Model::logit_rows(chunks) * vocab);
    tt::poison(std::span<float>(logits));
    f.model.forward(chunks, cache, ws, logits);
    for (int s = 0; s < count; ++s) {
        std::size_t const last = f.prompts[s].prompt.size() - 1;
        BOOST_TEST(std::memcmp(row(logits, s).data(), row(f.runs[s].prefill_logits, last).data(),
                               vocab * sizeof(float)) == 0,
                   f.prompts[s].name << ": batched prefill differs from alone");
    }
    chunks.clear();
    for (int s = 0; s < count; ++s) {
        chunks.push_back({s, static_cast<int>(f.prompts[s].prompt.size()),
                          std::span<std::int32_t const>(&f.prompts[s].greedy[0], 1)});
    }
    tt::poison(std::span<float>(logits));
    f.model.forward(chunks, cache, ws, logits);
    for (int s = 0; s < count; ++s) {
        BOOST_TEST(std::memcmp(row(logits, s).data(), f.runs[s].first_decode.data(),
                               vocab * sizeof(float)) == 0,
                   f.prompts[s].name << ": batched decode differs from alone");
    }
    // The same decode steps one sequence at a time, still on two threads: a one-row step has
    // each thread normalize the row into its own copy (model/host_ops.hpp), and each thread's
    // strips must read the bits the one-thread run read. Rewriting a position's KV with the same
    // token is allowed.
    std::vector<float> alone(vocab);
    for (int s = 0; s < count; ++s) {
        tinfer::SequenceChunk const decode{
            s, static_cast<int>(f.prompts[s].prompt.size()),
            std::span<std::int32_t const>(&f.prompts[s].greedy[0], 1)};
        tt::poison(std::span<float>(alone));
        f.model.forward(std::span(&decode, 1), cache, ws, alone);
        BOOST_TEST(
            std::memcmp(alone.data(), f.runs[s].first_decode.data(), vocab * sizeof(float)) == 0,
            f.prompts[s].name << ": one-row decode on two threads differs from one thread");
    }
}

// The longest prompt prefilled in uneven chunks, each step mixing it with another sequence's
// decode, gives the one-pass logits bitwise at every position.
BOOST_AUTO_TEST_CASE(chunked_prefill_mixed_with_decode_equals_one_pass) {
    Fixture& f = fixture();
    BOOST_REQUIRE_MESSAGE(f.runs.size() == f.prompts.size(), "needs the golden run's logits");
    auto const longest = std::max_element(
        f.prompts.begin(), f.prompts.end(),
        [](auto const& a, auto const& b) { return a.prompt.size() < b.prompt.size(); });
    std::size_t const index = static_cast<std::size_t>(longest - f.prompts.begin());
    std::size_t const other = (index + 1) % f.prompts.size();
    auto const& prompt = longest->prompt;
    auto const& filler = f.prompts[other].greedy;

    Cache cache(2, f.longest());
    Model::Workspace ws(256, 2);
    std::vector<float> logits;
    std::size_t done = 0;
    int filler_position = 0;
    for (std::size_t const size : {1, 96, 37, 200, 1000}) {
        std::size_t const take = std::min(size, prompt.size() - done);
        if (take == 0) break;
        std::vector<tinfer::SequenceChunk> const chunks = {
            {1, filler_position,
             std::span<std::int32_t const>(&filler[static_cast<std::size_t>(filler_position)], 1)},
            {0, static_cast<int>(done), std::span(prompt).subspan(done, take), true}};
        logits.assign(Model::logit_rows(chunks) * vocab, NAN);
        f.model.forward(chunks, cache, ws, logits);
        BOOST_TEST(
            std::memcmp(logits.data() + vocab, row(f.runs[index].prefill_logits, done).data(),
                        take * vocab * sizeof(float)) == 0,
            "positions " << done << ".." << done + take - 1 << " differ from the one-pass prefill");
        done += take;
        ++filler_position;
    }
    BOOST_TEST(done == prompt.size());
}

BOOST_AUTO_TEST_CASE(refuses_bad_requests) {
    Fixture& f = fixture();
    Cache cache(2, 64);
    Model::Workspace ws(8, 1);
    std::vector<float> logits(2 * vocab);
    std::vector<std::int32_t> const tokens = {1, 2, 3};
    std::vector<std::int32_t> const too_many(9, 1);
    std::vector<std::int32_t> const bad_id = {vocab};
    auto const run = [&](std::vector<tinfer::SequenceChunk> const& chunks) {
        f.model.forward(chunks, cache, ws, logits);
    };
    BOOST_CHECK_THROW(run({{0, 0, too_many}}), tinfer::RequestError);
    BOOST_CHECK_THROW(run({{0, 0, bad_id}}), tinfer::RequestError);
    BOOST_CHECK_THROW(run({{0, 0, tokens}, {0, 3, tokens}}), tinfer::RequestError);
    BOOST_CHECK_THROW(run({{0, smollm2.max_context - 1, tokens}}), tinfer::RequestError);
    BOOST_CHECK_THROW(run({{0, 5, tokens}}), tinfer::RequestError);  // a gap in the cache
    std::vector<float> small(vocab - 1);
    std::vector<tinfer::SequenceChunk> const one = {{0, 0, tokens}};
    BOOST_CHECK_THROW(f.model.forward(one, cache, ws, small), tinfer::RequestError);
}

BOOST_AUTO_TEST_SUITE_END()
