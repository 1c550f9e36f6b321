#pragma once
// What the engine-level speculation tests share: the model file, the golden prompts and a
// greedy request.
#include <cstdint>
#include <utility>
#include <vector>

#include <tinfer/engine/engine.hpp>
#include <tinfer/gguf/gguf.hpp>

#include "../reference/golden_logits.hpp"
#include "testing.hpp"

namespace tinfer::testing {

inline gguf::File model_file() {
    return gguf::File::open(model_path());
}

// The golden file's prompts, loaded once: the file is large and every case reads it.
inline std::vector<GoldenPrompt> const& golden() {
    static auto const prompts = load_golden_logits(data_dir() / "reference/golden_logits.bin");
    return prompts;
}

// Greedy, EOS ignored (a fixed length), with γ = draft_tokens.
inline GenerationRequest greedy(std::vector<std::int32_t> prompt, int max_tokens,
                                int draft_tokens) {
    GenerationRequest r;
    r.prompt_tokens = std::move(prompt);
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    r.draft_tokens = draft_tokens;
    return r;
}

}  // namespace tinfer::testing
