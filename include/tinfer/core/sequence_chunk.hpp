#pragma once
#include <cstdint>
#include <span>

namespace tinfer {

// One sequence's part of a forward step: `tokens` at positions first_position, first_position
// + 1, ... (their RoPE rotations), stored at cache slots first_cache_slot, first_cache_slot + 1,
// ...; the sequence's cache already holds slots 0 .. first_cache_slot - 1. Without eviction
// the two coincide, which is the default.
struct SequenceChunk {
    int slot = 0;
    int first_position = 0;
    std::span<std::int32_t const> tokens;
    bool all_logits = false;  // logits for every token (scoring), else for the last one only
    int first_cache_slot = first_position;
    // When not empty: forward adds, for every cache slot s, the attention probability the
    // chunk's tokens gave s, summed over layers and query heads (model/attention_scores.hpp),
    // for H2O-style eviction. Must hold first_cache_slot + tokens.size() slots. Under tensor
    // parallelism each rank adds its own heads' share.
    std::span<float> attention_scores = {};
};

}  // namespace tinfer
