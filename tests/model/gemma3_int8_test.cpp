// kernels::Int8Activations on Gemma 3 270M, whose matrices are Q5_0 (most), Q4_K and Q6_K
// (attention output, FFN down) and Q8_0 (the tied LM head): every one takes the int8 strip
// kernels, each repacked by its own type. Against the float32 path at every position of a
// prompt: KL divergence and top-1 agreement over the full vocabulary; and batch invariance of
// the int8 path, bitwise (alone, in pieces, batched with another prompt).
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/int8_dot.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "gemma3_fixture.hpp"
#include "logit_metrics.hpp"
#include "testing.hpp"

namespace tt = tinfer::testing;
constexpr tinfer::ModelConfig gemma3 = tinfer::presets::gemma3_270m;
using Model = tinfer::model::Llama<gemma3>;
using Cache = tinfer::kv::ContiguousKvCache<gemma3>;
using Int8 = tinfer::kernels::Int8Activations;
using Float32 = tinfer::kernels::Float32Activations;
constexpr int vocab = gemma3.vocab;

// Bounds as SmolLM2's (int8_precision_test.cpp); measured on this prompt (48 positions,
// 2026-12-05): mean KL 0.0030 nats, worst 0.017. Top-1 is asserted where float32's choice is
// not a near-tie, as SmolLM2's reference check does: its margin over the runner-up above 2% of
// the position's largest logit. Random tokens make near-ties common (22 of 48 positions here
// by that rule; the 4 where int8 picks the runner-up have margins 0.005-0.055, where int8 moves
// a logit by up to 0.5), and which side of such a tie each path lands on turns on rounding: an
// order change inside attention's softmax sum took the count of all 48 from 46 to 44.
constexpr double mean_kl_bound = 0.01;
constexpr double max_kl_bound = 0.1;
constexpr double near_tie_share = 0.02;

namespace {

// Logits of every position of `prompt`, prefilled alone.
template <class Precision>
std::vector<float> all_logits(tt::Gemma3Fixture& f, std::vector<std::int32_t> const& prompt) {
    int const n = static_cast<int>(prompt.size());
    Cache cache(1, n);
    Model::Workspace ws(n, 1);
    std::vector<float> logits(static_cast<std::size_t>(n) * vocab);
    tt::poison(std::span<float>(logits));
    tinfer::SequenceChunk const chunk{0, 0, prompt, true};
    f.model.forward<Precision>(std::span(&chunk, 1), cache, ws, logits);
    return logits;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gemma3_int8)

BOOST_AUTO_TEST_CASE(every_matrix_type_has_an_int8_dot) {
    auto const& w = tt::gemma3_fixture().model.weights();
    BOOST_TEST(tinfer::kernels::has_int8_dot(w.output.type));
    for (auto const& layer : w.layers) {
        for (auto const* m :
             {&layer.q, &layer.k, &layer.v, &layer.output, &layer.gate, &layer.up, &layer.down})
            BOOST_TEST(tinfer::kernels::has_int8_dot(m->type), name_of(m->type));
    }
}

BOOST_AUTO_TEST_CASE(int8_stays_close_to_float32) {
    tt::Gemma3Fixture& f = tt::gemma3_fixture();
    std::vector<std::int32_t> const prompt = tt::random_gemma3_tokens(48, 7, 20000);
    std::vector<float> const exact = all_logits<Float32>(f, prompt);
    std::vector<float> const quantized = all_logits<Int8>(f, prompt);
    int const n = static_cast<int>(prompt.size());
    double kl_sum = 0, kl_max = 0;
    int agree = 0, decisive = 0, decisive_agree = 0;
    for (int t = 0; t < n; ++t) {
        std::span<float const> const a(exact.data() + static_cast<std::size_t>(t) * vocab, vocab);
        std::span<float const> const b(quantized.data() + static_cast<std::size_t>(t) * vocab,
                                       vocab);
        BOOST_REQUIRE(std::all_of(b.begin(), b.end(), [](float x) { return std::isfinite(x); }));
        double const kl = tt::kl_divergence(a, b);
        kl_sum += kl;
        kl_max = std::max(kl_max, kl);
        int const top = tt::argmax(a);
        bool const same = top == tt::argmax(b);
        agree += same;
        float runner_up = -std::numeric_limits<float>::infinity(), largest = 0;
        for (int v = 0; v < vocab; ++v) {
            if (v != top) runner_up = std::max(runner_up, a[v]);
            largest = std::max(largest, std::abs(a[v]));
        }
        if (a[top] - runner_up > near_tie_share * largest) {
            ++decisive;
            decisive_agree += same;
        }
    }
    BOOST_TEST_MESSAGE("mean KL " << kl_sum / n << ", worst " << kl_max << ", top-1 " << agree
                                  << " / " << n << ", where not a near-tie " << decisive_agree
                                  << " / " << decisive);
    BOOST_TEST(kl_sum / n <= mean_kl_bound);
    BOOST_TEST(kl_max <= max_kl_bound);
    BOOST_TEST(decisive >= n / 3, decisive << " of " << n << " positions are not near-ties");
    BOOST_TEST(decisive_agree == decisive);
}

BOOST_AUTO_TEST_CASE(int8_is_batch_invariant_bitwise) {
    tt::Gemma3Fixture& f = tt::gemma3_fixture();
    std::vector<std::int32_t> const first = tt::random_gemma3_tokens(40, 11, 20000);
    std::vector<std::int32_t> const second = tt::random_gemma3_tokens(9, 12, 20000);
    std::vector<float> const first_alone = all_logits<Int8>(f, first);
    std::vector<float> const second_alone = all_logits<Int8>(f, second);

    // The first prompt in two pieces, the second piece batched with the whole second prompt.
    Cache cache(2, 64);
    Model::Workspace ws(64, 2);
    std::span<std::int32_t const> const all(first);
    std::vector<float> head(static_cast<std::size_t>(25) * vocab);
    tinfer::SequenceChunk const piece{0, 0, all.subspan(0, 25), true};
    f.model.forward<Int8>(std::span(&piece, 1), cache, ws, head);
    std::vector<float> batched(static_cast<std::size_t>(15 + 9) * vocab);
    tinfer::SequenceChunk const both[] = {{0, 25, all.subspan(25), true}, {1, 0, second, true}};
    f.model.forward<Int8>(std::span(both), cache, ws, batched);
    BOOST_TEST(std::equal(head.begin(), head.end(), first_alone.begin()));
    BOOST_TEST(std::equal(batched.begin(), batched.begin() + 15 * vocab,
                          first_alone.begin() + 25 * vocab));
    BOOST_TEST(std::equal(batched.begin() + 15 * vocab, batched.end(), second_alone.begin()));
}

BOOST_AUTO_TEST_SUITE_END()
