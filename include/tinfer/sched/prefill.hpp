#pragma once
// Prefill policies: how much of a request's uncomputed context one step may compute.
#include <algorithm>
#include <concepts>

namespace tinfer::sched {

// chunk_length(pending, limit): tokens to compute this step for a request with `pending`
// uncomputed context tokens, when at most `limit` fit (the step's remaining token budget and
// the KV blocks free, whichever is smaller). 0 means: not this step. Must be <= both arguments.
// The policy is a value (its chunk size a run-time number); a static chunk_length works too.
template <class Policy>
concept PrefillPolicy = std::copyable<Policy> &&
    requires(Policy const& policy, int pending, int limit) {
    { policy.chunk_length(pending, limit) } -> std::same_as<int>;
};

// The whole uncomputed context in one step, or nothing.
struct WholePrompt {
    static constexpr int chunk_length(int pending, int limit) {
        return pending <= limit ? pending : 0;
    }
};

// At most `max_chunk` tokens per request per step, cut to whatever budget is left, so that long
// prompts share steps with decodes instead of stalling them (vLLM's chunked prefill).
// The template argument is the default chunk; `max_chunk` is a run-time value.
template <int default_max_chunk = 512>
struct ChunkedPrefill {
    static_assert(default_max_chunk > 0, "ChunkedPrefill<max_chunk>: max_chunk must be positive");
    int max_chunk = default_max_chunk;
    constexpr int chunk_length(int pending, int limit) const {
        return std::max(0, std::min({pending, limit, max_chunk}));
    }
};

}  // namespace tinfer::sched
