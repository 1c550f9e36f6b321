// The Engine on the CUDA backend (Engine<Llama<Cfg>, Scheduler, Cuda>) against the same Engine
// on the host, on seeded random models written with the project's GGUF writer (so the test runs
// on a GPU machine that cannot receive the real files), two shapes: Llama's parts with Q4_0
// layer matrices, and every other part the device layer composes (engine_shapes.hpp) in f32.
//
// One batch of requests exercises what the host cache's tables drive on the device blocks:
// continuous batching (more requests than seats), a prompt that extends another (a prefix-cache
// hit: the device reads blocks another request wrote), n = 2 (a fork: copy-on-write of the
// shared last block), and a KV budget small enough that the scheduler swaps requests out to the
// host pool and back (export and import of device blocks). Expectations:
//  - every choice's greedy tokens equal the host engine's up to the first step whose host top-2
//    logit margin is within the two backends' possible disagreement (then the rest is not
//    compared);
//  - the swapping device engine gives the same tokens as a device engine with room for all
//    (up to the same near-ties): the blocks come back as they left;
//  - the device cache ends with every block free, as the host's does;
//  - under token eviction (attention sinks + a recent window) the device engine's tokens equal
//    the host engine's up to near-ties: the cache compacts device bytes, RoPE keeps positions;
//  - what the CUDA backend cannot do is refused with an error, not run wrongly: int8
//    activations (tinfer::Error at construction).
// Exits 77 (skipped) without a GPU, fails where the machine shows one CUDA cannot use.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <tinfer/engine/cuda_backend.hpp>
#include <tinfer/engine/engine.hpp>
#include <tinfer/gguf/synthetic_model.hpp>
#include <tinfer/kernels/cuda/device_probe.hpp>
#include <tinfer/kv/contiguous_cache.hpp>
#include <tinfer/model/llama.hpp>

#include <cuda_runtime.h>

#include "engine_shapes.hpp"

namespace {

using namespace tinfer;
using namespace tinfer::cuda_testing;

int failures = 0, checks = 0;
void expect(bool ok, std::string const& what) {
    ++checks;
    if (!ok) {
        ++failures;
        std::printf("FAILED: %s\n", what.c_str());
    }
}

// Logit tolerance, as a fraction of the largest |logit| the host sees on the prompts. Both
// backends run float32 on the same decoded weights in different summation orders: each dot
// product of n terms (n <= 256 here) errs by ~sqrt(n) * 2^-24 ~ 1e-6 of its magnitude in
// practice (n * 2^-24 ~ 1.5e-5 at worst), through ~8 reductions per layer, 2 layers: well inside
// 1e-3 of the logit scale each. Two tokens can swap only where the host's top-2 margin is below
// the sum of both errors: 2e-3 of the scale.
constexpr double logit_rtol = 1e-3;

struct Choice {
    std::vector<std::int32_t> tokens;
    std::vector<float> margins;  // host only: top-1 minus top-2 logprob (= logit) at each token
    std::string error;
};
using Results = std::map<std::pair<std::uint64_t, int>, Choice>;  // (request index, choice)

std::vector<std::int32_t> random_prompt(std::mt19937_64& rng, int length, int vocab) {
    std::uniform_int_distribution<std::int32_t> token(0, vocab - 1);
    std::vector<std::int32_t> prompt(static_cast<std::size_t>(length));
    for (auto& t : prompt) t = token(rng);
    return prompt;
}

std::vector<GenerationRequest> requests_for(int vocab) {
    std::mt19937_64 rng(20261204);
    std::vector<GenerationRequest> requests;
    auto const add = [&](std::vector<std::int32_t> prompt, int max_tokens, int n) {
        GenerationRequest r;
        r.prompt_tokens = std::move(prompt);
        r.max_tokens = max_tokens;
        r.ignore_eos = true;
        r.n = n;
        r.sampling.temperature = 0;
        r.sampling.top_logprobs = 2;
        requests.push_back(std::move(r));
    };
    std::vector<std::int32_t> const shared = random_prompt(rng, 40, vocab);
    add(shared, 24, 1);
    std::vector<std::int32_t> extended = shared;  // a prefix-cache hit on the first's blocks
    for (std::int32_t t : random_prompt(rng, 9, vocab)) extended.push_back(t);
    add(extended, 24, 1);
    add(random_prompt(rng, 23, vocab), 24, 2);  // a fork: the last prompt block is shared
    for (int length : {1, 7, 16, 33, 70, 130}) add(random_prompt(rng, length, vocab), 20, 1);
    return requests;
}

template <class Engine>
Results serve(Engine& engine, std::vector<GenerationRequest> const& requests) {
    Results results;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        engine.submit(requests[i], [&results, i](TokenEvent const& e) {
            Choice& c = results[{i, e.choice}];
            if (e.token >= 0) {
                c.tokens.push_back(e.token);
                c.margins.push_back(e.top_logprobs.size() >= 2
                                        ? e.top_logprobs[0].logprob - e.top_logprobs[1].logprob
                                        : 0.0f);
            }
            if (!e.error.empty()) c.error = e.error;
        });
    }
    engine.run_until_idle();
    return results;
}

// The largest |logit| of the host model over every position of the prompts.
template <ModelConfig Cfg>
double logit_scale(gguf::File const& file, std::vector<GenerationRequest> const& requests) {
    using Model = model::Llama<Cfg>;
    Model const model = Model::bind(file);
    double scale = 0;
    for (GenerationRequest const& r : requests) {
        int const n = static_cast<int>(r.prompt_tokens.size());
        kv::ContiguousKvCache<Cfg> cache(1, n);
        typename Model::Workspace ws(n, 1);
        std::vector<float> logits(static_cast<std::size_t>(n) * Cfg.vocab);
        SequenceChunk const chunk{0, 0, r.prompt_tokens, true};
        model.forward(std::span(&chunk, 1), cache, ws, logits);
        for (float x : logits) scale = std::max(scale, static_cast<double>(std::abs(x)));
    }
    return scale;
}

// `got` against `want` token by token up to the first step where want's host margin is within
// `tie`: there either token may win.
void compare(Results const& want, Results const& got, Results const& host, double tie,
             std::string const& what) {
    expect(got.size() == want.size(), what + ": the same choices finish");
    for (auto const& [key, w] : want) {
        std::string const name = what + " request " + std::to_string(key.first) + " choice " +
                                 std::to_string(key.second);
        auto const it = got.find(key);
        if (it == got.end()) {
            expect(false, name + ": missing");
            continue;
        }
        Choice const& g = it->second;
        expect(g.error.empty() && w.error.empty(), name + ": no error (" + g.error + w.error + ")");
        std::vector<float> const& margins = host.at(key).margins;
        std::size_t compared = 0;
        bool tied = false;
        for (std::size_t i = 0; i < std::min(w.tokens.size(), g.tokens.size()); ++i) {
            if (i < margins.size() && margins[i] <= tie) {
                tied = true;
                break;
            }
            ++compared;
            if (w.tokens[i] != g.tokens[i]) {
                expect(false, name + ": token " + std::to_string(i) + " is " +
                                  std::to_string(g.tokens[i]) + ", want " +
                                  std::to_string(w.tokens[i]) + " (host margin " +
                                  std::to_string(margins[i]) + ", tie below " +
                                  std::to_string(tie) + ")");
                break;
            }
        }
        if (!tied) expect(w.tokens.size() == g.tokens.size(), name + ": as many tokens");
        std::printf("%s: %zu tokens compared%s\n", name.c_str(), compared,
                    tied ? " (then a near-tie)" : "");
    }
}

template <ModelConfig Cfg>
void run_shape(char const* name, gguf::TensorType layer_matrices) {
    using HostEngine = Engine<model::Llama<Cfg>, EngineScheduler, Host, EngineKv>;
    using DeviceEngine = Engine<model::Llama<Cfg>, EngineScheduler, Cuda, EngineKv>;
    std::vector<std::byte> const bytes =
        gguf::SyntheticModel(Cfg, 20261204, layer_matrices).with_tokenizer().bytes();
    std::vector<GenerationRequest> const requests = requests_for(Cfg.vocab);
    double const tie = 2 * logit_rtol * logit_scale<Cfg>(gguf::File::from_bytes(bytes), requests);

    EngineOptions roomy;
    roomy.kv_budget_bytes = std::size_t{32} << 20;
    roomy.threads = 2;
    HostEngine host(gguf::File::from_bytes(bytes), roomy);
    Results const on_host = serve(host, requests);
    DeviceEngine device(gguf::File::from_bytes(bytes), roomy);
    Results const on_device = serve(device, requests);
    compare(on_host, on_device, on_host, tie, std::string(name) + " device vs host");
    expect(device.cache().live_sequences() == 0 && host.cache().live_sequences() == 0,
           std::string(name) + ": no sequence left on either cache");
    expect(device.cache().used_blocks() == host.cache().used_blocks(),
           std::string(name) + ": the prefix caches keep as many blocks (" +
               std::to_string(device.cache().used_blocks()) + " on the device, " +
               std::to_string(host.cache().used_blocks()) + " on the host)");

    // Room for about two requests at a time: the rest wait or are swapped out and back.
    EngineOptions tight = roomy;
    tight.kv_budget_bytes = 16 * DeviceEngine::Cache::bytes_per_block;
    DeviceEngine swapping(gguf::File::from_bytes(bytes), tight);
    Results const swapped = serve(swapping, requests);
    compare(on_device, swapped, on_host, tie, std::string(name) + " swapping device vs device");
    std::printf("%s: host-margin tie threshold %.3g\n", name, tie);

    using HostEvicting = Engine<model::Llama<Cfg>, EvictingScheduler, Host, EngineKv>;
    using DeviceEvicting = Engine<model::Llama<Cfg>, EvictingScheduler, Cuda, EngineKv>;
    HostEvicting host_evicting(gguf::File::from_bytes(bytes), roomy);
    Results const evicted_on_host = serve(host_evicting, requests);
    DeviceEvicting device_evicting(gguf::File::from_bytes(bytes), roomy);
    Results const evicted_on_device = serve(device_evicting, requests);
    compare(evicted_on_host, evicted_on_device, evicted_on_host, tie,
            std::string(name) + " evicting device vs evicting host");

    EngineOptions int8 = roomy;
    int8.int8_activations = true;
    bool refused = false;
    try {
        DeviceEngine refusing(gguf::File::from_bytes(bytes), int8);
    } catch (Error const& e) {
        refused = std::string(e.what()).find("int8") != std::string::npos;
    }
    expect(refused, std::string(name) + ": int8 activations refused on the CUDA backend");
}

}  // namespace

int main() {
    int devices = 0;
    cudaError_t const status = cudaGetDeviceCount(&devices);
    bool const shows_gpu = kernels::cuda::machine_shows_gpu();
    if (status != cudaSuccess || devices == 0) {
        if (shows_gpu) {
            std::printf("FAILED: the machine shows a GPU, CUDA reports %s (%d devices)\n",
                        cudaGetErrorString(status), devices);
            return 1;
        }
        std::printf("no CUDA device: skipped\n");
        return 77;
    }
    try {
        run_shape<engine_llama>("llama Q4_0", gguf::TensorType::q4_0);
        run_shape<engine_parts>("gemma3 parts f32", gguf::TensorType::f32);
    } catch (std::exception const& e) {
        std::printf("FAILED: %s\n", e.what());
        return 1;
    }
    std::printf("%d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
