#pragma once
// Batching policies: how many sequences and tokens one step may carry, and whether a request
// may join a batch that is already running.
#include <concepts>
#include <limits>
#include <string>

#include <tinfer/core/error.hpp>

namespace tinfer::sched {

// max_seqs: running sequences at most. max_batched_tokens: tokens one forward pass carries at
// most. joins_running_batch: false means a batch starts together and ends together.
// Every running sequence's decode token must fit one step, hence max_batched_tokens >= max_seqs.
// The kind of batching is the type; its numbers are run-time values (the template arguments
// are only their defaults), so comparing two budgets needs no second scheduler type: nothing
// the generated code needs depends on them.
template <class Policy>
concept BatchingPolicy = std::copyable<Policy> && requires(Policy const& policy) {
    { policy.max_seqs } -> std::convertible_to<int>;
    { policy.max_batched_tokens } -> std::convertible_to<int>;
    { Policy::joins_running_batch } -> std::convertible_to<bool>;
};

// tinfer::Error naming the policy and the number, for values a scheduler cannot run with.
template <BatchingPolicy Policy>
void validate_batching(Policy const& policy, char const* name) {
    if (policy.max_seqs <= 0)
        throw Error(std::string(name) + ": max_seqs must be positive, got " +
                    std::to_string(policy.max_seqs));
    if (policy.max_batched_tokens < policy.max_seqs)
        throw Error(std::string(name) + ": max_batched_tokens (" +
                    std::to_string(policy.max_batched_tokens) + ") must be at least max_seqs (" +
                    std::to_string(policy.max_seqs) +
                    "), so that every running sequence's decode token fits one step");
}

// Up to `max_seqs` requests are admitted in the step that forms a batch (as many as fit);
// no other request is admitted until every one of them has finished or been aborted.
// A preempted member stays in its batch and is the only kind of request admitted meanwhile.
template <int default_batch_size = 8, int default_max_tokens = std::numeric_limits<int>::max()>
struct StaticBatching {
    static_assert(default_batch_size > 0,
                  "StaticBatching<batch_size>: batch_size must be positive");
    static_assert(default_max_tokens >= default_batch_size,
                  "StaticBatching<batch_size, max_tokens>: max_tokens must be at least "
                  "batch_size, so that every member's decode token fits one step");
    int max_seqs = default_batch_size;
    int max_batched_tokens = default_max_tokens;
    static constexpr bool joins_running_batch = false;
};

// Iteration-level scheduling (Orca, vLLM): requests join and leave at every step.
template <int default_max_seqs = 64, int default_max_tokens = 1024>
struct ContinuousBatching {
    static_assert(default_max_seqs > 0,
                  "ContinuousBatching<max_seqs, max_batched_tokens>: max_seqs must be positive");
    static_assert(default_max_tokens >= default_max_seqs,
                  "ContinuousBatching<max_seqs, max_batched_tokens>: max_batched_tokens must be "
                  "at least max_seqs, so that every running sequence's decode token fits one "
                  "step");
    int max_seqs = default_max_seqs;
    int max_batched_tokens = default_max_tokens;
    static constexpr bool joins_running_batch = true;
};

}  // namespace tinfer::sched
