#pragma once
// Command-line pieces the example programs share: where the default model is cached, and the
// sampling flags (with llama.cpp's defaults, so the same flags give comparable text).
#include <cstdlib>
#include <filesystem>

#include <CLI/CLI.hpp>

#include <tinfer/kernels/sampling.hpp>

namespace tinfer::examples {

// Where scripts/fetch_model.sh caches the default model.
inline std::filesystem::path default_model_path() {
    char const* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : ".") / ".cache/tinfer/models" /
           "SmolLM2-135M-Instruct.Q4_1.gguf";
}

// --temperature, --top-k, --top-p, --min-p and --seed, starting from llama.cpp's defaults.
inline void add_sampling_options(CLI::App& app, kernels::SamplingParams& sampling) {
    sampling.temperature = 0.8f;
    sampling.top_k = 40;
    sampling.top_p = 0.95f;
    sampling.min_p = 0.05f;
    app.add_option("--temperature", sampling.temperature, "0 = greedy")->capture_default_str();
    app.add_option("--top-k", sampling.top_k, "0 = off")->capture_default_str();
    app.add_option("--top-p", sampling.top_p, "1 = off")->capture_default_str();
    app.add_option("--min-p", sampling.min_p, "0 = off")->capture_default_str();
    app.add_option("--seed", sampling.seed, "Sampling seed")->capture_default_str();
}

}  // namespace tinfer::examples
