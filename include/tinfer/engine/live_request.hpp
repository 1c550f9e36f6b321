#pragma once
// A request the engine holds, from intake to its end: what every part of the engine reads
// (request intake fills it, the KV lifecycle keeps its `kv`, the step runner and the
// speculative round stream its tokens).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include <tinfer/engine/output_stream.hpp>
#include <tinfer/engine/request.hpp>
#include <tinfer/sched/metrics.hpp>

namespace tinfer {

// What a request holds of the KV cache.
struct SequenceKv {
    int seq = -1;                    // its sequence in the KV cache while it holds one
    int evicted = 0;                 // tokens dropped by eviction: slot = position - this
    std::vector<float> scores;       // accumulated attention per cache slot (H2O)
    std::vector<std::byte> swapped;  // its KV blocks while swapped to the host
    int swapped_tokens = 0;
};

struct LiveRequest {
    GenerationRequest request;  // its sampling.seed is this choice's own
    sched::RequestId group{};   // the id submit() returned (choice 0's): events carry it
    int choice = 0;
    // Choice 0 of a request with n > 1, until its prompt's pass: the other choices, which wait
    // (holding no KV, unknown to the scheduler) to sample from its logits and fork its KV.
    std::vector<sched::RequestId> followers;
    bool awaiting_fork = false;  // one of those waiting choices
    std::vector<std::int32_t> prompt;
    TokenCallback callback;
    OutputStream output;
    std::vector<std::int32_t> context;  // prompt, then every sampled token
    SequenceKv kv;
    spec::SpeculationStats speculation;
    // The grammar's state after the tokens generated so far (request.grammar set; made at the
    // first sample). It lives here, not in the KV: a preemption by recompute or swap re-feeds
    // or restores the context without resampling, so the matcher's state stays right.
    std::optional<grammar::Matcher> matcher;

    int max_context() const { return static_cast<int>(prompt.size()) + request.max_tokens; }
};

// Appends a sampled token to the request's context, streams its text and returns the event
// (the caller hands it over with deliver(), possibly after more bookkeeping).
inline TokenEvent accept_token(sched::RequestId id, LiveRequest& r, std::int32_t token) {
    OutputStream::Step emitted = r.output.accept(token);
    r.context.push_back(token);
    return {.id = id, .token = token, .text = std::move(emitted.text), .finish = emitted.finish};
}

inline void deliver(LiveRequest& r, TokenEvent& event, sched::MetricsRecorder& metrics) {
    if (event.finish) event.speculation = r.speculation;
    metrics.on_token(event.id);
    event.id = r.group;
    event.choice = r.choice;
    if (r.callback) r.callback(event);
}

}  // namespace tinfer
