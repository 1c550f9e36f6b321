// The device sampler against the host's kernels::sample_token: for the same processed logits,
// settings, seed, request id and step, both draw the same token (same Philox numbers, same
// ranking and filters). Also: Philox blocks and the sampling exponential
// (core/sampling_exp.hpp) are bitwise equal on both sides, masked (-inf) tokens are never
// drawn, rows the host refuses (a NaN or +inf logit, every logit -inf) fail on the device with
// the host's error, and a workspace made on one non-blocking stream samples correctly on another
// (its setup runs on the caller's stream, not the legacy default one).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include <tinfer/core/philox.hpp>
#include <tinfer/core/sampling_exp.hpp>
#include <tinfer/kernels/cuda/sampling.cuh>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/presets/presets.hpp>

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

__global__ void sampling_exp_kernel(float const* x, float* out, int count) {
    int const i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < count) out[i] = tinfer::sampling_exp(x[i]);
}

// The one exponential both samplers weigh with gives the same bits on both backends, over the
// whole range a weight's exponent takes (and past it: overflow, underflow, specials).
void test_sampling_exp(Checker& checker, std::mt19937_64& rng) {
    constexpr int threads = 256;
    std::vector<float> x = random_floats(rng, 1 << 20, -110, 95);
    auto const more = random_floats(rng, 1 << 16, -1, 1);
    x.insert(x.end(), more.begin(), more.end());
    for (float const special : {0.0f, -0.0f, 1.0f, -1.0f, -std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(), -87.33654f, -103.9720840f,
                                88.7228393f, -1e-30f, std::numeric_limits<float>::denorm_min()})
        x.push_back(special);
    int const count = static_cast<int>(x.size());
    DeviceBuffer<float> const dx(x);
    auto dout = poisoned_floats(x.size());
    sampling_exp_kernel<<<kernels::cuda::ceil_div(count, threads), threads>>>(dx.data(),
                                                                              dout.data(), count);
    kernels::cuda::check_launch("sampling_exp_kernel");
    auto const out = dout.to_host();
    int differ = 0;
    for (int i = 0; i < count; ++i) {
        float const host = tinfer::sampling_exp(x[i]);
        if (std::memcmp(&host, &out[i], sizeof host) != 0 && !(host != host && out[i] != out[i]))
            ++differ;
    }
    checker.expect(differ == 0, "sampling_exp device == host bitwise (" + std::to_string(differ) +
                                    " of " + std::to_string(count) + " differ)");
}

// The host's refusal of a row, or "" when it samples one.
std::string host_refusal(std::vector<float> const& row, kernels::SamplingParams const& params,
                         kernels::SamplingWorkspace& workspace) {
    try {
        (void)kernels::sample_token({row.data(), row.size()}, params, {}, 1, 0, workspace);
    } catch (Error const& error) {
        return error.what();
    }
    return "";
}

// Rows the host refuses (a NaN or +inf logit: an Error naming the lowest such token; every
// logit -inf: a RequestError) are refused by the device too, with the same message, greedy or
// not; the good rows of the same launch still draw the host's tokens.
void test_refused_rows(Checker& checker, std::mt19937_64& rng) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    std::normal_distribution<float> logit(0, 3);
    struct Row {
        char const* name;
        int nan_at;       // -1: none
        int inf_at;       // -1: none
        bool all_masked;  // every logit -inf
    };
    std::vector<Row> const kinds = {{"good", -1, -1, false},
                                    {"NaN at 4000", 4000, -1, false},
                                    {"+inf at 123 and NaN at 9000", 9000, 123, false},
                                    {"NaN at 0", 0, -1, false},
                                    {"every logit -inf", -1, -1, true}};
    for (float const temperature : {0.0f, 0.8f}) {
        kernels::SamplingParams const settings{.temperature = temperature, .seed = rng()};
        kernels::SamplingWorkspace host_workspace(vocab);
        std::vector<float> logits;
        std::vector<std::string> expected;
        std::vector<std::int32_t> expected_tokens;
        for (Row const& kind : kinds) {
            std::vector<float> row(vocab);
            for (float& x : row) x = kind.all_masked ? -inf : logit(rng);
            if (kind.nan_at >= 0) row[static_cast<std::size_t>(kind.nan_at)] = std::nanf("");
            if (kind.inf_at >= 0) row[static_cast<std::size_t>(kind.inf_at)] = inf;
            expected.push_back(host_refusal(row, settings, host_workspace));
            expected_tokens.push_back(
                expected.back().empty() ? kernels::sample_token({row.data(), row.size()}, settings,
                                                                {}, 1, 0, host_workspace)
                                              .token
                                        : -1);
            logits.insert(logits.end(), row.begin(), row.end());
        }
        int const rows = static_cast<int>(kinds.size());
        std::vector<kernels::cuda::DeviceSamplingParams> const params(
            kinds.size(), kernels::cuda::device_sampling_params(settings, vocab, 1, 0));
        DeviceBuffer<float> const dlogits(logits);
        DeviceBuffer<kernels::cuda::DeviceSamplingParams> const dparams(params);
        DeviceBuffer<std::int32_t> dtokens(kinds.size());
        kernels::cuda::DeviceSamplingWorkspace workspace(rows, vocab);
        workspace.sample(dlogits.data(), dparams.data(), rows, dtokens.data());
        auto const tokens = dtokens.to_host();
        for (int r = 0; r < rows; ++r) {
            std::string const what =
                std::string(kinds[r].name) + ", temperature " + std::to_string(temperature);
            std::string got;
            bool request_error = false;
            try {
                kernels::check_sampled_tokens({tokens.data() + r, 1});
            } catch (RequestError const& error) {
                got = error.what();
                request_error = true;
            } catch (Error const& error) {
                got = error.what();
            }
            checker.expect(got == expected[static_cast<std::size_t>(r)],
                           what + ": device says '" + got + "', host says '" +
                               expected[static_cast<std::size_t>(r)] + "'");
            checker.expect(request_error == kinds[r].all_masked,
                           what + ": a request's fault exactly when every logit is -inf");
            if (expected[static_cast<std::size_t>(r)].empty())
                checker.expect(tokens[r] == expected_tokens[static_cast<std::size_t>(r)],
                               what + ": the good row draws the host's token");
        }
    }
}

// sample_greedy (an argmax reduction per row) against the host sampler at temperature 0 and
// the ranked sampler's greedy path, token for token and refusal for refusal: ties at the maximum
// (three ids, the lowest wins, one past the first thread's stride), the maximum at the last id,
// -inf almost everywhere, NaN / +inf (the lowest such id named), every logit -inf, and a row of
// -0.0 and +0.0 only (equal as floats: the host takes id 0).
void test_greedy_argmax(Checker& checker, std::mt19937_64& rng) {
    constexpr float inf = std::numeric_limits<float>::infinity();
    std::normal_distribution<float> logit(0, 3);
    kernels::SamplingParams const greedy{.temperature = 0};
    kernels::SamplingWorkspace host_workspace(vocab);
    std::vector<std::vector<float>> rows;
    auto random_row = [&] {
        std::vector<float> row(vocab);
        for (float& x : row) x = logit(rng);
        return row;
    };
    for (int i = 0; i < 3; ++i) rows.push_back(random_row());
    {
        std::vector<float> row = random_row();
        for (int id : {40000, 777, 7000}) row[static_cast<std::size_t>(id)] = 50;
        rows.push_back(row);
    }
    {
        std::vector<float> row = random_row();
        row.back() = 50;
        rows.push_back(row);
    }
    {
        std::vector<float> row(vocab, -inf);
        row[31337] = -1000;
        rows.push_back(row);
    }
    {
        std::vector<float> row = random_row();
        row[9000] = std::nanf("");
        row[123] = inf;
        rows.push_back(row);
    }
    rows.push_back(std::vector<float>(vocab, -inf));
    {
        std::vector<float> row(vocab, 0.0f);
        row[0] = -0.0f;
        rows.push_back(row);
    }
    int const count = static_cast<int>(rows.size());
    std::vector<float> flat;
    for (auto const& row : rows) flat.insert(flat.end(), row.begin(), row.end());
    DeviceBuffer<float> const dlogits(flat);
    DeviceBuffer<std::int32_t> dargmax(rows.size()), dranked(rows.size());
    kernels::cuda::sample_greedy(dlogits.data(), count, vocab, dargmax.data());
    std::vector<kernels::cuda::DeviceSamplingParams> const params(
        rows.size(), kernels::cuda::device_sampling_params(greedy, vocab, 1, 0));
    DeviceBuffer<kernels::cuda::DeviceSamplingParams> const dparams(params);
    kernels::cuda::DeviceSamplingWorkspace workspace(count, vocab);
    workspace.sample(dlogits.data(), dparams.data(), count, dranked.data());
    auto const argmax = dargmax.to_host();
    auto const ranked = dranked.to_host();
    for (int r = 0; r < count; ++r) {
        auto const& row = rows[static_cast<std::size_t>(r)];
        std::string const refusal = host_refusal(row, greedy, host_workspace);
        std::string got;
        try {
            kernels::check_sampled_tokens({argmax.data() + r, 1});
        } catch (Error const& error) {
            got = error.what();
        }
        std::string const what = "greedy argmax row " + std::to_string(r);
        checker.expect(got == refusal, what + ": refusal '" + got + "', host '" + refusal + "'");
        if (refusal.empty()) {
            std::int32_t const host =
                kernels::sample_token({row.data(), row.size()}, greedy, {}, 1, 0, host_workspace)
                    .token;
            checker.expect(argmax[r] == host, what + ": token " + std::to_string(argmax[r]) +
                                                  ", host " + std::to_string(host));
        }
        // The ranked path agrees wherever the floats' order and their bits' order agree (not on
        // the -0.0 / +0.0 row, which the radix sort ranks by bits).
        if (r != count - 1)
            checker.expect(argmax[r] == ranked[r], what + ": as the ranked sampler's greedy");
    }
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
    kernels::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after uploads");
    // Made on one non-blocking stream, used at once on another: nothing orders the two but the
    // workspace's own setup event (a setup on the legacy default stream would race here).
    cudaStream_t setup_stream = nullptr, sample_stream = nullptr;
    kernels::cuda::check(cudaStreamCreateWithFlags(&setup_stream, cudaStreamNonBlocking),
                         "cudaStreamCreateWithFlags");
    kernels::cuda::check(cudaStreamCreateWithFlags(&sample_stream, cudaStreamNonBlocking),
                         "cudaStreamCreateWithFlags");
    {
        kernels::cuda::DeviceSamplingWorkspace workspace(rows, vocab, setup_stream);
        workspace.sample(dlogits.data(), dparams.data(), rows, dtokens.data(), sample_stream);
        kernels::cuda::check(cudaStreamSynchronize(sample_stream), "cudaStreamSynchronize");
    }
    kernels::cuda::check(cudaStreamDestroy(setup_stream), "cudaStreamDestroy");
    kernels::cuda::check(cudaStreamDestroy(sample_stream), "cudaStreamDestroy");
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
        test_sampling_exp(checker, rng);
        test_sampler(checker, rng);
        test_refused_rows(checker, rng);
        test_greedy_argmax(checker, rng);
    });
}
