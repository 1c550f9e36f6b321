#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

#include <tinfer/core/dtype.hpp>

namespace tinfer {

// The parts in which Llama-family decoders differ, chosen at compile time: the one forward-pass
// template (model/llama.hpp) composes them, and a part a shape does not use compiles away.
// The defaults are Llama's.

// GGUF's general.architecture, which also prefixes the file's hyperparameter keys.
enum class Family : std::uint8_t { llama, gemma3, qwen2 };
// Pre-norm (RMSNorm before attention and FFN), or Gemma's sandwich: the sublayer's output is
// normalised again before it joins the residual stream.
enum class NormPlacement : std::uint8_t { pre, sandwich };
// The gated FFN's activation: silu(gate) * up (SwiGLU) or gelu_tanh(gate) * up (GeGLU).
enum class GatedActivation : std::uint8_t { silu, gelu_tanh };
// RoPE rotates adjacent pairs (x[2i], x[2i+1]) as GGUF's llama converter lays out Q and K, or
// NeoX halves (x[i], x[i + head_dim/2]).
enum class RopePairing : std::uint8_t { adjacent, neox };
// Whether the LM head is the token embedding (no output.weight in the file) or its own matrix.
enum class LmHead : std::uint8_t { tied, separate };
// The attention of one layer: every earlier position, or a sliding window of them.
enum class LayerKind : std::uint8_t { global, sliding };

constexpr char const* name_of(Family f) {
    switch (f) {
        case Family::llama:
            return "llama";
        case Family::gemma3:
            return "gemma3";
        case Family::qwen2:
            return "qwen2";
    }
    return "?";
}
constexpr char const* name_of(NormPlacement n) {
    return n == NormPlacement::pre ? "pre" : "sandwich";
}
constexpr char const* name_of(GatedActivation a) {
    return a == GatedActivation::silu ? "silu" : "gelu_tanh";
}
constexpr char const* name_of(RopePairing r) {
    return r == RopePairing::adjacent ? "adjacent" : "neox";
}
constexpr char const* name_of(LmHead h) {
    return h == LmHead::tied ? "tied" : "separate";
}
constexpr char const* name_of(LayerKind k) {
    return k == LayerKind::global ? "global" : "sliding";
}

struct Architecture {
    Family family = Family::llama;
    NormPlacement norms = NormPlacement::pre;
    GatedActivation activation = GatedActivation::silu;
    RopePairing rope_pairing = RopePairing::adjacent;
    LmHead lm_head = LmHead::tied;
    bool qk_norm = false;          // RMSNorm over head_dim on each Q and K head before RoPE
    bool qkv_bias = false;         // Q, K and V projections add a bias (Qwen2)
    bool scale_embedding = false;  // token embeddings times sqrt(hidden) (Gemma)
    // Scores are q.k / sqrt(query_pre_attn_scalar); 0 means head_dim (Gemma's
    // query_pre_attn_scalar; the usual 1/sqrt(head_dim) otherwise).
    int query_pre_attn_scalar = 0;
    double final_logit_softcap = 0;  // logits = cap * tanh(logits / cap); 0: off
    // Layer pattern: 0 gives every layer one kind (sliding where ModelConfig.sliding_window > 0,
    // as Mistral); N > 0 makes every N-th layer (N-1, 2N-1, ...) global and the rest sliding
    // (Gemma 3: 6).
    int global_every = 0;
    double rope_base_sliding = 0;  // RoPE base of sliding layers; 0: ModelConfig.rope_base

    friend constexpr bool operator==(Architecture const&, Architecture const&) = default;
};

// The shape of a decoder-only (Llama-family) model. A structural type, so a value of it is a
// template argument: `Llama<presets::smollm2_135m>` generates code for exactly that shape.
// Integers that are sizes stay `int` so arithmetic on them reads plainly.
struct ModelConfig {
    int layers = 0;
    int hidden = 0;
    int heads = 0;
    int kv_heads = 0;
    int head_dim = 0;
    int ffn = 0;
    int vocab = 0;
    int max_context = 0;
    double rope_base = 10000.0;
    double norm_eps = 1e-5;
    // The encoding the shape is quoted with (memory arithmetic, tensor-parallel block fit). A
    // file's matrices are bound each with its own GGUF type, whatever this says.
    DType weights = DType::f32;
    // No KV dtype: the KV codecs of K and V are chosen where the cache is made
    // (kv/codec_pairs.hpp), so one shape serves every codec pair.
    int sliding_window = 0;  // tokens a sliding layer sees, itself included; 0: none
    Architecture arch = {};

    // The attention of `layer` (see Architecture::global_every).
    constexpr LayerKind layer_kind(int layer) const {
        if (sliding_window == 0) return LayerKind::global;
        if (arch.global_every == 0) return LayerKind::sliding;
        return (layer + 1) % arch.global_every == 0 ? LayerKind::global : LayerKind::sliding;
    }
    constexpr bool has_layer_kind(LayerKind kind) const {
        for (int layer = 0; layer < layers; ++layer)
            if (layer_kind(layer) == kind) return true;
        return false;
    }
    constexpr int window_of(LayerKind kind) const {
        return kind == LayerKind::sliding ? sliding_window : 0;
    }
    constexpr double rope_base_of(LayerKind kind) const {
        return kind == LayerKind::sliding && arch.rope_base_sliding > 0 ? arch.rope_base_sliding
                                                                        : rope_base;
    }
    constexpr int query_scale_dim() const {
        return arch.query_pre_attn_scalar > 0 ? arch.query_pre_attn_scalar : head_dim;
    }

    // Query heads that share one KV head (1: MHA, heads: MQA).
    constexpr int group_size() const { return heads / kv_heads; }
    constexpr int q_width() const { return heads * head_dim; }
    constexpr int kv_width() const { return kv_heads * head_dim; }

    // KV cache bytes per token with K stored as `key` and V as `value` elements: every layer,
    // every KV head, every dimension. Element bytes only: a codec's per-vector scale is not
    // counted (kv::PagedKvCache::bytes_per_token is the exact figure of one codec pair).
    constexpr double kv_bytes_per_token(DType key, DType value) const {
        return static_cast<double>(layers) * kv_heads * head_dim *
               (kv_bytes_per_element(key) + kv_bytes_per_element(value));
    }
    // K and V of one dtype (f32: the host cache's default codec).
    constexpr double kv_bytes_per_token(DType kv = DType::f32) const {
        return kv_bytes_per_token(kv, kv);
    }
    constexpr double kv_bytes(std::int64_t tokens, DType kv = DType::f32) const {
        return kv_bytes_per_token(kv) * static_cast<double>(tokens);
    }

    friend constexpr bool operator==(ModelConfig const&, ModelConfig const&) = default;
};

inline std::ostream& operator<<(std::ostream& out, Architecture const& a) {
    out << "Architecture{family=" << name_of(a.family) << ", norms=" << name_of(a.norms)
        << ", activation=" << name_of(a.activation) << ", rope_pairing=" << name_of(a.rope_pairing)
        << ", lm_head=" << name_of(a.lm_head) << ", qk_norm=" << a.qk_norm
        << ", qkv_bias=" << a.qkv_bias << ", scale_embedding=" << a.scale_embedding
        << ", query_pre_attn_scalar=" << a.query_pre_attn_scalar
        << ", final_logit_softcap=" << a.final_logit_softcap << ", global_every=" << a.global_every
        << ", rope_base_sliding=" << a.rope_base_sliding << "}";
    return out;
}

inline std::ostream& operator<<(std::ostream& out, ModelConfig const& c) {
    out << "ModelConfig{layers=" << c.layers << ", hidden=" << c.hidden << ", heads=" << c.heads
        << ", kv_heads=" << c.kv_heads << ", head_dim=" << c.head_dim << ", ffn=" << c.ffn
        << ", vocab=" << c.vocab << ", max_context=" << c.max_context
        << ", rope_base=" << c.rope_base << ", norm_eps=" << c.norm_eps
        << ", weights=" << name_of(c.weights) << ", sliding_window=" << c.sliding_window
        << ", arch=" << c.arch << "}";
    return out;
}

}  // namespace tinfer
