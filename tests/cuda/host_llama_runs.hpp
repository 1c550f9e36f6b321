#pragma once
// The host model's results that the device model test compares with, computed in a separate
// translation unit (host_llama_runs.cpp) that the host compiler builds with OpenMP, so nvcc never
// sees the host forward pass.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tinfer::cuda_testing {

struct HostLlamaRun {
    std::vector<float> prefill_logits;  // [prompt tokens][vocab]
    std::vector<std::int32_t> greedy;   // `steps` tokens: greedy[0] from the prefill's last row
    std::vector<float> margins;         // largest minus second largest logit behind greedy[i]
    std::vector<float> max_abs_logits;  // max |logit| of the row behind greedy[i]
};

// Llama<presets::smollm2_135m> on the model at `model_path` (float32 activations): the prompt
// prefilled with every position's logits, then greedy decoding for `steps` tokens.
HostLlamaRun run_host_llama(std::string const& model_path, std::span<std::int32_t const> prompt,
                            int steps);

}  // namespace tinfer::cuda_testing
