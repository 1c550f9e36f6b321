#pragma once
// The attention probability each cached token received, summed over query heads and queries:
// the statistic H2O (Zhang et al. 2023) ranks tokens by when it evicts all but the heavy
// hitters.
//
// Attention itself never forms a row of probabilities (its online softmax rescales a running
// output tile by tile), so the probabilities are computed here in a second pass, only for the
// chunks that ask for them: the query's scores against every key it sees, scaled exactly as
// kernels::Attention scales them (same dot product, same base-2 scale), then the maximum and
// the sum over all of them, and only then each key's exp2(score - max) / sum. Each query head's
// probabilities therefore sum to 1 up to rounding, whatever the number of tiles.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/attention.hpp>
#include <tinfer/kv/kv_view.hpp>

namespace tinfer::model {

// scores[s] += sum over the chunk's queries and the query heads of kv_heads [0, kv_heads) of
// the softmax probability the query gave cache slot s. `chunk.first_position` is the first
// query's cache slot (queries see slots up to their own, and the attention's sliding window);
// scores must hold every slot the view caches.
template <int head_dim, int group_size, int sliding_window, int query_scale_dim = head_dim,
          kv::KvView View>
void add_attention_probabilities(View const& view, int kv_heads,
                                 kernels::AttentionChunk const& chunk, std::span<float> scores) {
    using Attention = kernels::Attention<head_dim, group_size, sliding_window, query_scale_dim>;
    Attention::check_cached(view, chunk);
    int const keys_seen = chunk.first_position + chunk.queries;
    if (scores.size() < static_cast<std::size_t>(keys_seen)) {
        throw Error("attention scores: " + std::to_string(scores.size()) + " slots for " +
                    std::to_string(keys_seen) + " cached keys");
    }
    std::vector<float> keys(static_cast<std::size_t>(keys_seen) * head_dim);  // [slot][head_dim]
    std::vector<float> logits(static_cast<std::size_t>(keys_seen));           // base-2 scores
    for (int kv_head = 0; kv_head < kv_heads; ++kv_head) {
        view.load_keys(kv_head, 0, keys_seen, keys.data());
        for (int i = 0; i < chunk.queries; ++i) {
            int const slot = chunk.first_position + i;
            int const first_key = sliding_window > 0 ? std::max(0, slot - sliding_window + 1) : 0;
            for (int g = 0; g < group_size; ++g) {
                float const* q = chunk.q + static_cast<std::size_t>(i) * chunk.q_stride +
                                 static_cast<std::size_t>(kv_head * group_size + g) * head_dim;
                float maximum = kernels::negative_infinity;
                for (int j = first_key; j <= slot; ++j) {
                    logits[j] = kernels::dot<head_dim>(
                                    q, keys.data() + static_cast<std::size_t>(j) * head_dim) *
                                Attention::score_scale;
                    maximum = std::max(maximum, logits[j]);
                }
                // The normaliser in double: it sums up to max_context terms.
                double sum = 0;
                for (int j = first_key; j <= slot; ++j) sum += std::exp2(logits[j] - maximum);
                for (int j = first_key; j <= slot; ++j) {
                    scores[static_cast<std::size_t>(j)] +=
                        static_cast<float>(std::exp2(logits[j] - maximum) / sum);
                }
            }
        }
    }
}

}  // namespace tinfer::model
