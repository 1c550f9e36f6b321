// Philox4x32-10 and its uniform mappings on the device give the host's bits: the Random123
// known answers, and every (seed, request, step, draw) of a grid of stream positions. This is
// what lets a CUDA sampler reproduce the host sampler's draws. Without a GPU it reports the skip
// and exits 77.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include <tinfer/core/philox.hpp>

namespace {

constexpr int skipped_exit_code = 77;
constexpr int threads_per_block = 256;
constexpr std::uint32_t positions = std::uint32_t{1} << 16;
constexpr int words_per_block = 4;

// Spreads a flat index over every coordinate of the stream position, high bits included.
__host__ __device__ constexpr tinfer::RngPosition position_of(std::uint32_t index) {
    return {.seed = 0x9e3779b97f4a7c15ull * (index % 7 + 1),
            .request_id = (std::uint64_t{index % 13} << 40) + index / 5,
            .step = index / 3,
            .draw_index = index % 4};
}

struct DeviceDraw {
    std::uint32_t words[words_per_block];
    float uniform;
    double uniform_53;
};

__global__ void draw_kernel(DeviceDraw* out) {
    std::uint32_t const index = blockIdx.x * blockDim.x + threadIdx.x;
    if (index >= positions) return;
    tinfer::PhiloxCounter const bits = tinfer::philox_draw(position_of(index));
    DeviceDraw& draw = out[index];
    for (int w = 0; w < words_per_block; ++w) draw.words[w] = bits.words[w];
    draw.uniform = tinfer::uniform_float(bits.words[0]);
    draw.uniform_53 = tinfer::uniform_double(bits.words[0], bits.words[1]);
}

__global__ void known_answer_kernel(tinfer::PhiloxCounter* out) {
    out[0] = tinfer::philox4x32_10({{0, 0, 0, 0}}, {{0, 0}});
    out[1] = tinfer::philox4x32_10({{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
                                   {{0xffffffff, 0xffffffff}});
    out[2] = tinfer::philox4x32_10({{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
                                   {{0xa4093822, 0x299f31d0}});
}

bool check(cudaError_t status, char const* what) {
    if (status == cudaSuccess) return true;
    std::printf("FAIL: %s: %s\n", what, cudaGetErrorString(status));
    return false;
}

}  // namespace

int main() {
    int device_count = 0;
    if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
        std::printf("SKIP: no CUDA device; philox_device_test not run\n");
        return skipped_exit_code;
    }
    // Random123 kat_vectors, philox4x32 10.
    tinfer::PhiloxCounter const expected_answers[] = {
        {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    constexpr int answers = 3;
    tinfer::PhiloxCounter* device_answers = nullptr;
    DeviceDraw* device_draws = nullptr;
    if (!check(cudaMalloc(&device_answers, answers * sizeof(tinfer::PhiloxCounter)), "malloc") ||
        !check(cudaMalloc(&device_draws, positions * sizeof(DeviceDraw)), "malloc"))
        return 1;
    known_answer_kernel<<<1, 1>>>(device_answers);
    draw_kernel<<<(positions + threads_per_block - 1) / threads_per_block, threads_per_block>>>(
        device_draws);
    if (!check(cudaGetLastError(), "launch") || !check(cudaDeviceSynchronize(), "kernels"))
        return 1;
    std::vector<tinfer::PhiloxCounter> got_answers(answers);
    std::vector<DeviceDraw> got(positions);
    if (!check(cudaMemcpy(got_answers.data(), device_answers,
                          answers * sizeof(tinfer::PhiloxCounter), cudaMemcpyDeviceToHost),
               "copy") ||
        !check(cudaMemcpy(got.data(), device_draws, positions * sizeof(DeviceDraw),
                          cudaMemcpyDeviceToHost),
               "copy"))
        return 1;
    cudaFree(device_answers);
    cudaFree(device_draws);

    int failures = 0;
    for (int i = 0; i < answers; ++i) {
        if (!(got_answers[i] == expected_answers[i])) {
            std::printf("FAIL: known answer %d differs on the device\n", i);
            ++failures;
        }
    }
    for (std::uint32_t index = 0; index < positions; ++index) {
        tinfer::PhiloxCounter const host = tinfer::philox_draw(position_of(index));
        DeviceDraw const& device = got[index];
        bool same = device.uniform == tinfer::uniform_float(host.words[0]) &&
                    device.uniform_53 == tinfer::uniform_double(host.words[0], host.words[1]);
        for (int w = 0; w < words_per_block; ++w) same = same && device.words[w] == host.words[w];
        if (!same && failures++ < 10) std::printf("FAIL: position %u differs\n", index);
    }
    if (failures > 0) {
        std::printf("FAIL: %d mismatches\n", failures);
        return 1;
    }
    std::printf("PASS: %u stream positions and %d known answers match the host\n", positions,
                answers);
    return 0;
}
