#pragma once
// Shared helpers for the test suite: seeded inputs, the error metric of DESIGN.md, poisoning.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

namespace tinfer::testing {

// Every random input comes from here; the seed is printed so a failure can be replayed.
inline std::mt19937_64 seeded_rng(std::uint64_t seed) {
    BOOST_TEST_MESSAGE("seed " << seed);
    return std::mt19937_64(seed);
}

inline std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float lo = -1.f,
                                        float hi = 1.f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (auto& x : v) x = dist(rng);
    return v;
}

// Outputs are filled with NaN before a kernel runs, so an element it forgot to write fails.
template <class T>
void poison(std::span<T> out) {
    std::fill(out.begin(), out.end(), std::numeric_limits<T>::quiet_NaN());
}

// max over i of |out-ref| / (atol + rtol*|ref|): <= 1 means within tolerance. NaN counts as
// infinitely wrong.
template <class A, class B>
double scaled_error(std::span<A const> out, std::span<B const> ref, double atol, double rtol) {
    BOOST_REQUIRE_EQUAL(out.size(), ref.size());
    double worst = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
        double const o = static_cast<double>(out[i]), r = static_cast<double>(ref[i]);
        if (std::isnan(o) != std::isnan(r)) return std::numeric_limits<double>::infinity();
        if (std::isnan(o)) continue;
        worst = std::max(worst, std::abs(o - r) / (atol + rtol * std::abs(r)));
    }
    return worst;
}

// Tolerance of a float32 dot product of length n against a float64 reference: rounding error
// grows at most like n * eps in the worst case and like sqrt(n) * eps typically; we take the
// worst case so a correct kernel never fails by chance.
inline double float32_sum_rtol(std::size_t n) {
    return static_cast<double>(n) * std::numeric_limits<float>::epsilon();
}

// The cached default model (scripts/fetch_model.sh); the model tests need it.
inline std::filesystem::path model_path() {
    char const* env = std::getenv("TINFER_MODEL_PATH");
    std::filesystem::path path = env ? env : "";
    BOOST_REQUIRE_MESSAGE(
        !path.empty() && std::filesystem::exists(path),
        "default model not found at '" << path.string() << "': run scripts/fetch_model.sh");
    return path;
}

// The cached second model, Gemma 3 270M Q4_K_M (scripts/fetch_model.sh gemma3).
inline std::filesystem::path gemma3_path() {
    char const* env = std::getenv("TINFER_GEMMA3_PATH");
    std::filesystem::path path = env ? env : "";
    BOOST_REQUIRE_MESSAGE(!path.empty() && std::filesystem::exists(path),
                          "Gemma 3 model not found at '" << path.string()
                                                         << "': run scripts/fetch_model.sh gemma3");
    return path;
}

inline std::filesystem::path data_dir() {
    return TINFER_TEST_DATA_DIR;
}

}  // namespace tinfer::testing
