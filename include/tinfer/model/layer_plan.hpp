#pragma once
// LayerPlan<Cfg, Kind>: the parts one kind of decoder layer of Cfg is composed of, as
// compile-time values and types. The decoder layer (model/decoder_layer.hpp) is written once
// over a plan; a part whose flag is off is an `if constexpr` branch never instantiated, so a
// Llama layer carries no trace of Gemma's parts. A model has at most two plans, one per
// LayerKind it uses.
#include <type_traits>

#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>
#include <tinfer/kernels/activation_math.hpp>
#include <tinfer/kernels/attention.hpp>

namespace tinfer::model {

template <ModelConfig Cfg, LayerKind Kind>
requires ModelShape<Cfg>
struct LayerPlan {
    static constexpr LayerKind kind = Kind;
    static constexpr int window = Cfg.window_of(Kind);  // 0: every earlier position
    static constexpr double rope_base = Cfg.rope_base_of(Kind);
    static constexpr RopePairing rope_pairing = Cfg.arch.rope_pairing;
    static constexpr bool qkv_bias = Cfg.arch.qkv_bias;
    static constexpr bool qk_norm = Cfg.arch.qk_norm;
    // Sandwich norms: the attention's and FFN's outputs are normalised before the residual add.
    static constexpr bool post_norms = Cfg.arch.norms == NormPlacement::sandwich;
    static constexpr GatedActivation activation = Cfg.arch.activation;
    using Gate = std::conditional_t<Cfg.arch.activation == GatedActivation::silu, kernels::SiluGate,
                                    kernels::GeluTanhGate>;
    using Attention =
        kernels::Attention<Cfg.head_dim, Cfg.group_size(), window, Cfg.query_scale_dim()>;
};

// The plans a model instantiates: the kind of its first layer, and the other kind only where
// some layer has it.
template <ModelConfig Cfg>
inline constexpr bool uses_two_layer_kinds =
    Cfg.has_layer_kind(LayerKind::global) && Cfg.has_layer_kind(LayerKind::sliding);

}  // namespace tinfer::model
