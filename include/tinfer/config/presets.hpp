#pragma once
#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>

// Shapes of published models. KV dtype is the one their figures are usually quoted with.
namespace tinfer::presets {

inline constexpr ModelConfig smollm2_135m{.layers = 30,
                                          .hidden = 576,
                                          .heads = 9,
                                          .kv_heads = 3,
                                          .head_dim = 64,
                                          .ffn = 1536,
                                          .vocab = 49152,
                                          .max_context = 8192,
                                          .rope_base = 100000.0,
                                          .norm_eps = 1e-5,
                                          .weights = DType::q4_1,
                                          .kv = DType::f32};

inline constexpr ModelConfig llama2_7b{.layers = 32,
                                       .hidden = 4096,
                                       .heads = 32,
                                       .kv_heads = 32,
                                       .head_dim = 128,
                                       .ffn = 11008,
                                       .vocab = 32000,
                                       .max_context = 4096,
                                       .rope_base = 10000.0,
                                       .norm_eps = 1e-5,
                                       .weights = DType::f16,
                                       .kv = DType::f16};

inline constexpr ModelConfig llama2_70b{.layers = 80,
                                        .hidden = 8192,
                                        .heads = 64,
                                        .kv_heads = 8,
                                        .head_dim = 128,
                                        .ffn = 28672,
                                        .vocab = 32000,
                                        .max_context = 4096,
                                        .rope_base = 10000.0,
                                        .norm_eps = 1e-5,
                                        .weights = DType::f16,
                                        .kv = DType::f16};

inline constexpr ModelConfig llama3_8b{.layers = 32,
                                       .hidden = 4096,
                                       .heads = 32,
                                       .kv_heads = 8,
                                       .head_dim = 128,
                                       .ffn = 14336,
                                       .vocab = 128256,
                                       .max_context = 8192,
                                       .rope_base = 500000.0,
                                       .norm_eps = 1e-5,
                                       .weights = DType::bf16,
                                       .kv = DType::f16};

inline constexpr ModelConfig mistral_7b{.layers = 32,
                                        .hidden = 4096,
                                        .heads = 32,
                                        .kv_heads = 8,
                                        .head_dim = 128,
                                        .ffn = 14336,
                                        .vocab = 32000,
                                        .max_context = 32768,
                                        .rope_base = 10000.0,
                                        .norm_eps = 1e-5,
                                        .weights = DType::f16,
                                        .kv = DType::f16,
                                        .sliding_window = 4096};

inline constexpr ModelConfig qwen25_05b{.layers = 24,
                                        .hidden = 896,
                                        .heads = 14,
                                        .kv_heads = 2,
                                        .head_dim = 64,
                                        .ffn = 4864,
                                        .vocab = 151936,
                                        .max_context = 32768,
                                        .rope_base = 1000000.0,
                                        .norm_eps = 1e-6,
                                        .weights = DType::bf16,
                                        .kv = DType::bf16};

static_assert(ModelShape<smollm2_135m> && ModelShape<llama2_7b> && ModelShape<llama2_70b> &&
              ModelShape<llama3_8b> && ModelShape<mistral_7b> && ModelShape<qwen25_05b>);

}  // namespace tinfer::presets
