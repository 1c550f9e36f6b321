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

template <ModelConfig Cfg>
struct DeviceWeightLayout {
    struct Layer {
        std::size_t attention_norm = 0;  // [hidden] f32
        ArenaMatrix q, k, v, output;
        std::size_t ffn_norm = 0;  // [hidden] f32
        ArenaMatrix gate, up, down;
    };
    ArenaMatrix token_embedding;
    ArenaMatrix output;  // the LM head: shares token_embedding's offset when tied
    std::size_t output_norm = 0;
    std::array<Layer, Cfg.layers> layers{};
    std::vector<WeightSegment> segments;  // what to copy, in arena order, each tensor once
    std::size_t bytes = 0;                // the arena's size

    static DeviceWeightLayout plan(model::ModelWeights<Cfg> const& w) {
        DeviceWeightLayout layout;
        layout.token_embedding = layout.matrix(w.token_embedding, "token_embd.weight");
        layout.output = layout.matrix(w.output, "output.weight");
        layout.output_norm = layout.norm(w.output_norm);
        for (std::size_t i = 0; i < layout.layers.size(); ++i) {
            model::LayerWeights const& from = w.layers[i];
            Layer& to = layout.layers[i];
            std::string const prefix = "blk." + std::to_string(i) + ".";
            to.attention_norm = layout.norm(from.attention_norm);
            to.q = layout.layer_matrix(from.q, prefix + "attn_q.weight");
            to.k = layout.layer_matrix(from.k, prefix + "attn_k.weight");
            to.v = layout.layer_matrix(from.v, prefix + "attn_v.weight");
            to.output = layout.layer_matrix(from.output, prefix + "attn_output.weight");
            to.ffn_norm = layout.norm(from.ffn_norm);
            to.gate = layout.layer_matrix(from.gate, prefix + "ffn_gate.weight");
            to.up = layout.layer_matrix(from.up, prefix + "ffn_up.weight");
            to.down = layout.layer_matrix(from.down, prefix + "ffn_down.weight");
        }
        return layout;
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
    // The device layer runs one weight type, Cfg.weights, for every layer matrix (until it is
    // rebuilt on model/decoder_layer.hpp): a file that mixes types is refused, naming the tensor.
    ArenaMatrix layer_matrix(kernels::WeightMatrix const& w, std::string const& name) {
        if (w.type != Cfg.weights) {
            throw ConfigMismatch(name + " type: file has " + std::string(name_of(w.type)) +
                                 ", cuda::DeviceLlama runs every layer matrix as Cfg.weights = " +
                                 std::string(name_of(Cfg.weights)));
        }
        return matrix(w, name);
    }
    std::size_t norm(std::span<float const> weights) {
        return place(reinterpret_cast<std::byte const*>(weights.data()), weights.size_bytes());
    }
};

}  // namespace tinfer::cuda
