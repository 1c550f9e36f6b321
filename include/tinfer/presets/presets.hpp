#pragma once
#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>

// Shapes of published models. Their KV memory is usually quoted with fp16 K and V
// (ModelConfig::kv_bytes_per_token(DType::f16)); the KV codecs are the cache's choice.
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
                                          .weights = DType::q4_1};

// Gemma 3 270M: MQA with head_dim 256, GeGLU, QK-norm, sandwich norms, embeddings scaled by
// sqrt(hidden), five sliding-window layers (512 tokens, RoPE base 10,000) to one global layer
// (RoPE base 1,000,000). Its file mixes Q5_0, Q8_0, Q4_K and Q6_K matrices.
inline constexpr ModelConfig gemma3_270m{.layers = 18,
                                         .hidden = 640,
                                         .heads = 4,
                                         .kv_heads = 1,
                                         .head_dim = 256,
                                         .ffn = 2048,
                                         .vocab = 262144,
                                         .max_context = 32768,
                                         .rope_base = 1000000.0,
                                         .norm_eps = 1e-6,
                                         .weights = DType::q5_0,
                                         .sliding_window = 512,
                                         .arch = {.family = Family::gemma3,
                                                  .norms = NormPlacement::sandwich,
                                                  .activation = GatedActivation::gelu_tanh,
                                                  .rope_pairing = RopePairing::neox,
                                                  .lm_head = LmHead::tied,
                                                  .qk_norm = true,
                                                  .scale_embedding = true,
                                                  .query_pre_attn_scalar = 256,
                                                  .global_every = 6,
                                                  .rope_base_sliding = 10000.0}};

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
                                       .arch = {.lm_head = LmHead::separate}};

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
                                        .arch = {.lm_head = LmHead::separate}};

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
                                       .arch = {.lm_head = LmHead::separate}};

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
                                        .sliding_window = 4096,
                                        .arch = {.lm_head = LmHead::separate}};

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
                                        .arch = {.family = Family::qwen2,
                                                 .rope_pairing = RopePairing::neox,
                                                 .lm_head = LmHead::tied,
                                                 .qkv_bias = true}};

static_assert(ModelShape<smollm2_135m> && ModelShape<gemma3_270m> && ModelShape<llama2_7b> &&
              ModelShape<llama2_70b> && ModelShape<llama3_8b> && ModelShape<mistral_7b> &&
              ModelShape<qwen25_05b>);

}  // namespace tinfer::presets
