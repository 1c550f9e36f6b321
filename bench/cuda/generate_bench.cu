// End-to-end SmolLM2-135M-Instruct (Q4_1) on the device: DeviceLlama's prefill and decode tokens/s,
// with llama-bench's definitions (docs/performance.md):
//   pp512:       one 512-token prompt prefilled in one step; prompt tokens / second;
//   tg128 @ B:   B sequences, each prefilled with a 128-token prompt, then 128 greedy decode steps
//                of all B together (the device sampler at temperature 0, the chosen tokens copied
//                to the host and fed back, as a serving loop would); generated tokens (B * 128)
//                / second of the decode steps only; B = 1 and 64;
//   pp @ 64:     the 64 prompts of 128 tokens prefilled in one step (8192 tokens); tokens/second.
// Prompts are seeded random token ids (the throughput does not depend on the text). Each
// measurement is the median of `repeats` runs after one warm-up run. Lines "RESULT <name> <value>
// <unit>" are what bench/gpu_suite.sh tabulates.
//
//   cuda_generate_bench [model.gguf]   (default: $TINFER_MODEL_PATH, then the cached SmolLM2)
// Without the file (a GPU machine receives at most 64 MiB of the repository, so the real file
// never reaches it) it writes a model of SmolLM2's shape with the project's GGUF writer: seeded
// random weights, Q4_1 layer matrices as the real file's, an f32 embedding (the real file's is
// Q8_0, about 4% of the decode bytes more here). The figures measure the kernels, not the text.
// Exits 77 without a GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

// First: it includes model/weights.hpp with an nvcc warning silenced (device_llama.cuh says why).
#include <tinfer/model/cuda/device_llama.cuh>
#include <tinfer/model/cuda/step_profile.cuh>

#include <tinfer/kernels/cuda/tensor_core_gemm.cuh>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/gguf/synthetic_model.hpp>
#include <tinfer/presets/presets.hpp>

namespace {

using namespace tinfer;

constexpr ModelConfig smollm2 = presets::smollm2_135m;
using Device = tinfer::cuda::DeviceLlama<smollm2>;
using Weights = model::ModelWeights<smollm2>;

constexpr int repeats = 3;
constexpr int prefill_tokens = 512;  // pp512
constexpr int prompt_tokens = 128;   // before each tg128
constexpr int decode_steps = 128;    // tg128
constexpr int max_batch = 64;

void result(char const* name, double value, char const* unit) {
    std::printf("RESULT %s %.4g %s\n", name, value, unit);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

std::vector<std::int32_t> random_tokens(std::mt19937& rng, int count, int vocab = smollm2.vocab) {
    std::uniform_int_distribution<std::int32_t> id(0, vocab - 1);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(count));
    for (auto& t : tokens) t = id(rng);
    return tokens;
}

struct GenerateTimes {
    double prefill_seconds = 0;
    double decode_seconds = 0;
};

// `batch` prompts of prompt_tokens prefilled in one step, then `steps` greedy steps of all.
template <class Model>
GenerateTimes generate(Model& model, std::vector<std::vector<std::int32_t>> const& prompts,
                       int steps = decode_steps) {
    int const batch = static_cast<int>(prompts.size());
    std::vector<tinfer::cuda::DeviceChunk> chunks;
    for (int s = 0; s < batch; ++s) chunks.push_back({s, 0, prompts[static_cast<std::size_t>(s)]});
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(batch));
    std::vector<std::int32_t> fed(static_cast<std::size_t>(batch));
    GenerateTimes times;
    auto start = std::chrono::steady_clock::now();
    model.forward(chunks, {}, tokens);
    times.prefill_seconds = seconds_since(start);
    start = std::chrono::steady_clock::now();
    for (int step = 0; step < steps; ++step) {
        fed = tokens;
        for (int s = 0; s < batch; ++s)
            chunks[static_cast<std::size_t>(s)] = {s, prompt_tokens + step,
                                                   std::span(&fed[static_cast<std::size_t>(s)], 1)};
        model.forward(chunks, {}, tokens);
    }
    times.decode_seconds = seconds_since(start);
    for (int s = 0; s < batch; ++s) model.release(s);
    return times;
}

// pp512: one prompt of prefill_tokens in one step, the median of `repeats` after a warm-up.
template <class Model>
double pp512(Model& model, std::mt19937& rng, int vocab) {
    std::vector<std::int32_t> const long_prompt = random_tokens(rng, prefill_tokens, vocab);
    std::vector<double> prefill;
    for (int r = 0; r <= repeats; ++r) {
        tinfer::cuda::DeviceChunk const chunk{0, 0, long_prompt};
        std::int32_t token = 0;
        auto const start = std::chrono::steady_clock::now();
        model.forward(std::span(&chunk, 1), {}, std::span(&token, 1));
        if (r > 0) prefill.push_back(seconds_since(start));  // run 0 warms up
        model.release(0);
    }
    return prefill_tokens / median(prefill);
}

// pp512 with the prefill products on tensor cores (kernels::cuda::CublasBf16Gemm).
template <ModelConfig Cfg, class Model>
double pp512_on_tensor_cores(Model& model, std::mt19937& rng) {
    kernels::cuda::CublasBf16Gemm gemm(
        static_cast<std::size_t>(std::max(Cfg.vocab, Cfg.ffn)) * Cfg.hidden,
        model.options().max_step_tokens, std::max({Cfg.hidden, Cfg.ffn, Cfg.q_width()}));
    model.set_prefill_gemm(&gemm);
    double const tps = pp512(model, rng, Cfg.vocab);
    model.set_prefill_gemm(nullptr);
    return tps;
}

// The tg runs again with decode steps replayed as CUDA graphs (DeviceLlama::use_cuda_graphs):
// "<prefix>_b<B>_graphs_tps". A failure there is reported and fails the benchmark.
template <class Model>
void decode_with_cuda_graphs(Model& model, std::mt19937& rng, std::string const& prefix, int steps,
                             int vocab) {
    model.use_cuda_graphs(true);
    for (int const batch : {1, max_batch}) {
        std::vector<std::vector<std::int32_t>> prompts;
        for (int s = 0; s < batch; ++s) prompts.push_back(random_tokens(rng, prompt_tokens, vocab));
        std::vector<double> decode;
        for (int r = 0; r <= repeats; ++r) {
            GenerateTimes const t = generate(model, prompts, steps);
            if (r > 0) decode.push_back(t.decode_seconds);  // run 0 captures the graphs
        }
        double const tps = static_cast<double>(batch) * steps / median(decode);
        std::printf("%s at batch %d with CUDA graphs: %.0f tokens/s\n", prefix.c_str(), batch, tps);
        result((prefix + "_b" + std::to_string(batch) + "_graphs_tps").c_str(), tps, "tokens/s");
    }
    model.use_cuda_graphs(false);
}

void bench(gguf::File const& file) {
    Weights const weights = Weights::bind(file);
    auto model = std::make_unique<Device>(weights, tinfer::cuda::DeviceLlamaOptions{
                                                       .max_seqs = max_batch,
                                                       .max_step_tokens = max_batch * prompt_tokens,
                                                       .max_logit_rows = max_batch,
                                                       .max_context = 1024,
                                                       .kv_budget_bytes = std::size_t{2} << 30,
                                                   });
    std::printf("weights %.1f MiB on the device, KV pool %.1f MiB\n",
                static_cast<double>(model->weight_bytes()) / (1 << 20),
                static_cast<double>(model->kv_bytes()) / (1 << 20));
    std::mt19937 rng(20241130);

    // pp512, float32 kernels then tensor cores.
    double const pp = pp512(*model, rng, smollm2.vocab);
    std::printf("pp%d: %.0f tokens/s\n", prefill_tokens, pp);
    result("e2e_prefill_pp512_tps", pp, "tokens/s");
    double const pp_tc = pp512_on_tensor_cores<smollm2>(*model, rng);
    std::printf("pp%d on tensor cores (bf16): %.0f tokens/s\n", prefill_tokens, pp_tc);
    result("e2e_prefill_pp512_tc_tps", pp_tc, "tokens/s");

    for (int const batch : {1, max_batch}) {
        std::vector<std::vector<std::int32_t>> prompts;
        for (int s = 0; s < batch; ++s) prompts.push_back(random_tokens(rng, prompt_tokens));
        std::vector<double> decode, batch_prefill;
        for (int r = 0; r <= repeats; ++r) {
            GenerateTimes const t = generate(*model, prompts);
            if (r == 0) continue;  // warm-up
            decode.push_back(t.decode_seconds);
            batch_prefill.push_back(t.prefill_seconds);
        }
        double const tg = static_cast<double>(batch) * decode_steps / median(decode);
        double const step_ms = 1e3 * median(decode) / decode_steps;
        std::printf("tg%d at batch %d: %.0f tokens/s (%.3f ms per step)\n", decode_steps, batch, tg,
                    step_ms);
        std::string const name = "e2e_decode_b" + std::to_string(batch) + "_tps";
        result(name.c_str(), tg, "tokens/s");
        if (batch == max_batch) {
            double const pp_batch =
                static_cast<double>(batch) * prompt_tokens / median(batch_prefill);
            std::printf("prefill of %d x %d tokens: %.0f tokens/s\n", batch, prompt_tokens,
                        pp_batch);
            result("e2e_prefill_b64_tps", pp_batch, "tokens/s");
        }
    }
    decode_with_cuda_graphs(*model, rng, "e2e_decode", decode_steps, smollm2.vocab);
}

// Llama-3-8B's shape in Q4_0 (every matrix, the LM head included; random blocks, written with the
// GGUF writer in seconds: gguf::SyntheticModel::random_q4_0_blocks), bf16 KV: issue 15's decode
// target, batch 1 against its weight-bandwidth roofline (the bytes one step streams, every
// tensor but the embedding, over the device-to-device copy's rate measured here), with a
// per-part time breakdown of one profiled step; and batch 64.
constexpr ModelConfig llama3_8b = presets::llama3_8b;
using Device8b = tinfer::cuda::DeviceLlama<llama3_8b, 16, kv::Bf16Codec>;
using Weights8b = model::ModelWeights<llama3_8b>;
constexpr int steps_8b = 32;

double copy_bandwidth_gbs() {
    std::size_t const bytes = std::size_t{1} << 30;
    kernels::cuda::DeviceBuffer<std::byte> source(bytes), target(bytes);
    source.fill_bytes(1);
    std::vector<double> times;
    for (int r = 0; r <= repeats; ++r) {
        kernels::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        auto const start = std::chrono::steady_clock::now();
        kernels::cuda::check(
            cudaMemcpy(target.data(), source.data(), bytes, cudaMemcpyDeviceToDevice),
            "cudaMemcpy D2D");
        kernels::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        if (r > 0) times.push_back(seconds_since(start));
    }
    return 2.0 * static_cast<double>(bytes) / median(times) / 1e9;  // read + written
}

void bench_llama3_8b() {
    auto const made = std::chrono::steady_clock::now();
    std::vector<std::byte> const bytes =
        gguf::SyntheticModel::random_q4_0_blocks(llama3_8b, 20261204).bytes();
    gguf::File const file = gguf::File::from_bytes(bytes);
    Weights8b const weights = Weights8b::bind(file);
    std::printf("Llama-3-8B shape, Q4_0: %.2f GB written in %.1f s\n",
                static_cast<double>(bytes.size()) / 1e9, seconds_since(made));
    auto model =
        std::make_unique<Device8b>(weights, tinfer::cuda::DeviceLlamaOptions{
                                                .max_seqs = max_batch,
                                                .max_step_tokens = max_batch * prompt_tokens,
                                                .max_logit_rows = max_batch,
                                                .max_context = 512,
                                                .kv_budget_bytes = std::size_t{4} << 30,
                                            });
    double const streamed = static_cast<double>(model->streamed_weight_bytes());
    double const bandwidth = copy_bandwidth_gbs();
    double const roofline = bandwidth * 1e9 / streamed;  // tokens/s at batch 1
    std::printf("streams %.2f GB of weights per step; D2D copy %.0f GB/s: roofline %.0f tokens/s\n",
                streamed / 1e9, bandwidth, roofline);
    std::mt19937 rng(20261204);
    double const pp = pp512(*model, rng, llama3_8b.vocab);
    double const pp_tc = pp512_on_tensor_cores<llama3_8b>(*model, rng);
    std::printf("Llama-3-8B shape: pp%d %.0f tokens/s, on tensor cores (bf16) %.0f tokens/s\n",
                prefill_tokens, pp, pp_tc);
    result("e2e_8b_prefill_pp512_tps", pp, "tokens/s");
    result("e2e_8b_prefill_pp512_tc_tps", pp_tc, "tokens/s");
    for (int const batch : {1, max_batch}) {
        std::vector<std::vector<std::int32_t>> prompts;
        for (int s = 0; s < batch; ++s)
            prompts.push_back(random_tokens(rng, prompt_tokens, llama3_8b.vocab));
        std::vector<double> decode;
        for (int r = 0; r <= repeats; ++r) {
            GenerateTimes const t = generate(*model, prompts, steps_8b);
            if (r > 0) decode.push_back(t.decode_seconds);  // generate() releases the slots
        }
        double const tps = static_cast<double>(batch) * steps_8b / median(decode);
        std::printf("Llama-3-8B shape: %d decode steps at batch %d: %.0f tokens/s\n", steps_8b,
                    batch, tps);
        result(("e2e_8b_decode_b" + std::to_string(batch) + "_tps").c_str(), tps, "tokens/s");
        if (batch == 1) result("e2e_8b_decode_b1_of_roofline", 100.0 * tps / roofline, "%");
    }
    decode_with_cuda_graphs(*model, rng, "e2e_8b_decode", steps_8b, llama3_8b.vocab);

    // One decode step at batch 1, profiled: where its time goes.
    std::vector<std::int32_t> const prompt = random_tokens(rng, prompt_tokens, llama3_8b.vocab);
    tinfer::cuda::DeviceChunk const prefill{0, 0, prompt};
    std::int32_t token = 0;
    model->forward(std::span(&prefill, 1), {}, std::span(&token, 1));
    tinfer::cuda::StepProfile profile;
    model->set_profile(&profile);
    std::int32_t const fed = token;
    tinfer::cuda::DeviceChunk const decode{0, prompt_tokens, std::span(&fed, 1)};
    model->forward(std::span(&decode, 1), {}, std::span(&token, 1));
    model->set_profile(nullptr);
    auto const parts = profile.totals();
    double total = 0;
    for (auto const& [part, ms] : parts) total += ms;
    std::printf("BREAKDOWN Llama-3-8B shape, one decode step at batch 1: %.3f ms\n", total);
    for (auto const& [part, ms] : parts)
        std::printf("BREAKDOWN   %-30s %8.3f ms  %5.1f %%\n", part.c_str(), ms, 100 * ms / total);
    model->release(0);
}

}  // namespace

int main(int argc, char** argv) {
    // No GPU on this machine: skipped (77); a GPU CUDA cannot use: a failure (device_probe.hpp).
    int devices = 0;
    try {
        devices = kernels::cuda::device_count();
    } catch (std::exception const& error) {
        std::printf("FAILED: %s\n", error.what());
        return 1;
    }
    if (devices == 0) {
        std::printf("no CUDA device (no GPU on this machine): skipped\n");
        return 77;
    }
    std::string path = argc > 1 ? argv[1] : "";
    if (path.empty() && std::getenv("TINFER_MODEL_PATH") != nullptr)
        path = std::getenv("TINFER_MODEL_PATH");
    if (path.empty() && std::getenv("HOME") != nullptr)
        path = std::string(std::getenv("HOME")) +
               "/.cache/tinfer/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    try {
        cudaDeviceProp properties{};
        kernels::cuda::check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
        std::printf("device: %s (sm_%d%d, %d SMs)\n", properties.name, properties.major,
                    properties.minor, properties.multiProcessorCount);
        if (std::filesystem::exists(path)) {
            std::printf("model: %s\n", path.c_str());
            bench(gguf::File::open(path));
        } else {
            std::printf(
                "model: not at '%s'; SmolLM2's shape written with the GGUF writer "
                "(seeded random weights, Q4_1 layers)\n",
                path.c_str());
            std::vector<std::byte> const bytes =
                gguf::SyntheticModel(smollm2, 20261204, gguf::TensorType::q4_1).bytes();
            bench(gguf::File::from_bytes(bytes));
        }
        bench_llama3_8b();
    } catch (std::exception const& error) {
        std::printf("benchmark failed: %s\n", error.what());
        return 1;
    }
    return 0;
}
