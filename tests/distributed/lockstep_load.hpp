#pragma once
// The load the lockstep tests (tensor parallelism: mpi_engine_tp_test.cpp, pipeline
// parallelism: mpi_pipeline_test.cpp) run through one process's Engine and through the ranks',
// and the loop that serves it; what each streamed is compared token by token.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/engine/request.hpp>

namespace tinfer::testing::mpi {

struct Stream {
    std::vector<std::int32_t> tokens;
    std::vector<float> margins;  // top-2 log-probability gap at each token (when requested)
    FinishReason finish = FinishReason::aborted;
};

struct LoadOptions {
    int vocab = 64;
    bool speculate = false;  // every third request drafts 3 tokens over a repeated motif
    int top_logprobs = 0;    // 2: Stream::margins gets each token's top-2 gap
};

// Requests 0 and 1 share 48 prompt tokens (3 blocks of 16) and 1 runs after 0 has finished: a
// prefix-cache hit. Prompts of 30-69 tokens and 12-31 new tokens, four at a time, outgrow a
// 10-block cache: the scheduler preempts. Odd requests sample (seeded), even ones are greedy.
inline std::vector<GenerationRequest> lockstep_load(std::uint64_t seed, LoadOptions options = {}) {
    std::mt19937_64 rng(seed);
    auto const token = [&] { return static_cast<std::int32_t>(rng() % options.vocab); };
    std::vector<GenerationRequest> out;
    std::vector<std::int32_t> shared_prefix;
    for (int i = 0; i < 48; ++i) shared_prefix.push_back(token());
    for (int i = 0; i < 8; ++i) {
        GenerationRequest r{.max_tokens = 12 + static_cast<int>(rng() % 20), .ignore_eos = true};
        int const length = 30 + static_cast<int>(rng() % 40);
        if (i < 2) r.prompt_tokens = shared_prefix;
        bool const drafts = options.speculate && i % 3 == 2;
        std::vector<std::int32_t> motif;
        if (options.speculate)
            for (int t = 0; t < 5; ++t) motif.push_back(token());
        for (int t = static_cast<int>(r.prompt_tokens.size()); t < length; ++t)
            r.prompt_tokens.push_back(drafts ? motif[static_cast<std::size_t>(t) % 5] : token());
        if (i < 2) r.prompt_tokens.push_back(token());
        if (drafts) r.draft_tokens = 3;
        if (i % 2 == 1) {
            r.sampling.temperature = 0.9f;
            r.sampling.top_k = 20;
            r.sampling.seed = seed + static_cast<std::uint64_t>(i);
        } else {
            r.sampling.temperature = 0;
        }
        r.sampling.top_logprobs = options.top_logprobs;
        out.push_back(std::move(r));
    }
    return out;
}

// Serves request 0 alone (its blocks stay in the prefix cache), then the rest together;
// `which` names the engine in a failure. A loop that does not finish in 5000 steps throws.
template <class E>
std::vector<Stream> serve_load(E& engine, std::vector<GenerationRequest> const& requests,
                               std::string const& which) try {
    std::vector<Stream> streams(requests.size());
    auto const submit = [&](std::size_t i) {
        Stream& out = streams[i];
        engine.submit(requests[i], [&out](TokenEvent const& e) {
            if (e.token >= 0) {
                out.tokens.push_back(e.token);
                out.margins.push_back(e.top_logprobs.size() >= 2
                                          ? e.top_logprobs[0].logprob - e.top_logprobs[1].logprob
                                          : INFINITY);
            }
            if (e.finish) out.finish = *e.finish;
        });
    };
    constexpr int step_limit = 5000;  // far more than the load needs: a stuck loop fails
    int steps = 0;
    auto const run = [&] {
        while (engine.step())
            if (++steps >= step_limit)
                throw Error("the engine did not finish its requests in 5000 steps");
    };
    submit(0);
    run();
    for (std::size_t i = 1; i < requests.size(); ++i) submit(i);
    run();
    return streams;
} catch (std::exception const& e) {
    throw Error(which + ": " + e.what());
}

}  // namespace tinfer::testing::mpi
