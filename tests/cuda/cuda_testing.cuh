#pragma once
// Helpers for the CUDA tests: plain main() programs (no Boost under nvcc) that skip with exit
// code 77 where the machine has no GPU (and fail where it has one CUDA cannot use), count failed
// expectations, and measure errors the way DESIGN.md prescribes: max |out - ref| / bound, where
// each element's bound comes from the dtype and the reduction length (<= 1 passes; NaN is
// infinitely wrong).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <tinfer/kernels/cuda/check.cuh>
#include <tinfer/kernels/cuda/device_buffer.cuh>

namespace tinfer::cuda_testing {

inline constexpr int skipped_exit_code = 77;
inline constexpr double float_epsilon = std::numeric_limits<float>::epsilon();

class Checker {
  public:
    void expect(bool ok, std::string const& what) {
        ++checks_;
        if (!ok) {
            ++failures_;
            std::printf("FAILED: %s\n", what.c_str());
        }
    }
    // A ratio from max_scaled_error: passes when <= 1.
    void expect_within(double ratio, std::string const& what) {
        expect(ratio <= 1.0, what + " (error ratio " + std::to_string(ratio) + ")");
        if (ratio <= 1.0) std::printf("ok: %s (error ratio %.3g)\n", what.c_str(), ratio);
    }
    int exit_code() const {
        std::printf("%d checks, %d failed\n", checks_, failures_);
        return failures_ == 0 ? 0 : 1;
    }

  private:
    int checks_ = 0;
    int failures_ = 0;
};

// Runs `body(checker)` on a device, or reports the skip; exceptions count as failures.
template <class Body>
int run_device_tests(char const* name, Body&& body) {
    // No GPU on this machine: skipped. CUDA failing where the machine shows a GPU: a failure
    // (kernels/cuda/device_probe.hpp), so a GPU run cannot pass by skipping.
    int devices = 0;
    try {
        devices = kernels::cuda::device_count();
    } catch (std::exception const& error) {
        std::printf("FAILED: %s: %s\n", name, error.what());
        return 1;
    }
    if (devices == 0) {
        std::printf("%s: no CUDA device (no GPU on this machine): skipped\n", name);
        return skipped_exit_code;
    }
    cudaDeviceProp properties{};
    kernels::cuda::check(cudaGetDeviceProperties(&properties, 0), "cudaGetDeviceProperties");
    std::printf("%s on %s (sm_%d%d)\n", name, properties.name, properties.major, properties.minor);
    Checker checker;
    try {
        body(checker);
    } catch (std::exception const& error) {
        checker.expect(false, std::string("exception: ") + error.what());
    }
    return checker.exit_code();
}

inline std::mt19937_64 seeded_rng(std::uint64_t seed) {
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
    return std::mt19937_64(seed);
}

// A fresh seed per run (printed, so a failure can be replayed with TINFER_TEST_SEED).
inline std::uint64_t test_seed() {
    if (char const* fixed = std::getenv("TINFER_TEST_SEED"))
        return std::strtoull(fixed, nullptr, 10);
    return std::random_device{}();
}

inline std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float lo = -1.f,
                                        float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// Device buffer of `n` floats, every one NaN (all bits set), so an element a kernel forgot to
// write fails the comparison.
inline kernels::cuda::DeviceBuffer<float> poisoned_floats(std::size_t n) {
    kernels::cuda::DeviceBuffer<float> buffer(n);
    buffer.fill_bytes(0xff);
    return buffer;
}

// max over i of |out[i] - ref[i]| / bound[i].
inline double max_scaled_error(std::span<float const> out, std::span<float const> ref,
                               std::span<double const> bound) {
    if (out.size() != ref.size() || out.size() != bound.size())
        return std::numeric_limits<double>::infinity();
    double worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        double const o = out[i], r = ref[i];
        if (std::isnan(o) != std::isnan(r)) return std::numeric_limits<double>::infinity();
        if (std::isnan(o)) continue;
        worst = std::max(worst, std::abs(o - r) / bound[i]);
    }
    return worst;
}

// The same with one bound for all: atol + rtol * |ref|.
inline double max_scaled_error(std::span<float const> out, std::span<float const> ref, double atol,
                               double rtol) {
    std::vector<double> bound(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) bound[i] = atol + rtol * std::abs(ref[i]);
    return max_scaled_error(out, ref, bound);
}

}  // namespace tinfer::cuda_testing
