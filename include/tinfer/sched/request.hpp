#pragma once
// What the scheduler knows about a request: lengths and counters, never tokens or tensors.
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

namespace tinfer::sched {

// Distinct enum types, so a request id is never passed where a tenant or a count is expected.
enum class RequestId : std::uint64_t {};
enum class TenantId : std::uint32_t {};

inline std::string to_string(RequestId id) {
    return "request " + std::to_string(static_cast<std::uint64_t>(id));
}
inline std::ostream& operator<<(std::ostream& out, RequestId id) {
    return out << to_string(id);
}
inline std::ostream& operator<<(std::ostream& out, TenantId tenant) {
    return out << "tenant " << static_cast<std::uint32_t>(tenant);
}

// waiting: queued, holds no KV (new, or preempted by recompute).
// running: holds KV blocks on the device and is scheduled every step it can be.
// swapped: preempted by swap, its KV lives in the host pool until it is swapped back in.
// finished / aborted: ended; the scheduler forgets it right after reporting the end.
enum class RequestState { waiting, running, swapped, finished, aborted };

constexpr char const* name_of(RequestState state) {
    switch (state) {
        case RequestState::waiting:
            return "waiting";
        case RequestState::running:
            return "running";
        case RequestState::swapped:
            return "swapped";
        case RequestState::finished:
            return "finished";
        case RequestState::aborted:
            return "aborted";
    }
    return "unknown";
}
inline std::ostream& operator<<(std::ostream& out, RequestState state) {
    return out << name_of(state);
}

// What a caller hands to Scheduler::add.
struct NewRequest {
    RequestId id{};
    int prompt_length = 0;
    int max_new_tokens = 0;
    int priority = 0;  // lower runs first under the Priority order
    TenantId tenant{};
    // Sequences it runs as once its prompt is computed: n for a request of n choices, whose
    // other n - 1 fork its KV then (Scheduler::add_forked). It is admitted only where all n
    // fit under max_seqs, so the choices joining it never push the running set past it.
    int seats = 1;
};

// The scheduler's record of one live request. Queue orders and preemption policies read it.
struct Request {
    RequestId id{};
    int prompt_length = 0;
    int max_new_tokens = 0;
    int priority = 0;
    TenantId tenant{};
    std::uint64_t arrival = 0;  // position in the order add() was called: unique, increasing
    int computed = 0;           // leading context positions whose KV has been computed
    int generated = 0;          // tokens sampled so far
    int preemptions = 0;
    // Of max_seqs: 1, plus the choices still to fork from it (NewRequest::seats).
    int seats = 1;
    RequestState state = RequestState::waiting;
    // The static batch it was admitted into; empty until admitted, and under batching policies
    // that let requests join a running batch.
    std::optional<std::uint64_t> batch = std::nullopt;

    // The prompt plus every sampled token: what a recompute re-prefills.
    constexpr int context_length() const { return prompt_length + generated; }
    // Context positions still to be computed before the next token can be sampled.
    constexpr int pending_tokens() const { return context_length() - computed; }
    // Only the last sampled token is missing from the cache: one decode step samples the next.
    constexpr bool is_decoding() const { return generated > 0 && pending_tokens() == 1; }
};

}  // namespace tinfer::sched
