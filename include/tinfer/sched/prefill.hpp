#pragma once
// Prefill policies: how much of a request's uncomputed context one step may compute.
#include <algorithm>
#include <concepts>

namespace tinfer::sched {

// chunk_length(pending, limit): tokens to compute this step for a request with `pending`
// uncomputed context tokens, when at most `limit` fit (the step's remaining token budget and
// the KV blocks free, whichever is smaller). 0 means: not this step. Must be <= both arguments.
template <class Policy>
concept PrefillPolicy = requires(int pending, int limit) {
    { Policy::chunk_length(pending, limit) } -> std::same_as<int>;
};

// The whole uncomputed context in one step, or nothing.
struct WholePrompt {
    static constexpr int chunk_length(int pending, int limit) {
        return pending <= limit ? pending : 0;
    }
};

// At most `max_chunk` tokens per request per step, cut to whatever budget is left, so that long
// prompts share steps with decodes instead of stalling them (vLLM's chunked prefill).
template <int max_chunk>
struct ChunkedPrefill {
    static_assert(max_chunk > 0, "ChunkedPrefill<max_chunk>: max_chunk must be positive");
    static constexpr int chunk_length(int pending, int limit) {
        return std::max(0, std::min({pending, limit, max_chunk}));
    }
};

}  // namespace tinfer::sched
