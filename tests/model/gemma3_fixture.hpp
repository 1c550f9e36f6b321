#pragma once
// The Gemma 3 270M file bound once per test program (every Gemma test case of it shares the
// mapping, the bound weights and the int8 strips repacked on first use), and random prompts.
#include <cstdint>
#include <random>
#include <vector>

#include <tinfer/gguf/gguf.hpp>
#include <tinfer/model/llama.hpp>
#include <tinfer/presets/presets.hpp>

#include "testing.hpp"

namespace tinfer::testing {

struct Gemma3Fixture {
    gguf::File file = gguf::File::open(gemma3_path());
    model::Llama<presets::gemma3_270m> model = model::Llama<presets::gemma3_270m>::bind(file);
};

inline Gemma3Fixture& gemma3_fixture() {
    static Gemma3Fixture f;
    return f;
}

// BOS (2), then n - 1 seeded ids drawn from [1000, 1000 + id_range).
inline std::vector<std::int32_t> random_gemma3_tokens(int n, unsigned seed, int id_range) {
    std::mt19937 random(seed);
    std::vector<std::int32_t> tokens(static_cast<std::size_t>(n));
    tokens[0] = 2;
    for (int i = 1; i < n; ++i)
        tokens[static_cast<std::size_t>(i)] =
            1000 + static_cast<std::int32_t>(random() % static_cast<unsigned>(id_range));
    return tokens;
}

}  // namespace tinfer::testing
