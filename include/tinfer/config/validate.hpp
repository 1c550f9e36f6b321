#pragma once
#include <concepts>
#include <type_traits>

#include <tinfer/config/model_config.hpp>

namespace tinfer {

// Each check is a class template over the offending values, so the compiler's "required from"
// line shows the value next to the static_assert message naming the parameter.
namespace config_check {

template <int layers>
struct Layers {
    static_assert(layers > 0, "ModelConfig.layers must be positive");
};
template <int hidden>
struct Hidden {
    static_assert(hidden > 0, "ModelConfig.hidden must be positive");
};
template <int heads, int kv_heads>
struct Heads {
    static_assert(heads > 0, "ModelConfig.heads must be positive");
    static_assert(kv_heads > 0, "ModelConfig.kv_heads must be positive");
    static_assert(kv_heads <= 0 || heads % kv_heads == 0,
                  "ModelConfig.heads must be divisible by ModelConfig.kv_heads");
};
template <int head_dim>
struct HeadDim {
    static_assert(head_dim > 0, "ModelConfig.head_dim must be positive");
    static_assert(head_dim % 2 == 0, "ModelConfig.head_dim must be even (RoPE rotates pairs)");
    static_assert(head_dim <= 256, "ModelConfig.head_dim must be at most 256");
};
template <int ffn, int vocab, int max_context>
struct Sizes {
    static_assert(ffn > 0, "ModelConfig.ffn must be positive");
    static_assert(vocab > 0, "ModelConfig.vocab must be positive");
    static_assert(max_context > 0, "ModelConfig.max_context must be positive");
};
template <DType weights>
struct WeightType {
    static_assert(weights != DType::fp8_e4m3 && weights != DType::fp8_e5m2 &&
                      weights != DType::int8 && weights != DType::int4,
                  "ModelConfig.weights must be f32, f16, bf16 or a GGUF block format");
};
template <int window>
struct Window {
    static_assert(window >= 0, "ModelConfig.sliding_window must be 0 (off) or positive");
};

template <int window, int global_every>
struct LayerPattern {
    static_assert(global_every >= 0,
                  "ModelConfig.arch.global_every must be 0 (one kind) or positive");
    static_assert(global_every == 0 || window > 0,
                  "ModelConfig.arch.global_every needs ModelConfig.sliding_window > 0: the layers "
                  "between global ones slide");
};
template <int query_pre_attn_scalar, bool softcap_ok, bool rope_sliding_ok>
struct ArchitectureConstants {
    static_assert(query_pre_attn_scalar >= 0,
                  "ModelConfig.arch.query_pre_attn_scalar must be 0 (head_dim) or positive");
    static_assert(softcap_ok, "ModelConfig.arch.final_logit_softcap must be 0 (off) or positive");
    static_assert(rope_sliding_ok,
                  "ModelConfig.arch.rope_base_sliding must be 0 (rope_base) or positive");
};

}  // namespace config_check

// Instantiates every check for C; a bad field stops compilation with its own message.
template <ModelConfig C>
consteval bool check_model_config() {
    (void)sizeof(config_check::Layers<C.layers>);
    (void)sizeof(config_check::Hidden<C.hidden>);
    (void)sizeof(config_check::Heads<C.heads, C.kv_heads>);
    (void)sizeof(config_check::HeadDim<C.head_dim>);
    (void)sizeof(config_check::Sizes<C.ffn, C.vocab, C.max_context>);
    (void)sizeof(config_check::WeightType<C.weights>);
    (void)sizeof(config_check::Window<C.sliding_window>);
    (void)sizeof(config_check::LayerPattern<C.sliding_window, C.arch.global_every>);
    (void)sizeof(config_check::ArchitectureConstants<C.arch.query_pre_attn_scalar,
                                                     C.arch.final_logit_softcap >= 0,
                                                     C.arch.rope_base_sliding >= 0>);
    return true;
}

// The concept every public entry point that takes a shape requires.
template <auto C>
concept ModelShape = std::same_as<std::remove_cvref_t<decltype(C)>, ModelConfig> &&
    check_model_config<C>();

}  // namespace tinfer
