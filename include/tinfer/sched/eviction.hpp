#pragma once
// KV token eviction policies. They decide which cached tokens of a sequence to keep; the engine
// applies the decision to the cache after every step, to each sequence holding more than
// max_kept() tokens. Indices are cache slots in position order (slot i is the i-th token still
// cached), so a policy never needs to know what an earlier eviction dropped.
#include <algorithm>
#include <cmath>
#include <concepts>
#include <limits>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace tinfer::sched {

// max_kept(): a sequence holds at most this many tokens between steps.
// needs_attention_scores: select_kept reads per-slot accumulated attention scores.
// select_kept(length, scores): the slots to keep, ascending, out of `length` cached ones.
template <class Policy>
concept EvictionPolicy = requires(int length, std::span<float const> scores) {
    { Policy::max_kept() } -> std::same_as<int>;
    { Policy::needs_attention_scores } -> std::convertible_to<bool>;
    { Policy::select_kept(length, scores) } -> std::same_as<std::vector<int>>;
};

namespace eviction_detail {

inline std::vector<int> slot_range(int first, int last) {
    std::vector<int> slots(static_cast<std::size_t>(std::max(0, last - first)));
    std::iota(slots.begin(), slots.end(), first);
    return slots;
}

}  // namespace eviction_detail

struct NoEviction {
    static constexpr bool needs_attention_scores = false;
    static constexpr int max_kept() { return std::numeric_limits<int>::max(); }
    static std::vector<int> select_kept(int length, std::span<float const> = {}) {
        return eviction_detail::slot_range(0, length);
    }
};

// The last `window` tokens.
template <int window>
struct SlidingWindow {
    static_assert(window > 0, "SlidingWindow<window>: window must be positive");
    static constexpr bool needs_attention_scores = false;
    static constexpr int max_kept() { return window; }
    static std::vector<int> select_kept(int length, std::span<float const> = {}) {
        return eviction_detail::slot_range(std::max(0, length - window), length);
    }
};

// StreamingLLM (Xiao et al. 2023): the first `sinks` tokens, which soak up attention mass
// whatever they say, plus the last `window` tokens.
template <int sinks, int window>
struct AttentionSinks {
    static_assert(sinks > 0, "AttentionSinks<sinks, window>: sinks must be positive");
    static_assert(window > 0, "AttentionSinks<sinks, window>: window must be positive");
    static constexpr bool needs_attention_scores = false;
    static constexpr int max_kept() { return sinks + window; }
    static std::vector<int> select_kept(int length, std::span<float const> = {}) {
        if (length <= max_kept()) return eviction_detail::slot_range(0, length);
        std::vector<int> kept = eviction_detail::slot_range(0, sinks);
        std::vector<int> const recent = eviction_detail::slot_range(length - window, length);
        kept.insert(kept.end(), recent.begin(), recent.end());
        return kept;
    }
};

// H2O (Zhang et al. 2023): the `heavy` older tokens with the largest accumulated attention
// scores, plus the last `recent` tokens. Among equal scores the earlier slot is kept, so the
// choice is deterministic.
template <int heavy, int recent>
struct HeavyHitters {
    static_assert(heavy > 0, "HeavyHitters<heavy, recent>: heavy must be positive");
    static_assert(recent > 0, "HeavyHitters<heavy, recent>: recent must be positive");
    static constexpr bool needs_attention_scores = true;
    static constexpr int max_kept() { return heavy + recent; }
    static std::vector<int> select_kept(int length, std::span<float const> scores) {
        if (length <= max_kept()) return eviction_detail::slot_range(0, length);
        if (scores.size() != static_cast<std::size_t>(length))
            throw std::invalid_argument(
                "HeavyHitters::select_kept: " + std::to_string(scores.size()) + " scores for " +
                std::to_string(length) + " cached tokens");
        int const older = length - recent;
        std::vector<int> kept = eviction_detail::slot_range(0, older);
        // A NaN score ranks lowest: it must not break the strict weak order partial_sort needs.
        auto const score = [&](int slot) {
            float const s = scores[slot];
            return std::isnan(s) ? -std::numeric_limits<float>::infinity() : s;
        };
        std::partial_sort(kept.begin(), kept.begin() + heavy, kept.end(), [&](int a, int b) {
            if (score(a) != score(b)) return score(a) > score(b);
            return a < b;
        });
        kept.resize(heavy);
        std::sort(kept.begin(), kept.end());
        std::vector<int> const tail = eviction_detail::slot_range(older, length);
        kept.insert(kept.end(), tail.begin(), tail.end());
        return kept;
    }
};

}  // namespace tinfer::sched
