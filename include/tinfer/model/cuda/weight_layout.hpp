#pragma once
// Where each of a Llama model's tensors goes in device memory: one arena, every tensor at a
// 256-byte aligned offset (cudaMalloc's own alignment, so any block struct or vector load the
// kernels make is aligned), quantized blocks exactly as the GGUF file stores them, and a tensor
// the model uses twice (a tied embedding / LM head) stored once. Plain C++ over the host
// ModelWeights views: decided and tested on the CPU (tests/cuda/step_plan_test.cpp), copied by
// DeviceLlama (device_llama.cuh).
#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/dtype.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/kernels/weight_matrix.hpp>
#include <tinfer/model/weights.hpp>

namespace tinfer::cuda {

inline constexpr std::size_t device_weight_alignment = 256;

// The encodings the device linear and embedding kernels read (kernels/cuda/weights.cuh).
constexpr bool is_device_weight_type(DType t) {
    return t == DType::q4_0 || t == DType::q4_1 || t == DType::q8_0 || t == DType::f16 ||
           t == DType::bf16 || t == DType::f32;
}

// Bytes of a whole matrix in its encoding; ConfigMismatch for one the device cannot read.
inline std::size_t device_matrix_bytes(kernels::WeightMatrix const& w, std::string const& name) {
    if (!is_device_weight_type(w.type))
        throw ConfigMismatch(name + " type: " + std::string(name_of(w.type)) +
                             ", which the device kernels do not read");
    std::size_t row = 0;
    switch (w.type) {
        case DType::q4_0:
            row = kernels::row_bytes<DType::q4_0>(w.cols);
            break;
        case DType::q4_1:
            row = kernels::row_bytes<DType::q4_1>(w.cols);
            break;
        case DType::q8_0:
            row = kernels::row_bytes<DType::q8_0>(w.cols);
            break;
        case DType::f16:
            row = kernels::row_bytes<DType::f16>(w.cols);
            break;
        case DType::bf16:
            row = kernels::row_bytes<DType::bf16>(w.cols);
            break;
        default:
            row = kernels::row_bytes<DType::f32>(w.cols);
            break;
    }
    if (w.cols % 32 != 0)
        throw ConfigMismatch(name + ": row length " + std::to_string(w.cols) +
                             " is not a multiple of 32, the device kernels' group");
    return row * static_cast<std::size_t>(w.rows);
}

// A run of host bytes and where it lands in the arena.
struct WeightSegment {
    std::byte const* host = nullptr;
    std::size_t bytes = 0;
    std::size_t offset = 0;
};

// A matrix in the arena: the host WeightMatrix with `data` replaced by an offset.
struct ArenaMatrix {
    DType type = DType::f32;
    int rows = 0;
    int cols = 0;
    std::size_t offset = 0;

    // The WeightMatrix the device kernels take, once the arena is at `base`.
    kernels::WeightMatrix at(std::byte const* base) const {
        return {type, rows, cols, base + offset};
    }
};

// A float vector in the arena (a norm's weights, a bias); count 0: the architecture has none.
struct ArenaVector {
    std::size_t offset = 0;
    std::size_t count = 0;

    std::span<float const> at(std::byte const* base) const {
        if (count == 0) return {};
        return {reinterpret_cast<float const*>(base + offset), count};
    }
};

template <ModelConfig Cfg>
struct DeviceWeightLayout {
    // Every tensor model::LayerWeights holds, each matrix in its own encoding (the layer
    // dispatches on each matrix's type, as the host's does).
    struct Layer {
        ArenaVector attention_norm;
        ArenaMatrix q, k, v;
        ArenaVector q_bias, k_bias, v_bias, q_norm, k_norm;
        ArenaMatrix output;
        ArenaVector post_attention_norm, ffn_norm;
        ArenaMatrix gate, up, down;
        ArenaVector post_ffn_norm;
    };
    ArenaMatrix token_embedding;
    ArenaMatrix output;  // the LM head: shares token_embedding's offset when tied
    ArenaVector output_norm;
    std::array<Layer, Cfg.layers> layers{};
    std::vector<WeightSegment> segments;  // what to copy, in arena order, each tensor once
    std::size_t bytes = 0;                // the arena's size

    static DeviceWeightLayout plan(model::ModelWeights<Cfg> const& w) {
        DeviceWeightLayout layout;
        layout.token_embedding = layout.matrix(w.token_embedding, "token_embd.weight");
        layout.output = layout.matrix(w.output, "output.weight");
        layout.output_norm = layout.vector(w.output_norm);
        for (std::size_t i = 0; i < layout.layers.size(); ++i) {
            model::LayerWeights const& from = w.layers[i];
            Layer& to = layout.layers[i];
            std::string const prefix = "blk." + std::to_string(i) + ".";
            to.attention_norm = layout.vector(from.attention_norm);
            to.q = layout.matrix(from.q, prefix + "attn_q.weight");
            to.k = layout.matrix(from.k, prefix + "attn_k.weight");
            to.v = layout.matrix(from.v, prefix + "attn_v.weight");
            to.q_bias = layout.vector(from.q_bias);
            to.k_bias = layout.vector(from.k_bias);
            to.v_bias = layout.vector(from.v_bias);
            to.q_norm = layout.vector(from.q_norm);
            to.k_norm = layout.vector(from.k_norm);
            to.output = layout.matrix(from.output, prefix + "attn_output.weight");
            to.post_attention_norm = layout.vector(from.post_attention_norm);
            to.ffn_norm = layout.vector(from.ffn_norm);
            to.gate = layout.matrix(from.gate, prefix + "ffn_gate.weight");
            to.up = layout.matrix(from.up, prefix + "ffn_up.weight");
            to.down = layout.matrix(from.down, prefix + "ffn_down.weight");
            to.post_ffn_norm = layout.vector(from.post_ffn_norm);
        }
        return layout;
    }

    // The model's weights as views into the arena at `base` (device memory, once uploaded): the
    // same ModelWeights the host layer reads, so the one decoder layer runs over either.
    model::ModelWeights<Cfg> on_device(std::byte const* base) const {
        model::ModelWeights<Cfg> w;
        w.token_embedding = token_embedding.at(base);
        w.output = output.at(base);
        w.output_norm = output_norm.at(base);
        for (std::size_t i = 0; i < layers.size(); ++i) {
            Layer const& from = layers[i];
            model::LayerWeights& to = w.layers[i];
            to.attention_norm = from.attention_norm.at(base);
            to.q = from.q.at(base);
            to.k = from.k.at(base);
            to.v = from.v.at(base);
            to.q_bias = from.q_bias.at(base);
            to.k_bias = from.k_bias.at(base);
            to.v_bias = from.v_bias.at(base);
            to.q_norm = from.q_norm.at(base);
            to.k_norm = from.k_norm.at(base);
            to.output = from.output.at(base);
            to.post_attention_norm = from.post_attention_norm.at(base);
            to.ffn_norm = from.ffn_norm.at(base);
            to.gate = from.gate.at(base);
            to.up = from.up.at(base);
            to.down = from.down.at(base);
            to.post_ffn_norm = from.post_ffn_norm.at(base);
        }
        return w;
    }

  private:
    // The offset of these host bytes in the arena, placing them if they are new.
    std::size_t place(std::byte const* host, std::size_t size) {
        for (WeightSegment const& s : segments)
            if (s.host == host && s.bytes == size) return s.offset;  // the same tensor again
        std::size_t const offset = (bytes + device_weight_alignment - 1) / device_weight_alignment *
                                   device_weight_alignment;
        segments.push_back({host, size, offset});
        bytes = offset + size;
        return offset;
    }
    ArenaMatrix matrix(kernels::WeightMatrix const& w, std::string const& name) {
        std::size_t const size = device_matrix_bytes(w, name);
        return {w.type, w.rows, w.cols, place(w.data, size)};
    }
    ArenaVector vector(std::span<float const> weights) {
        if (weights.empty()) return {};
        return {place(reinterpret_cast<std::byte const*>(weights.data()), weights.size_bytes()),
                weights.size()};
    }
};

}  // namespace tinfer::cuda
