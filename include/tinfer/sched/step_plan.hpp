#pragma once
// What one schedule() call asks the engine to do, and what the engine reports back.
#include <numeric>
#include <ostream>
#include <vector>

#include <tinfer/sched/request.hpp>

namespace tinfer::sched {

enum class PreemptionMode {
    recompute,  // drop the KV; the request re-prefills prompt + generated tokens later
    swap,       // copy the KV blocks to the host pool; they come back on swap-in
};

constexpr char const* name_of(PreemptionMode mode) {
    return mode == PreemptionMode::swap ? "swap" : "recompute";
}

inline std::ostream& operator<<(std::ostream& out, PreemptionMode mode) {
    return out << name_of(mode);
}

enum class WorkKind { prefill, decode };

constexpr char const* name_of(WorkKind kind) {
    return kind == WorkKind::decode ? "decode" : "prefill";
}
inline std::ostream& operator<<(std::ostream& out, WorkKind kind) {
    return out << name_of(kind);
}

// One sequence's share of the forward pass: positions
// [first_position, first_position + token_count) of its context.
struct ScheduledWork {
    RequestId id{};
    WorkKind kind = WorkKind::prefill;
    int first_position = 0;  // absolute position of the first token (the RoPE position)
    int token_count = 0;
    int kv_length = 0;  // cached tokens the sequence holds once these are written: reserve this
    bool samples_token = false;  // the chunk reaches the end of the context: sample its last logits
};

struct Preemption {
    RequestId id{};
    PreemptionMode mode = PreemptionMode::recompute;
};

// The engine carries a plan out in member order: free what `rejected` held; release (recompute)
// or copy to the host (swap) each of `preempted`; copy `swapped_in` back from the host; reserve
// kv_length for each of `work` and run it as one batch.
struct StepPlan {
    std::vector<RequestId> rejected;  // aborted: can never fit the KV cache, even alone
    std::vector<Preemption> preempted;
    std::vector<RequestId> swapped_in;
    std::vector<ScheduledWork> work;  // decodes first, then prefill chunks

    int token_count() const {
        return std::accumulate(work.begin(), work.end(), 0,
                               [](int sum, ScheduledWork const& w) { return sum + w.token_count; });
    }
    bool empty() const {
        return rejected.empty() && preempted.empty() && swapped_in.empty() && work.empty();
    }
};

// The engine's report for one work item that sampled (samples_token): how many tokens it
// appended (1, more under speculative decoding) and whether a stop condition ended the request.
// Reaching max_new_tokens ends it without being told.
struct StepOutcome {
    RequestId id{};
    int tokens_generated = 1;
    bool finished = false;
};

}  // namespace tinfer::sched
