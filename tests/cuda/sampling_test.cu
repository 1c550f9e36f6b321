// The device sampler against the host's kernels::sample_token: for the same processed logits,
// settings, seed, request id and step, both draw the same token (same Philox numbers, same
// ranking and filters). Also: Philox blocks are bitwise equal on both sides, and masked (-inf)
// tokens are never drawn.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <tinfer/config/presets.hpp>
#include <tinfer/core/philox.hpp>
#include <tinfer/kernels/cuda/sampling.cuh>
#include <tinfer/kernels/sampling.hpp>

#include "cuda_testing.cuh"

namespace {

using namespace tinfer;
using namespace tinfer::cuda_testing;
using kernels::cuda::DeviceBuffer;

constexpr int vocab = presets::smollm2_135m.vocab;

__global__ void philox_kernel(RngPosition const* positions, PhiloxCounter* out, int count) {
    int const i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < count) out[i] = philox_draw(positions[i]);
}

void test_philox(Checker& checker, std::mt19937_64& rng) {
    constexpr int count = 1000;
    constexpr int threads = 128;
    std::vector<RngPosition> positions(count);
    for (auto& p : positions)
        p = {.seed = rng(),
             .request_id = rng(),
             .step = static_cast<std::uint32_t>(rng()),
             .draw_index = static_cast<std::uint32_t>(rng() % 4)};
    DeviceBuffer<RngPosition> const dpositions(positions);
    DeviceBuffer<PhiloxCounter> dout(count);
    philox_kernel<<<kernels::cuda::ceil_div(count, threads), threads>>>(dpositions.data(),
                                                                        dout.data(), count);
    kernels::cuda::check_launch("philox_kernel");
    auto const out = dout.to_host();
    bool equal = true;
    for (int i = 0; i < count; ++i) equal = equal && out[i] == philox_draw(positions[i]);
    checker.expect(equal, "philox4x32_10 device == host for 1000 random positions");
    if (equal) std::printf("ok: philox bitwise\n");
}

struct Case {
    char const* name;
    kernels::SamplingParams params;
    bool mask_half;  // -inf on every odd token
    bool tie_best;   // the largest logit appears twice (greedy must take the lower id)
};

void test_sampler(Checker& checker, std::mt19937_64& rng) {
    std::vector<Case> const cases = {
        {"greedy with a tie", {.temperature = 0}, false, true},
        {"temperature 1", {.temperature = 1}, false, false},
        {"temperature 0.7, top-k 50", {.temperature = 0.7f, .top_k = 50}, false, false},
        {"top-p 0.9", {.temperature = 1, .top_p = 0.9f}, false, false},
        {"temperature 1.3, min-p 0.05", {.temperature = 1.3f, .min_p = 0.05f}, false, false},
        {"top-k 200, top-p 0.8, min-p 0.02",
         {.temperature = 0.8f, .top_k = 200, .top_p = 0.8f, .min_p = 0.02f},
         false,
         false},
        {"top-k 1", {.temperature = 1, .top_k = 1}, false, true},
        {"masked half, top-p 0.95", {.temperature = 1, .top_p = 0.95f}, true, false},
    };
    constexpr int steps = 6;  // draws per case: different uniforms, different logits
    int const rows = static_cast<int>(cases.size()) * steps;
    std::normal_distribution<float> logit(0, 3);

    std::vector<float> logits(static_cast<std::size_t>(rows) * vocab);
    std::vector<kernels::cuda::DeviceSamplingParams> params;
    std::vector<std::int32_t> expected;
    kernels::SamplingWorkspace host_workspace(vocab);
    for (int r = 0; r < rows; ++r) {
        Case const& c = cases[static_cast<std::size_t>(r / steps)];
        auto const step = static_cast<std::uint32_t>(r % steps);
        std::uint64_t const request_id = 1000 + static_cast<std::uint64_t>(r);
        kernels::SamplingParams settings = c.params;
        settings.seed = rng();
        float* row = logits.data() + static_cast<std::size_t>(r) * vocab;
        for (int t = 0; t < vocab; ++t) row[t] = logit(rng);
        if (c.mask_half)
            for (int t = 1; t < vocab; t += 2) row[t] = -std::numeric_limits<float>::infinity();
        if (c.tie_best) {
            float best = row[0];
            for (int t = 0; t < vocab; ++t) best = std::max(best, row[t]);
            row[vocab / 2] = row[vocab / 3] = best + 1;  // two equal maxima
        }
        auto const sampled = kernels::sample_token({row, static_cast<std::size_t>(vocab)}, settings,
                                                   {}, request_id, step, host_workspace);
        expected.push_back(sampled.token);
        params.push_back(kernels::cuda::device_sampling_params(settings, vocab, request_id, step));
    }

    DeviceBuffer<float> const dlogits(logits);
    DeviceBuffer<kernels::cuda::DeviceSamplingParams> const dparams(params);
    DeviceBuffer<std::int32_t> dtokens(static_cast<std::size_t>(rows));
    dtokens.fill_bytes(0xff);  // -1: an unwritten row fails
    kernels::cuda::SamplingWorkspace workspace(rows, vocab);
    workspace.sample(dlogits.data(), dparams.data(), rows, dtokens.data());
    auto const tokens = dtokens.to_host();
    for (int r = 0; r < rows; ++r) {
        Case const& c = cases[static_cast<std::size_t>(r / steps)];
        std::string const what = std::string(c.name) + ", step " + std::to_string(r % steps);
        checker.expect(tokens[r] == expected[r], what + ": device drew " +
                                                     std::to_string(tokens[r]) + ", host drew " +
                                                     std::to_string(expected[r]));
        if (c.mask_half)
            checker.expect(tokens[r] >= 0 && tokens[r] % 2 == 0, what + ": masked token drawn");
    }
    std::printf("sampler: %d rows of vocab %d compared with the host\n", rows, vocab);
}

}  // namespace

int main() {
    return run_device_tests("cuda_sampling_test", [](Checker& checker) {
        auto rng = seeded_rng(test_seed());
        test_philox(checker, rng);
        test_sampler(checker, rng);
    });
}
