#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>

#include <tinfer/core/dtype.hpp>

namespace tinfer {

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
    DType weights = DType::f32;
    DType kv = DType::f32;
    int sliding_window = 0;  // 0: full attention

    // Query heads that share one KV head (1: MHA, heads: MQA).
    constexpr int group_size() const { return heads / kv_heads; }
    constexpr int q_width() const { return heads * head_dim; }
    constexpr int kv_width() const { return kv_heads * head_dim; }

    // KV cache bytes per token: K and V, every layer, every KV head, every dimension.
    constexpr double kv_bytes_per_token() const {
        return 2.0 * layers * kv_heads * head_dim * kv_bytes_per_element(kv);
    }
    constexpr double kv_bytes(std::int64_t tokens) const {
        return kv_bytes_per_token() * static_cast<double>(tokens);
    }

    friend constexpr bool operator==(ModelConfig const&, ModelConfig const&) = default;
};

// Same shape, another KV dtype: presets are quoted with fp16 KV, and FP8 halves them.
constexpr ModelConfig with_kv(ModelConfig c, DType kv) {
    c.kv = kv;
    return c;
}

inline std::ostream& operator<<(std::ostream& out, ModelConfig const& c) {
    out << "ModelConfig{layers=" << c.layers << ", hidden=" << c.hidden << ", heads=" << c.heads
        << ", kv_heads=" << c.kv_heads << ", head_dim=" << c.head_dim << ", ffn=" << c.ffn
        << ", vocab=" << c.vocab << ", max_context=" << c.max_context
        << ", rope_base=" << c.rope_base << ", norm_eps=" << c.norm_eps
        << ", weights=" << name_of(c.weights) << ", kv=" << name_of(c.kv)
        << ", sliding_window=" << c.sliding_window << "}";
    return out;
}

}  // namespace tinfer
