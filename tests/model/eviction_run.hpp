#pragma once
// Teacher-forced perplexity of a text under a KV eviction policy: the text is fed `chunk`
// tokens per step into one cache slot, and after every step the policy's select_kept picks the
// cache slots to keep and retain_slots compacts the cache to them. Token p keeps its RoPE
// position p whatever its cache slot. Shared by the eviction_perplexity program (the table of
// docs/eviction.md) and the bounded CTest run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/sched/eviction.hpp>

namespace tinfer::testing::eviction {

struct PolicyRun {
    double nll_sum = 0;       // over the predicted tokens, nats
    int predicted = 0;        // tokens 1 .. n-1
    int peak_tokens = 0;      // most KV tokens the cache held, during a step
    int most_kept = 0;        // most tokens left after an eviction
    int evictions = 0;        // steps after which tokens were dropped
    std::vector<double> nll;  // [predicted]: -log p(token p+1 | what the cache holds)

    double perplexity() const { return std::exp(nll_sum / predicted); }
    // Perplexity over the predictions of tokens [first, last).
    double perplexity(int first, int last) const {
        double sum = 0;
        for (int i = first - 1; i < last - 1; ++i) sum += nll[static_cast<std::size_t>(i)];
        return std::exp(sum / (last - first));
    }
};

// -log softmax(logits)[target], in double, max-shifted.
inline double negative_log_likelihood(std::span<float const> logits, int target) {
    float const largest = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (float const l : logits) sum += std::exp(static_cast<double>(l) - largest);
    return std::log(sum) + largest - logits[static_cast<std::size_t>(target)];
}

template <sched::EvictionPolicy Policy, ModelConfig Cfg>
PolicyRun run_policy(model::Llama<Cfg> const& model, std::span<std::int32_t const> text, int chunk,
                     int threads) {
    int const n = static_cast<int>(text.size());
    if (n < 2 || chunk < 1) throw std::invalid_argument("run_policy: needs 2 tokens, chunk >= 1");
    // The cache never holds more than the policy keeps plus one step's tokens.
    int const capacity =
        static_cast<int>(std::min<std::int64_t>(n, std::int64_t{Policy::max_kept()} + chunk));
    kv::ContiguousKvCache<Cfg> cache(1, capacity);
    typename model::Llama<Cfg>::Workspace ws(chunk, threads);
    std::vector<float> logits(static_cast<std::size_t>(chunk) * Cfg.vocab);
    std::vector<float> scores(Policy::needs_attention_scores ? static_cast<std::size_t>(capacity)
                                                             : 0);
    PolicyRun run;
    run.nll.reserve(static_cast<std::size_t>(n - 1));
    for (int first = 0; first < n; first += chunk) {
        int const count = std::min(chunk, n - first);
        int const cached = cache.tokens(0);
        SequenceChunk const step{.slot = 0,
                                 .first_position = first,
                                 .tokens = text.subspan(static_cast<std::size_t>(first),
                                                        static_cast<std::size_t>(count)),
                                 .all_logits = true,
                                 .first_cache_slot = cached,
                                 .attention_scores = scores};
        model.forward(std::span(&step, 1), cache, ws, logits);
        for (int i = 0; i < count && first + i + 1 < n; ++i) {
            double const nll = negative_log_likelihood(
                std::span(logits).subspan(static_cast<std::size_t>(i) * Cfg.vocab, Cfg.vocab),
                text[static_cast<std::size_t>(first + i + 1)]);
            run.nll.push_back(nll);
            run.nll_sum += nll;
            ++run.predicted;
        }
        int const length = cache.tokens(0);
        run.peak_tokens = std::max(run.peak_tokens, length);
        if (length > Policy::max_kept()) {
            std::vector<int> const kept = Policy::select_kept(
                length, std::span<float const>(scores).first(scores.empty() ? 0 : length));
            cache.retain_slots(0, kept);
            // A kept token's score goes with it to its new slot.
            for (std::size_t i = 0; i < scores.size(); ++i) {
                scores[i] = i < kept.size() ? scores[static_cast<std::size_t>(kept[i])] : 0.0f;
            }
            ++run.evictions;
        }
        run.most_kept = std::max(run.most_kept, cache.tokens(0));
    }
    return run;
}

}  // namespace tinfer::testing::eviction
