#pragma once
// Command-line pieces the example programs share: where the default model is cached, the
// sampling flags (with llama.cpp's defaults, so the same flags give comparable text), and
// --chat-template's value.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include <tinfer/core/error.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/sampling.hpp>
#include <tinfer/tokenizer/chat_template.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

#include "cli_checks.hpp"

namespace tinfer::examples {

// Where scripts/fetch_model.sh caches the default model.
inline std::filesystem::path default_model_path() {
    char const* home = std::getenv("HOME");
    return std::filesystem::path(home ? home : ".") / ".cache/tinfer/models" /
           "SmolLM2-135M-Instruct.Q4_1.gguf";
}

// --temperature, --top-k, --top-p, --min-p, --seed and the penalties, starting from
// llama.cpp's defaults (penalties off).
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
    app.add_option("--repeat-penalty,--repetition-penalty", sampling.repetition_penalty,
                   "Divides positive (multiplies negative) logits of prompt and output tokens; "
                   "1 = off")
        ->capture_default_str();
    app.add_option("--presence-penalty", sampling.presence_penalty,
                   "Subtracted once from each token already generated; 0 = off")
        ->capture_default_str();
    app.add_option("--frequency-penalty", sampling.frequency_penalty,
                   "Subtracted once per earlier generation of the token; 0 = off")
        ->capture_default_str();
}

// --chat-template VALUE: a built-in format by name (chatml, smollm2, gemma; tok::ChatTemplate::
// builtin), else a file of Jinja source, given the file's BOS and EOS texts as its own template
// would be. Empty: nullopt (the file's own template). An unreadable file or a template the
// interpreter refuses throws, naming it.
inline std::optional<tok::ChatTemplate> chat_template_option(std::string const& value,
                                                             gguf::File const& file) {
    if (value.empty()) return std::nullopt;
    if (auto builtin = tok::ChatTemplate::builtin(value)) return builtin;
    std::ifstream in(value, std::ios::binary);
    if (!in)
        throw RequestError("--chat-template '" + value +
                           "': no such file, and not a built-in (chatml, smollm2, gemma)");
    std::string const source{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    try {
        return tok::ChatTemplate::from_jinja(source, tok::chat_special_tokens(file));
    } catch (Error const& e) {
        throw Error("--chat-template '" + value + "': " + e.what());
    }
}

}  // namespace tinfer::examples
