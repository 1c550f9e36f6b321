#pragma once
// The shapes cuda_engine_test serves on both backends, and the device models it instantiates
// (engine_models.cu, compiled by nvcc; the test itself by the host compiler).
#include <tinfer/config/model_config.hpp>
#include <tinfer/engine/cuda_backend.hpp>
#include <tinfer/sched/scheduler.hpp>

namespace tinfer::cuda_testing {

// Llama's parts; a separate LM head (a tied one makes greedy decoding of a random model repeat
// its last token). head_dim 64 and a GQA group of 2: shapes the device kernels are built for.
inline constexpr ModelConfig engine_llama{.layers = 2,
                                          .hidden = 128,
                                          .heads = 4,
                                          .kv_heads = 2,
                                          .head_dim = 64,
                                          .ffn = 256,
                                          .vocab = 96,
                                          .max_context = 512,
                                          .rope_base = 10000.0,
                                          .norm_eps = 1e-5,
                                          .arch = {.lm_head = LmHead::separate}};

// Every part the device layer composes besides Llama's, on global layers: Gemma 3's sandwich
// norms, GeGLU, QK-norm, NeoX RoPE, embedding scale and soft-capping, with Qwen2's QKV bias.
inline constexpr ModelConfig engine_parts = [] {
    ModelConfig c = engine_llama;
    c.norm_eps = 1e-6;
    c.arch = {.family = Family::gemma3,
              .norms = NormPlacement::sandwich,
              .activation = GatedActivation::gelu_tanh,
              .rope_pairing = RopePairing::neox,
              .lm_head = LmHead::separate,
              .qk_norm = true,
              .qkv_bias = true,
              .scale_embedding = true,
              .query_pre_attn_scalar = 64,
              .final_logit_softcap = 5.0};
    return c;
}();

using EngineKv = PagedKv<16>;
using EngineScheduler = sched::Scheduler<sched::ContinuousBatching<8, 512>, sched::WholePrompt,
                                         sched::PreemptBySwap, sched::Fcfs>;
// Token eviction: 4 attention sinks and the 60 most recent slots, so the longer requests are
// compacted every step (the cache's retain_slots moving device bytes; RoPE positions and cache
// slots apart in the device plan).
using EvictingScheduler =
    sched::Scheduler<sched::ContinuousBatching<8, 512>, sched::WholePrompt, sched::PreemptBySwap,
                     sched::Fcfs, sched::AttentionSinks<4, 60>>;

}  // namespace tinfer::cuda_testing
