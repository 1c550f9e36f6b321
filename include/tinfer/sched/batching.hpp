#pragma once
// Batching policies: how many sequences and tokens one step may carry, and whether a request
// may join a batch that is already running.
#include <concepts>
#include <limits>

namespace tinfer::sched {

// max_seqs: running sequences at most. max_batched_tokens: tokens one forward pass carries at
// most. joins_running_batch: false means a batch starts together and ends together.
// Every running sequence's decode token must fit one step, hence max_batched_tokens >= max_seqs.
template <class Policy>
concept BatchingPolicy = requires {
    { Policy::max_seqs } -> std::convertible_to<int>;
    { Policy::max_batched_tokens } -> std::convertible_to<int>;
    { Policy::joins_running_batch } -> std::convertible_to<bool>;
}
&&(Policy::max_seqs > 0) && (Policy::max_batched_tokens >= Policy::max_seqs);

// Up to `batch_size` requests are admitted in the step that forms a batch (as many as fit);
// no other request is admitted until every one of them has finished or been aborted.
// A preempted member stays in its batch and is the only kind of request admitted meanwhile.
template <int batch_size, int max_tokens = std::numeric_limits<int>::max()>
struct StaticBatching {
    static_assert(batch_size > 0, "StaticBatching<batch_size>: batch_size must be positive");
    static_assert(max_tokens >= batch_size,
                  "StaticBatching<batch_size, max_tokens>: max_tokens must be at least "
                  "batch_size, so that every member's decode token fits one step");
    static constexpr int max_seqs = batch_size;
    static constexpr int max_batched_tokens = max_tokens;
    static constexpr bool joins_running_batch = false;
};

// Iteration-level scheduling (Orca, vLLM): requests join and leave at every step.
template <int max_sequences, int max_tokens>
struct ContinuousBatching {
    static_assert(max_sequences > 0,
                  "ContinuousBatching<max_seqs, max_batched_tokens>: max_seqs must be positive");
    static_assert(max_tokens >= max_sequences,
                  "ContinuousBatching<max_seqs, max_batched_tokens>: max_batched_tokens must be "
                  "at least max_seqs, so that every running sequence's decode token fits one "
                  "step");
    static constexpr int max_seqs = max_sequences;
    static constexpr int max_batched_tokens = max_tokens;
    static constexpr bool joins_running_batch = true;
};

}  // namespace tinfer::sched
