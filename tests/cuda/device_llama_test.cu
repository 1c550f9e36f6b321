// DeviceLlama on the real model (SmolLM2-135M-Instruct Q4_1) against the host Llama run in the
// same program and against the float64 reference logits (tests/data/reference/golden_logits.bin):
//  - every prefill position's logits within the golden test's tolerance of the float64
//    reference, and within twice that of the host's;
//  - 32 greedy tokens from the device (its sampler at temperature 0) equal to the host's up to
//    the first host step whose top-2 margin is within the two models' possible disagreement;
//  - the four prompts prefilled in one step and decoded in one batch give each prompt bitwise the
//    logits, so the tokens, of its run alone (both runs take the same kernels: see run_alone).
// Without the model file (TINFER_MODEL_PATH) it runs on a generated model of SmolLM2's shape, all
// but the golden comparison. Exits 77 without a GPU only.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

// First: it includes model/weights.hpp with an nvcc warning silenced (device_llama.cuh says why).
#include <tinfer/model/cuda/device_llama.cuh>

#include <tinfer/kernels/cuda/tensor_core_gemm.cuh>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/gguf/synthetic_model.hpp>
#include <tinfer/model/weights.hpp>
#include <tinfer/presets/presets.hpp>

#include "../reference/golden_logits.hpp"
#include "cuda_testing.cuh"
#include "host_llama_runs.hpp"

namespace {

using namespace tinfer;
using namespace tinfer::cuda_testing;

constexpr ModelConfig smollm2 = presets::smollm2_135m;
using Device = tinfer::cuda::DeviceLlama<smollm2>;
using Weights = model::ModelWeights<smollm2>;
constexpr int vocab = smollm2.vocab;
constexpr int steps = 32;

// Logit tolerances, as a fraction of the position's largest |logit|.
//
// Against the float64 reference: the golden test's 1e-3 (tests/model/golden_test.cpp). The
// device does the host's float32 arithmetic on the same decoded weights; only the order of the
// sums differs. Each dot product of length n (576 for the projections and the LM head, 1536 for
// FFN down, up to ~450 context positions in attention) carries a rounding error of at most
// n * eps relative to sum |w x| in the worst case and ~sqrt(n) * eps (~2.4e-6 at n = 1536) in
// practice, where eps = 2^-24 for float32 (the host's error measured against float64 is the same
// kind of error). Through ~7 such reductions in each of 30 layers the random-walk growth is
// ~sqrt(210) * 2.4e-6 ~ 3.5e-5 of the logit scale: both backends sit well inside 1e-3 of the
// float64 values, so each is held to 1e-3 of the reference...
constexpr double reference_rtol = 1e-3;
// ...and to each other by the triangle inequality: |device - host| <= |device - ref| +
// |ref - host| <= 2e-3 of the largest |logit|.
constexpr double host_rtol = 2 * reference_rtol;

std::span<float const> row(std::vector<float> const& logits, std::size_t r) {
    return {logits.data() + r * vocab, static_cast<std::size_t>(vocab)};
}

std::int32_t argmax(std::span<float const> logits) {
    return static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) -
                                     logits.begin());
}

float max_abs(std::span<float const> logits) {
    float m = 0;
    for (float x : logits) m = std::max(m, std::abs(x));
    return m;
}

// max over the stored ids of |ours - reference| / (rtol * max |reference logit|).
double reference_error(std::span<float const> ours, testing::GoldenPosition const& ref) {
    double worst = 0;
    for (auto const& [id, value] : ref.logits) {
        double const got = ours[static_cast<std::size_t>(id)];
        if (std::isnan(got)) return INFINITY;
        worst = std::max(worst, std::abs(got - value) / (reference_rtol * ref.max_abs_logit));
    }
    return worst;
}

// The device's run of one prompt alone.
struct DeviceRun {
    std::vector<std::int32_t> greedy;        // [steps]
    std::vector<std::vector<float>> decode;  // [steps - 1][vocab]: logits behind greedy[1..]
    std::vector<float> last_prefill;         // [vocab]: logits behind greedy[0]
};

std::vector<float> poisoned(std::size_t n) {
    return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// real_model: the golden file's logits are of the real SmolLM2; on the generated stand-in only
// the host comparison applies.
DeviceRun run_alone(Checker& checker, Device& model, testing::GoldenPrompt const& prompt,
                    HostLlamaRun const& host, bool real_model) {
    int const n = static_cast<int>(prompt.prompt.size());
    DeviceRun run;
    std::vector<float> logits = poisoned(static_cast<std::size_t>(n) * vocab);
    tinfer::cuda::DeviceChunk const prefill{0, 0, prompt.prompt, true};
    model.forward(std::span(&prefill, 1), logits);

    double worst_reference = 0, worst_host = 0;
    for (int i = 0; i < n; ++i) {
        worst_reference =
            std::max(worst_reference, reference_error(row(logits, i), prompt.prefill[i]));
        std::span<float const> const host_row = row(host.prefill_logits, i);
        worst_host = std::max(worst_host, max_scaled_error(row(logits, i), host_row,
                                                           host_rtol * max_abs(host_row), 0.0));
    }
    if (real_model)
        checker.expect_within(worst_reference, prompt.name +
                                                   ": prefill logits vs float64 reference (" +
                                                   std::to_string(n) + " positions)");
    checker.expect_within(worst_host, prompt.name + ": prefill logits vs host Llama");

    // The prompt again from position 0 (a rewind: its K and V are rewritten with the same
    // values), asking for the last row only, as a batch's prefill does: with at most 8 logit rows
    // the LM head takes the weight-streaming kernel, with all `n` rows above it the GEMM, whose
    // sums run in another order. Both must agree within the reference tolerance.
    std::vector<float> step_logits = poisoned(vocab);
    std::int32_t first = -1;
    tinfer::cuda::DeviceChunk const again{0, 0, prompt.prompt};
    model.forward(std::span(&again, 1), step_logits, std::span(&first, 1));
    checker.expect_within(
        max_scaled_error(step_logits, row(logits, n - 1),
                         reference_rtol * max_abs(row(logits, n - 1)), 0.0),
        prompt.name + ": last prefill row, 1 vs " + std::to_string(n) + " logit rows");
    run.last_prefill = step_logits;
    run.greedy.push_back(first);
    bool greedy_api_agrees = first == argmax(step_logits);
    for (int i = 1; i < steps; ++i) {
        std::fill(step_logits.begin(), step_logits.end(), std::numeric_limits<float>::quiet_NaN());
        std::int32_t token = -1;
        tinfer::cuda::DeviceChunk const decode{0, n + i - 1, std::span(&run.greedy.back(), 1)};
        model.forward(std::span(&decode, 1), step_logits, std::span(&token, 1));
        greedy_api_agrees = greedy_api_agrees && token == argmax(step_logits);
        run.greedy.push_back(token);
        run.decode.push_back(step_logits);
    }
    checker.expect(greedy_api_agrees,
                   prompt.name + ": the device's greedy tokens are the argmax of its logits");

    // The two models may disagree where the host's top two logits are closer than their
    // combined error (host_rtol each side): compare up to the first such step.
    int compared = 0;
    bool same = true;
    for (int i = 0; i < steps; ++i) {
        if (host.margins[static_cast<std::size_t>(i)] <=
            2 * host_rtol * host.max_abs_logits[static_cast<std::size_t>(i)])
            break;
        ++compared;
        if (run.greedy[static_cast<std::size_t>(i)] != host.greedy[static_cast<std::size_t>(i)]) {
            same = false;
            std::printf("  %s: step %d device %d host %d (host margin %g)\n", prompt.name.c_str(),
                        i, run.greedy[static_cast<std::size_t>(i)],
                        host.greedy[static_cast<std::size_t>(i)],
                        host.margins[static_cast<std::size_t>(i)]);
            break;
        }
    }
    checker.expect(same, prompt.name + ": greedy tokens equal the host's for " +
                             std::to_string(compared) + " of " + std::to_string(steps) +
                             " steps (up to the first near-tie)");
    if (same)
        std::printf("ok: %s: greedy equals the host's for %d of %d steps\n", prompt.name.c_str(),
                    compared, steps);
    model.release(0);
    return run;
}

void run_batched(Checker& checker, Device& model, std::vector<testing::GoldenPrompt> const& prompts,
                 std::vector<DeviceRun> const& alone) {
    int const count = static_cast<int>(prompts.size());
    std::vector<tinfer::cuda::DeviceChunk> chunks;
    for (int s = 0; s < count; ++s)
        chunks.push_back({s, 0, prompts[static_cast<std::size_t>(s)].prompt});
    std::vector<float> logits = poisoned(static_cast<std::size_t>(count) * vocab);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(count), -1);
    model.forward(chunks, logits, tokens);
    std::vector<std::vector<std::int32_t>> greedy(static_cast<std::size_t>(count));
    bool bitwise = true, same_tokens = true;
    for (int s = 0; s < count; ++s) {
        auto const& a = alone[static_cast<std::size_t>(s)];
        bitwise = bitwise && std::memcmp(row(logits, s).data(), a.last_prefill.data(),
                                         vocab * sizeof(float)) == 0;
        greedy[static_cast<std::size_t>(s)].push_back(tokens[static_cast<std::size_t>(s)]);
    }
    for (int i = 1; i < steps; ++i) {
        chunks.clear();
        for (int s = 0; s < count; ++s)
            chunks.push_back(
                {s, static_cast<int>(prompts[static_cast<std::size_t>(s)].prompt.size()) + i - 1,
                 std::span(&greedy[static_cast<std::size_t>(s)].back(), 1)});
        std::fill(logits.begin(), logits.end(), NAN);
        model.forward(chunks, logits, tokens);
        for (int s = 0; s < count; ++s) {
            auto const& a = alone[static_cast<std::size_t>(s)];
            bitwise = bitwise && std::memcmp(row(logits, s).data(),
                                             a.decode[static_cast<std::size_t>(i - 1)].data(),
                                             vocab * sizeof(float)) == 0;
            greedy[static_cast<std::size_t>(s)].push_back(tokens[static_cast<std::size_t>(s)]);
        }
    }
    for (int s = 0; s < count; ++s) {
        bool const same =
            greedy[static_cast<std::size_t>(s)] == alone[static_cast<std::size_t>(s)].greedy;
        same_tokens = same_tokens && same;
        checker.expect(same, prompts[static_cast<std::size_t>(s)].name +
                                 ": batched greedy tokens equal the run alone");
    }
    checker.expect(bitwise, "batch of " + std::to_string(count) +
                                " prompts: every step's logits bitwise as alone");
    if (same_tokens && bitwise)
        std::printf("ok: batch of %d prompts, %d steps: tokens and logits as alone\n", count,
                    steps);
    for (int s = 0; s < count; ++s) model.release(s);
}

// Decode steps replayed as CUDA graphs give the logits of the same steps launched one kernel at
// a time, within the reference tolerance (the graph path rounds the step's context bound up,
// which may split the KV into other partitions), and the same greedy tokens; the graphs are
// reused across steps of one launch shape.
void test_cuda_graphs(Checker& checker, Device& model, testing::GoldenPrompt const& prompt) {
    int const n = static_cast<int>(prompt.prompt.size());
    constexpr int graph_steps = 12;
    // Both runs are fed the plain run's tokens, so a near-tie cannot make them diverge.
    std::vector<std::int32_t> fed_tokens;
    auto const decode_run = [&](bool graphs) {
        model.use_cuda_graphs(graphs);
        std::vector<std::vector<float>> rows;
        std::int32_t token = -1;
        tinfer::cuda::DeviceChunk const prefill{0, 0, prompt.prompt};
        std::vector<float> logits = poisoned(vocab);
        model.forward(std::span(&prefill, 1), logits, std::span(&token, 1));
        for (int i = 0; i < graph_steps; ++i) {
            if (!graphs) fed_tokens.push_back(token);
            std::int32_t const fed = fed_tokens[static_cast<std::size_t>(i)];
            tinfer::cuda::DeviceChunk const decode{0, n + i, std::span(&fed, 1)};
            std::fill(logits.begin(), logits.end(), std::numeric_limits<float>::quiet_NaN());
            model.forward(std::span(&decode, 1), logits, std::span(&token, 1));
            rows.push_back(logits);
        }
        model.release(0);
        model.use_cuda_graphs(false);
        return rows;
    };
    auto const plain = decode_run(false);
    auto const graphed = decode_run(true);
    double worst = 0;
    bool same_tokens = true;
    for (int i = 0; i < graph_steps; ++i) {
        auto const& a = plain[static_cast<std::size_t>(i)];
        auto const& b = graphed[static_cast<std::size_t>(i)];
        worst = std::max(worst, max_scaled_error(b, a, reference_rtol * max_abs(a), 0.0));
        // Either token may win where the top two are within both runs' error.
        float top = -INFINITY, second = -INFINITY;
        for (float x : a) {
            if (x > top) {
                second = top;
                top = x;
            } else if (x > second) {
                second = x;
            }
        }
        if (top - second > 2 * reference_rtol * max_abs(a))
            same_tokens = same_tokens && argmax(a) == argmax(b);
    }
    checker.expect_within(worst, prompt.name + ": " + std::to_string(graph_steps) +
                                     " decode steps as CUDA graphs vs launched one by one");
    checker.expect(same_tokens,
                   prompt.name + ": CUDA graph decode steps pick the same tokens (up to ties)");
}

// Prefill products on tensor cores (kernels::cuda::CublasBf16Gemm: weights and inputs rounded to
// bf16, float32 accumulation) against the float32 kernels, every position's logits. Tolerance:
// bf16 keeps 8 significant bits, so each operand is off by up to 2^-9 relative and each product
// of n terms by about 2^-8 of its output's scale (random signs); the ~7 products of each of 30
// layers add into the residual stream as a random walk, sqrt(210) * 2^-8 ~ 5.7e-2 of the logit
// scale, hence 6e-2 of the largest |logit|. The greedy token of the last position must agree
// where the float32 top two are further apart than that.
constexpr double bf16_rtol = 6e-2;

void test_tensor_core_prefill(Checker& checker, Device& model, testing::GoldenPrompt const& prompt,
                              std::vector<float> const& float32_logits) {
    int const n = static_cast<int>(prompt.prompt.size());
    kernels::cuda::CublasBf16Gemm gemm(
        static_cast<std::size_t>(std::max(smollm2.vocab, smollm2.ffn)) * smollm2.hidden,
        model.options().max_step_tokens,
        std::max({smollm2.hidden, smollm2.ffn, smollm2.q_width()}));
    model.set_prefill_gemm(&gemm);
    std::vector<float> logits = poisoned(static_cast<std::size_t>(n) * vocab);
    tinfer::cuda::DeviceChunk const prefill{0, 0, prompt.prompt, true};
    model.forward(std::span(&prefill, 1), logits);
    model.set_prefill_gemm(nullptr);
    model.release(0);
    double worst = 0;
    for (int i = 0; i < n; ++i) {
        std::span<float const> const want = row(float32_logits, static_cast<std::size_t>(i));
        worst = std::max(worst, max_scaled_error(row(logits, static_cast<std::size_t>(i)), want,
                                                 bf16_rtol * max_abs(want), 0.0));
    }
    checker.expect_within(worst, prompt.name + ": prefill on tensor cores (bf16) vs float32, " +
                                     std::to_string(n) + " positions");
    std::span<float const> const last = row(float32_logits, static_cast<std::size_t>(n - 1));
    std::vector<float> sorted(last.begin(), last.end());
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
    if (sorted[0] - sorted[1] > 2 * bf16_rtol * max_abs(last))
        checker.expect(argmax(row(logits, static_cast<std::size_t>(n - 1))) == argmax(last),
                       prompt.name + ": tensor-core prefill picks the float32 token");
}

void test_device_llama(Checker& checker, std::string const& path, bool real_model) {
    std::vector<testing::GoldenPrompt> const prompts = testing::load_golden_logits(
        std::filesystem::path(TINFER_TEST_DATA_DIR) / "reference" / "golden_logits.bin");
    checker.expect(prompts.size() >= 4, "the golden file has at least 4 prompts");
    gguf::File const file = gguf::File::open(path);
    auto const weights = Weights::bind(file);
    auto model = std::make_unique<Device>(weights, tinfer::cuda::DeviceLlamaOptions{
                                                       .max_seqs = 8,
                                                       .max_step_tokens = 1024,
                                                       .max_logit_rows = 512,
                                                       .max_context = 1024,
                                                       .kv_budget_bytes = 256u << 20,
                                                   });
    std::printf("weights %.1f MiB, KV pool %.1f MiB (%d blocks)\n",
                static_cast<double>(model->weight_bytes()) / (1 << 20),
                static_cast<double>(model->kv_bytes()) / (1 << 20),
                model->block_tables().total_blocks());
    std::vector<DeviceRun> alone;
    for (auto const& prompt : prompts) {
        HostLlamaRun const host = run_host_llama(path, prompt.prompt, steps);
        alone.push_back(run_alone(checker, *model, prompt, host, real_model));
    }
    checker.expect(model->block_tables().free_blocks() == model->block_tables().total_blocks(),
                   "every KV block back in the pool after release");
    test_cuda_graphs(checker, *model, prompts.front());
    {
        testing::GoldenPrompt const& prompt = prompts.front();
        std::vector<float> float32 = poisoned(prompt.prompt.size() * vocab);
        tinfer::cuda::DeviceChunk const prefill{0, 0, prompt.prompt, true};
        model->forward(std::span(&prefill, 1), float32);
        model->release(0);
        test_tensor_core_prefill(checker, *model, prompt, float32);
    }
    std::vector<testing::GoldenPrompt> const four(
        prompts.begin(), prompts.begin() + std::min<std::size_t>(4, prompts.size()));
    run_batched(checker, *model, four,
                std::vector<DeviceRun>(alone.begin(),
                                       alone.begin() + static_cast<std::ptrdiff_t>(four.size())));
}

// A stand-in with SmolLM2's shape, written with the project's GGUF writer (seeded random weights,
// Q4_1 layer matrices as the real file's) to a temporary file: a GPU machine receives at most
// 64 MiB of the repository, so the real file cannot reach it, and a skip there is a failure.
std::string write_stand_in() {
    auto const path = std::filesystem::temp_directory_path() / "tinfer_smollm2_shape.gguf";
    std::vector<std::byte> const bytes =
        gguf::SyntheticModel(smollm2, 20261204, gguf::TensorType::q4_1).bytes();
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<char const*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + path.string());
    return path.string();
}

}  // namespace

int main() {
    char const* model_path = std::getenv("TINFER_MODEL_PATH");
    bool const real_model = model_path != nullptr && std::filesystem::exists(model_path);
    return run_device_tests("cuda_device_llama_test", [&](Checker& checker) {
        std::string path = real_model ? std::string(model_path) : write_stand_in();
        std::printf("model: %s%s\n", path.c_str(),
                    real_model ? "" : " (SmolLM2's shape, generated: no golden comparison)");
        test_device_llama(checker, path, real_model);
    });
}
