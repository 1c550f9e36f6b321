#pragma once
// The decoder layer, written once: the sequence of operations every Llama-family layer runs,
// over a backend's set of ops (model/host_ops.hpp on the CPU) and a LayerPlan naming its parts.
// A backend supplies each op for the whole step's rows; what a plan leaves out is never called.
//
//   x ─┬─ norm ─ Q K V (+bias) ─ [QK-norm] ─ RoPE ─ attention ─ O ─ [post-norm] ─┐
//      └──────────────────────────────── + ◄────────────────────────────────────┘
//   x ─┬─ norm ─ act(gate) * up ─ down ─ [post-norm] ─┐
//      └──────────────────── + ◄──────────────────────┘
//
// Each op returns false when it failed (the backend keeps the error, raised after the step).
// run_decoder_stack runs a range of layers, each with the plan of its kind: the loop both
// backends' forward passes share (model/llama.hpp on the CPU, model/cuda/cuda_ops.cuh on a GPU).
#include <concepts>
#include <cstddef>
#include <span>

#include <tinfer/model/layer_plan.hpp>
#include <tinfer/model/weights.hpp>

namespace tinfer::model {

// Which activation a matrix product reads: the normalised residual, the attention's output or
// the gated FFN's hidden features.
enum class Activations { normed, attended, ffn_hidden };

// What a backend's ops provide to run_decoder_layer (checked where a layer is run).
template <class Ops, class Plan>
concept DecoderLayerOps = requires(Ops& ops, LayerWeights const& w, std::span<float const> v,
                                   kernels::WeightMatrix const& m, int layer) {
    ops.normalize(v);
    ops.project_qkv(w);
    ops.template position_queries_and_keys<Plan>(w);
    { ops.template attend<Plan>(layer) } -> std::same_as<bool>;
    { ops.template add_to_residual<Plan>(m, Activations::attended, v) } -> std::same_as<bool>;
    ops.template gated_ffn<Plan>(w.gate, w.up);
};

template <class Plan, class Ops>
requires DecoderLayerOps<Ops, Plan>
void run_decoder_layer(Ops& ops, LayerWeights const& w, int layer) {
    ops.normalize(w.attention_norm);
    // Backends with caches to warm ask for the layer's cached keys and values here, to arrive
    // while the projections stream weights (model/host_ops.hpp).
    if constexpr (requires { ops.template prefetch_attention<Plan>(layer); })
        ops.template prefetch_attention<Plan>(layer);
    ops.project_qkv(w);
    ops.template position_queries_and_keys<Plan>(w);
    if (!ops.template attend<Plan>(layer)) return;
    if (!ops.template add_to_residual<Plan>(w.output, Activations::attended, w.post_attention_norm))
        return;
    ops.normalize(w.ffn_norm);
    ops.template gated_ffn<Plan>(w.gate, w.up);
    ops.template add_to_residual<Plan>(w.down, Activations::ffn_hidden, w.post_ffn_norm);
}

// Layers [first, end) of a model of shape Cfg whose layer plans are made for Local (Cfg, or one
// tensor-parallel rank's shard of it); `layer - first` indexes the cache, which holds this
// process's layers from `first` on. Stops at the first failed op.
template <ModelConfig Cfg, ModelConfig Local, class Ops>
void run_decoder_stack(Ops& ops, std::span<LayerWeights const> weights, int first, int end) {
    using GlobalLayer = LayerPlan<Local, LayerKind::global>;
    using SlidingLayer = LayerPlan<Local, LayerKind::sliding>;
    using FirstLayer = LayerPlan<Local, Cfg.layer_kind(0)>;
    for (int layer = first; layer < end && !ops.failed(); ++layer) {
        LayerWeights const& w = weights[static_cast<std::size_t>(layer)];
        int const cached_layer = layer - first;
        if constexpr (uses_two_layer_kinds<Local>) {
            if (Cfg.layer_kind(layer) == LayerKind::sliding) {
                run_decoder_layer<SlidingLayer>(ops, w, cached_layer);
            } else {
                run_decoder_layer<GlobalLayer>(ops, w, cached_layer);
            }
        } else {
            run_decoder_layer<FirstLayer>(ops, w, cached_layer);
        }
    }
}

}  // namespace tinfer::model
