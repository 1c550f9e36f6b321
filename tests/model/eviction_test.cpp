// Token eviction: retain_slots on both caches (bitwise against the tokens it keeps, forks
// untouched, no block leaked), the attention probabilities H2O ranks by (against a float64
// softmax), and on the real model: a window-evicted cache gives the logits of a sliding-window
// model (the independent check that RoPE positions and cache slots are kept apart correctly),
// and the bounded perplexity run of docs/eviction.md.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numbers>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/kv/paged_cache.hpp>
#include <tinfer/model/attention_scores.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>
#include <tinfer/sched/eviction.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

#include "eviction_run.hpp"
#include "testing.hpp"
#include "text_corpus.hpp"

namespace tt = tinfer::testing;
namespace ev = tinfer::testing::eviction;
namespace kv = tinfer::kv;
namespace sched = tinfer::sched;
constexpr tinfer::ModelConfig smollm2 = tinfer::presets::smollm2_135m;
using Model = tinfer::model::Llama<smollm2>;
constexpr int vocab = smollm2.vocab;
constexpr int head_dim = smollm2.head_dim;
constexpr int kv_width = smollm2.kv_width();
// The project's model-level tolerance (tests/model/golden_test.cpp): a logit may be off by this
// fraction of the position's largest |logit|.
constexpr double logit_rtol = 1e-3;

namespace {

// Random K and V for `tokens` tokens of every layer: [layer][token][kv_width].
struct RandomKv {
    std::vector<float> k, v;
    RandomKv(std::mt19937_64& rng, int tokens)
        : k(tt::random_floats(rng, std::size_t{smollm2.layers} * tokens * kv_width)),
          v(tt::random_floats(rng, std::size_t{smollm2.layers} * tokens * kv_width)) {}
    float const* key(int layer, int token, int tokens) const {
        return k.data() + (static_cast<std::size_t>(layer) * tokens + token) * kv_width;
    }
    float const* value(int layer, int token, int tokens) const {
        return v.data() + (static_cast<std::size_t>(layer) * tokens + token) * kv_width;
    }
};

template <class Cache>
void write_all(Cache& cache, int seq, RandomKv const& data, int tokens) {
    for (int layer = 0; layer < smollm2.layers; ++layer)
        for (int t = 0; t < tokens; ++t)
            cache.write(seq, layer, t, data.key(layer, t, tokens), data.value(layer, t, tokens));
}

// Every layer and head of `view`s holds, at slot i, the original token expected[i].
template <class Cache>
bool holds(Cache const& cache, int seq, RandomKv const& data, int tokens,
           std::vector<int> const& expected) {
    std::vector<float> got(expected.size() * head_dim);
    for (int layer = 0; layer < smollm2.layers; ++layer) {
        auto const view = cache.view(seq, layer);
        if (view.tokens() != static_cast<int>(expected.size())) return false;
        for (int h = 0; h < smollm2.kv_heads; ++h) {
            for (int pass = 0; pass < 2; ++pass) {
                if (pass == 0) {
                    view.load_keys(h, 0, view.tokens(), got.data());
                } else {
                    view.load_values(h, 0, view.tokens(), got.data());
                }
                for (std::size_t i = 0; i < expected.size(); ++i) {
                    float const* want = (pass == 0 ? data.key(layer, expected[i], tokens)
                                                   : data.value(layer, expected[i], tokens)) +
                                        h * head_dim;
                    if (std::memcmp(got.data() + i * head_dim, want, head_dim * sizeof(float)))
                        return false;
                }
            }
        }
    }
    return true;
}

std::vector<int> random_subset(std::mt19937_64& rng, int length) {
    std::vector<int> kept;
    std::bernoulli_distribution keep(0.4);
    for (int s = 0; s < length; ++s)
        if (keep(rng)) kept.push_back(s);
    return kept;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(retain_slots)

BOOST_AUTO_TEST_CASE(contiguous_cache_keeps_exactly_the_given_tokens) {
    auto rng = tt::seeded_rng(std::random_device{}());
    constexpr int tokens = 45;
    RandomKv const data(rng, tokens);
    for (int round = 0; round < 8; ++round) {
        kv::ContiguousKvCache<smollm2> cache(2, tokens + 1);
        write_all(cache, 1, data, tokens);
        std::vector<int> kept = round == 0 ? std::vector<int>{} : random_subset(rng, tokens);
        if (round == 1) kept = sched::AttentionSinks<4, 8>::select_kept(tokens, {});
        BOOST_TEST_CONTEXT("kept " << kept.size() << " of " << tokens) {
            cache.retain_slots(1, kept);
            BOOST_TEST(cache.tokens(1) == static_cast<int>(kept.size()));
            BOOST_TEST(holds(cache, 1, data, tokens, kept));
            // The next token goes to the first free slot.
            int const next = static_cast<int>(kept.size());
            for (int layer = 0; layer < smollm2.layers; ++layer)
                cache.write(1, layer, next, data.key(layer, 0, tokens),
                            data.value(layer, 0, tokens));
            BOOST_TEST(cache.tokens(1) == next + 1);
        }
    }
}

BOOST_AUTO_TEST_CASE(contiguous_cache_refuses_bad_slot_lists) {
    kv::ContiguousKvCache<smollm2> cache(1, 8);
    auto rng = tt::seeded_rng(1);
    RandomKv const data(rng, 4);
    write_all(cache, 0, data, 4);
    std::vector<int> const descending = {2, 1}, repeated = {1, 1}, past_end = {0, 4},
                           negative = {-1};
    BOOST_CHECK_THROW(cache.retain_slots(0, descending), tinfer::RequestError);
    BOOST_CHECK_THROW(cache.retain_slots(0, repeated), tinfer::RequestError);
    BOOST_CHECK_THROW(cache.retain_slots(0, past_end), tinfer::RequestError);
    BOOST_CHECK_THROW(cache.retain_slots(0, negative), tinfer::RequestError);
    BOOST_TEST(cache.tokens(0) == 4);
}

// The paged cache's compaction against the contiguous one, with a fork sharing the blocks: the
// fork must keep its tokens, and every block must go back to the pool at the end.
BOOST_AUTO_TEST_CASE(paged_cache_compacts_copies_shared_blocks_and_frees_the_rest) {
    using Paged = kv::PagedKvCache<smollm2, 16, kv::Fp32Codec>;
    auto rng = tt::seeded_rng(std::random_device{}());
    constexpr int tokens = 77;  // 5 blocks, the last partly filled
    RandomKv const data(rng, tokens);
    std::vector<int> all(tokens);
    std::iota(all.begin(), all.end(), 0);
    for (int round = 0; round < 6; ++round) {
        Paged cache(Paged::bytes_per_block * 12);
        int const seq = cache.admit(tokens);
        BOOST_REQUIRE(cache.reserve(seq, tokens));
        write_all(cache, seq, data, tokens);
        bool const forked = round % 2 == 0;
        int const child = forked ? cache.fork(seq) : -1;
        std::vector<int> kept = random_subset(rng, tokens);
        if (round == 1) kept = sched::SlidingWindow<20>::select_kept(tokens, {});
        BOOST_TEST_CONTEXT("round " << round << ", kept " << kept.size() << ", fork " << forked) {
            cache.retain_slots(seq, kept);
            BOOST_TEST(cache.tokens(seq) == static_cast<int>(kept.size()));
            BOOST_TEST(cache.reserved(seq) == static_cast<int>(kept.size()));
            BOOST_TEST(static_cast<int>(cache.block_table(seq).size()) ==
                       Paged::blocks_for(static_cast<int>(kept.size())));
            BOOST_TEST(holds(cache, seq, data, tokens, kept));
            if (forked) BOOST_TEST(holds(cache, child, data, tokens, all));
            // Growing again after the eviction.
            BOOST_REQUIRE(cache.reserve(seq, static_cast<int>(kept.size()) + 1));
            for (int layer = 0; layer < smollm2.layers; ++layer)
                cache.write(seq, layer, static_cast<int>(kept.size()), data.key(layer, 0, tokens),
                            data.value(layer, 0, tokens));
            std::vector<int> grown = kept;
            grown.push_back(0);
            BOOST_TEST(holds(cache, seq, data, tokens, grown));
            if (forked) BOOST_TEST(holds(cache, child, data, tokens, all));
            cache.release(seq);
            if (forked) cache.release(child);
            BOOST_TEST(cache.free_blocks() == cache.total_blocks());
        }
    }
}

BOOST_AUTO_TEST_CASE(paged_cache_refuses_when_shared_blocks_cannot_be_copied) {
    using Paged = kv::PagedKvCache<smollm2, 16, kv::Fp32Codec>;
    auto rng = tt::seeded_rng(2);
    constexpr int tokens = 32;  // two full blocks, both shared with the fork, none free
    RandomKv const data(rng, tokens);
    Paged cache(Paged::bytes_per_block * 2);
    int const seq = cache.admit(tokens);
    BOOST_REQUIRE(cache.reserve(seq, tokens));
    write_all(cache, seq, data, tokens);
    int const child = cache.fork(seq);
    std::vector<int> const kept = {1, 2, 3};
    BOOST_CHECK_THROW(cache.retain_slots(seq, kept), tinfer::Error);
    std::vector<int> all(tokens);
    std::iota(all.begin(), all.end(), 0);
    BOOST_TEST(holds(cache, seq, data, tokens, all));
    BOOST_TEST(holds(cache, child, data, tokens, all));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(attention_scores)

// Against a float64 softmax of the same scores. The tolerance is derived: a float32 dot of
// head_dim terms is within float32_sum_rtol(head_dim) * sum|q_i k_i| of the exact one; a score
// error d (base 2) moves a probability by a factor within 2^(+-2d) (its own score and the
// normaliser), i.e. relatively by about 2 ln2 d; exp2 and the division add a few ulps.
BOOST_AUTO_TEST_CASE(probabilities_match_a_float64_softmax) {
    constexpr int group = smollm2.group_size();
    using Attention = tinfer::model::AttentionFor<smollm2>;
    auto rng = tt::seeded_rng(std::random_device{}());
    constexpr int cached = 150;  // several attention tiles
    constexpr int queries = 5;
    kv::ContiguousKvCache<smollm2> cache(1, cached);
    RandomKv const data(rng, cached);
    write_all(cache, 0, data, cached);
    std::vector<float> const q =
        tt::random_floats(rng, static_cast<std::size_t>(queries) * smollm2.q_width(), -2.0f, 2.0f);
    std::vector<float> scores(cached, 0.0f);
    int const first = cached - queries;
    tinfer::kernels::AttentionChunk const chunk{
        first, queries, q.data(), static_cast<std::size_t>(smollm2.q_width()), nullptr, 0};
    int const layer = 3;
    tinfer::model::add_attention_probabilities<head_dim, group, 0>(cache.view(0, layer),
                                                                   smollm2.kv_heads, chunk, scores);

    std::vector<double> expected(cached, 0.0), bound(cached, 0.0);
    double const scale = Attention::score_scale;
    double const eps = std::numeric_limits<float>::epsilon();
    for (int i = 0; i < queries; ++i) {
        int const slot = first + i;
        for (int head = 0; head < smollm2.heads; ++head) {
            int const kv_head = head / group;
            float const* query =
                q.data() + static_cast<std::size_t>(i) * smollm2.q_width() + head * head_dim;
            std::vector<double> s(slot + 1);
            double worst_score_error = 0;
            for (int j = 0; j <= slot; ++j) {
                float const* key = data.key(layer, j, cached) + kv_head * head_dim;
                double dot = 0, magnitude = 0;
                for (int d = 0; d < head_dim; ++d) {
                    dot += double(query[d]) * key[d];
                    magnitude += std::abs(double(query[d]) * key[d]);
                }
                s[j] = dot * scale;
                worst_score_error =
                    std::max(worst_score_error, tt::float32_sum_rtol(head_dim) * magnitude * scale);
            }
            double const top = *std::max_element(s.begin(), s.end());
            double sum = 0;
            for (double const x : s) sum += std::exp2(x - top);
            double const rtol = 2 * std::numbers::ln2 * 2 * worst_score_error + 8 * eps;
            for (int j = 0; j <= slot; ++j) {
                double const p = std::exp2(s[j] - top) / sum;
                expected[j] += p;
                bound[j] += rtol * p + eps;  // + the float accumulation of the sum
            }
        }
    }
    double worst = 0, total = 0;
    for (int j = 0; j < cached; ++j) {
        worst = std::max(worst, std::abs(scores[j] - expected[j]) / bound[j]);
        total += scores[j];
    }
    BOOST_TEST(worst <= 1.0, "worst error " << worst << " of the derived bound");
    // Each of queries x heads distributions sums to 1.
    BOOST_TEST(std::abs(total - queries * smollm2.heads) <= 1e-4 * queries * smollm2.heads);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

struct ModelFixture {
    tinfer::gguf::File file = tinfer::gguf::File::open(tt::model_path());
    Model model = Model::bind(file);
    std::vector<std::int32_t> text = tinfer::tok::tokenizer_from_gguf(file).encode(
        tt::read_texts(tt::corpus_paths((tt::data_dir() / "text").string())));
};

ModelFixture& model_fixture() {
    static std::unique_ptr<ModelFixture> f = std::make_unique<ModelFixture>();
    return *f;
}

double max_abs(std::span<float const> row) {
    double m = 0;
    for (float const x : row) m = std::max(m, std::abs(double(x)));
    return m;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(eviction_on_the_model)

// In a forward with attention_scores, every query head of every layer distributes exactly one
// unit of probability over the cache.
BOOST_AUTO_TEST_CASE(forward_reports_one_unit_of_attention_per_query_head_and_layer) {
    ModelFixture& f = model_fixture();
    constexpr int n = 40;
    kv::ContiguousKvCache<smollm2> cache(1, n);
    Model::Workspace ws(n, 2);
    std::vector<float> logits(vocab), scores(n, 0.0f), plain(vocab);
    tinfer::SequenceChunk const with_scores{.slot = 0,
                                            .first_position = 0,
                                            .tokens = std::span(f.text).first(n),
                                            .attention_scores = scores};
    f.model.forward(std::span(&with_scores, 1), cache, ws, logits);
    double const total = std::accumulate(scores.begin(), scores.end(), 0.0);
    double const units = double(n) * smollm2.heads * smollm2.layers;
    BOOST_TEST(std::abs(total - units) <= 1e-4 * units, "total " << total << " of " << units);
    BOOST_TEST(*std::min_element(scores.begin(), scores.end()) > 0.0f);
    BOOST_TEST_MESSAGE("attention mass on the first token: " << scores[0] / units
                                                             << " of the total");
    // Asking for scores changes no logit.
    cache.clear(0);
    tinfer::SequenceChunk const without{0, 0, std::span(f.text).first(n)};
    f.model.forward(std::span(&without, 1), cache, ws, plain);
    BOOST_TEST(std::memcmp(plain.data(), logits.data(), vocab * sizeof(float)) == 0);
}

// SlidingWindow<W> eviction, token by token, keeps exactly the keys a model with a sliding
// window of W + 1 (Mistral's mask, by position) lets each query see, computed from the same
// values: the logits must agree within the model tolerance, although the evicting run stores
// them at other cache slots with their original rotations. The same run against the full
// model must disagree, or the comparison would prove nothing.
BOOST_AUTO_TEST_CASE(window_eviction_equals_a_sliding_window_model) {
    ModelFixture& f = model_fixture();
    constexpr int window = 32;
    constexpr int n = 100;
    constexpr tinfer::ModelConfig windowed = [] {
        tinfer::ModelConfig c = smollm2;
        c.sliding_window = window + 1;
        return c;
    }();
    using WindowedModel = tinfer::model::Llama<windowed>;
    auto const full = tinfer::model::ModelWeights<smollm2>::bind(f.file);
    tinfer::model::ModelWeights<windowed> weights{full.token_embedding, full.output,
                                                  full.output_norm, full.layers};
    auto const windowed_model = WindowedModel::from_weights(weights);
    std::span<std::int32_t const> const text = std::span(f.text).first(n);

    std::vector<float> reference(static_cast<std::size_t>(n) * vocab), unevicted(reference);
    {
        kv::ContiguousKvCache<windowed> cache(1, n);
        WindowedModel::Workspace ws(n, 2);
        tinfer::SequenceChunk const all{0, 0, text, true};
        windowed_model.forward(std::span(&all, 1), cache, ws, reference);
        kv::ContiguousKvCache<smollm2> full_cache(1, n);
        Model::Workspace full_ws(n, 2);
        f.model.forward(std::span(&all, 1), full_cache, full_ws, unevicted);
    }

    using Window = sched::SlidingWindow<window>;
    kv::ContiguousKvCache<smollm2> cache(1, window + 1);
    Model::Workspace ws(1, 2);
    std::vector<float> logits(vocab);
    double worst = 0, worst_against_full = 0;
    for (int p = 0; p < n; ++p) {
        tinfer::SequenceChunk const step{.slot = 0,
                                         .first_position = p,
                                         .tokens = text.subspan(static_cast<std::size_t>(p), 1),
                                         .first_cache_slot = cache.tokens(0)};
        tt::poison(std::span<float>(logits));
        f.model.forward(std::span(&step, 1), cache, ws, logits);
        auto const want =
            std::span<float const>(reference).subspan(static_cast<std::size_t>(p) * vocab, vocab);
        auto const full_row =
            std::span<float const>(unevicted).subspan(static_cast<std::size_t>(p) * vocab, vocab);
        double const unit = logit_rtol * max_abs(want);
        for (int t = 0; t < vocab; ++t) {
            double const e = std::abs(double(logits[t]) - want[t]) / unit;
            worst = std::max(worst, std::isnan(e) ? INFINITY : e);
            worst_against_full =
                std::max(worst_against_full, std::abs(double(logits[t]) - full_row[t]) / unit);
        }
        if (cache.tokens(0) > Window::max_kept()) {
            cache.retain_slots(0, Window::select_kept(cache.tokens(0)));
        }
        BOOST_REQUIRE(cache.tokens(0) <= Window::max_kept());
    }
    BOOST_TEST_MESSAGE("window eviction vs sliding-window model: worst error "
                       << worst << " of the tolerance; vs the full model " << worst_against_full);
    BOOST_TEST(worst <= 1.0);
    BOOST_TEST(worst_against_full > 1.0);
}

// The bounded run of eviction_perplexity, scaled down to a 64-token budget and 160 tokens so it
// stays a test (the docs' 256-token table comes from the program).
BOOST_AUTO_TEST_CASE(budgeted_policies_stay_bounded_and_agree_until_the_first_eviction) {
    ModelFixture& f = model_fixture();
    constexpr int n = 160;
    constexpr int budget = 64;
    constexpr int threads = 1;
    BOOST_REQUIRE(static_cast<int>(f.text.size()) >= n);
    std::span<std::int32_t const> const text = std::span(f.text).first(n);
    auto const full = ev::run_policy<sched::NoEviction>(f.model, text, budget, threads);
    auto const window = ev::run_policy<sched::SlidingWindow<budget>>(f.model, text, 1, threads);
    auto const sinks =
        ev::run_policy<sched::AttentionSinks<4, budget - 4>>(f.model, text, 1, threads);
    auto const heavy =
        ev::run_policy<sched::HeavyHitters<budget / 2, budget / 2>>(f.model, text, 1, threads);

    BOOST_TEST(full.evictions == 0);
    BOOST_TEST(full.peak_tokens == n);
    for (auto const* run : {&window, &sinks, &heavy}) {
        BOOST_TEST(run->most_kept <= budget);
        BOOST_TEST(run->peak_tokens == budget + 1);  // the kept tokens and the step's one
        BOOST_TEST(run->evictions == n - budget);
        BOOST_TEST(std::isfinite(run->perplexity()));
        // Up to the first eviction every policy holds the whole text, one token per step, as the
        // full cache does in chunks: batch invariance makes those predictions bitwise equal.
        BOOST_TEST(std::equal(run->nll.begin(), run->nll.begin() + budget + 1, full.nll.begin()));
        // ... and after it they differ: tokens were really dropped.
        BOOST_TEST(!std::equal(run->nll.begin(), run->nll.end(), full.nll.begin()));
    }
    double const late_full = full.perplexity(budget + 1, n);
    double const late_window = window.perplexity(budget + 1, n);
    BOOST_TEST_MESSAGE("perplexity of tokens "
                       << budget + 1 << ".." << n - 1 << ": full " << late_full << ", window "
                       << late_window << ", sinks " << sinks.perplexity(budget + 1, n) << ", H2O "
                       << heavy.perplexity(budget + 1, n));
    // Once the first token leaves a plain window the model loses its attention sink (53% of all
    // attention, see forward_reports_...): StreamingLLM's collapse, far beyond the full cache.
    BOOST_TEST(late_window > 2 * late_full);
}

BOOST_AUTO_TEST_SUITE_END()
