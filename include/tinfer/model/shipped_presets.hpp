#pragma once
// The shapes the examples and benchmarks compile in (their instantiation budget): a --model
// file of one of these shapes runs, any other is refused with the constexpr ModelConfig to add
// here. SmolLM2-135M in any weight types (Q4_1 as shipped, Q8_0 as the GGUF writer makes it)
// and Gemma 3 270M.
#include <utility>

#include <tinfer/model/with_preset.hpp>
#include <tinfer/presets/presets.hpp>

namespace tinfer::model {

template <class Body>
decltype(auto) with_shipped_preset(gguf::File const& file, Body&& body) {
    return with_preset<presets::smollm2_135m, presets::gemma3_270m>(file, std::forward<Body>(body));
}

}  // namespace tinfer::model
