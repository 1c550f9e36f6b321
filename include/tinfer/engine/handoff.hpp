#pragma once
// Prefill/decode disaggregation inside the engine: the same Engine serves either role, the
// difference is one hook. An engine given HandoffHooks (the prefill role) runs a request's
// prefill and samples its first token as always (its callback streams it), then exports the
// request's KV blocks and hands them, the first token and the callback to `hand_off` instead of
// decoding, and forgets the request. An engine given such a hand-off through Engine::adopt()
// (the decode role) takes it in like a request swapped out to the host: the scheduler sees its
// prompt computed and one token generated, the KV lifecycle imports the blocks when the
// scheduler swaps it in, and the step runner decodes it as any other. Admission, batching,
// sampling and the stop logic are the engine's, on both sides; the transport between the two
// engines (distributed/disaggregation.hpp) is not the engine's business.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include <tinfer/engine/request.hpp>
#include <tinfer/sched/request.hpp>

namespace tinfer {

// A request whose prompt has been prefilled and whose first token has been sampled (and
// streamed) by one engine, for another engine to go on with.
struct PrefilledRequest {
    sched::RequestId id{};      // on the engine that prefilled it
    GenerationRequest request;  // as submitted; prompt_tokens holds the prompt
    std::int32_t first_token = -1;
    int tokens = 0;                 // KV positions in `blocks`: the prompt
    std::vector<std::byte> blocks;  // the cache's export_blocks() bytes
    TokenCallback callback;         // the request's callback, moved out of the prefill engine
};

struct HandoffHooks {
    // Receives every request after its first token (on the thread that calls step()); the
    // engine has already freed it. Requests that end at their first token never come here.
    std::function<void(PrefilledRequest&&)> hand_off;
    // Which requests to hand off; empty: every one. Others decode here (colocated).
    std::function<bool(GenerationRequest const&)> eligible;
    // abort() of an id this engine no longer holds (it may have been handed off), so the
    // decode side can be told; runs on the thread that calls step().
    std::function<void(sched::RequestId)> abort_elsewhere;
};

}  // namespace tinfer
