#pragma once
// A Llama model's weights as views into the GGUF mapping: nothing is copied or converted at
// bind time, and binding checks every tensor's encoding and shape against the config.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include <tinfer/config/model_config.hpp>
#include <tinfer/config/validate.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/kernels/weight_matrix.hpp>
#include <tinfer/model/hyperparameters.hpp>

namespace tinfer::model {

// One decoder layer's tensors. The spans a shape's architecture does not use stay empty.
struct LayerWeights {
    std::span<float const> attention_norm;          // [hidden]
    kernels::WeightMatrix q;                        // [heads * head_dim][hidden]
    kernels::WeightMatrix k;                        // [kv_heads * head_dim][hidden]
    kernels::WeightMatrix v;                        // [kv_heads * head_dim][hidden]
    std::span<float const> q_bias, k_bias, v_bias;  // [rows of q, k, v] (qkv_bias)
    std::span<float const> q_norm, k_norm;          // [head_dim] (qk_norm)
    kernels::WeightMatrix output;                   // [hidden][heads * head_dim]
    std::span<float const> post_attention_norm;     // [hidden] (sandwich norms)
    std::span<float const> ffn_norm;                // [hidden]
    kernels::WeightMatrix gate;                     // [ffn][hidden]
    kernels::WeightMatrix up;                       // [ffn][hidden]
    kernels::WeightMatrix down;                     // [hidden][ffn]
    std::span<float const> post_ffn_norm;           // [hidden] (sandwich norms)
};

namespace detail {

inline std::string dims_text(std::uint64_t ne0, std::uint64_t ne1) {
    return "[" + std::to_string(ne0) + ", " + std::to_string(ne1) + "]";
}

inline std::string dims_text(gguf::TensorInfo const& info) {
    std::string text = "[";
    for (int i = 0; i < info.n_dims; ++i) text += (i ? ", " : "") + std::to_string(info.dims[i]);
    return text + "]";
}

inline gguf::TensorInfo const& require_tensor(gguf::File const& file, std::string const& name) {
    gguf::TensorInfo const* info = file.find_tensor(name);
    if (info == nullptr) throw ConfigMismatch(name + ": missing from the file");
    return *info;
}

// The tensor's dims must be exactly [ne0, ne1] (ne1 = 1: a vector).
inline void require_dims(gguf::TensorInfo const& info, std::uint64_t ne0, std::uint64_t ne1) {
    int const n_dims = ne1 == 1 ? 1 : 2;
    bool const same = info.dims[0] == ne0 && info.dims[1] == ne1 && info.dims[2] == 1 &&
                      info.dims[3] == 1 &&
                      (info.n_dims == n_dims || (n_dims == 1 && info.n_dims == 2));
    if (!same) {
        throw ConfigMismatch(info.name + " dims: file has " + dims_text(info) + ", config has " +
                             (n_dims == 1 ? "[" + std::to_string(ne0) + "]" : dims_text(ne0, ne1)));
    }
}

// A matrix in whichever encoding the file chose, if the host kernels take it: each matrix
// carries its own type, and the forward pass runs the kernel compiled for it.
inline kernels::WeightMatrix bind_matrix(gguf::TensorInfo const& info, int ne0, int ne1) {
    auto const dtype = gguf::to_dtype(info.type);
    bool supported = false;
    if (dtype) {
        try {
            kernels::dispatch_weight_type(*dtype, [&]<DType>() { supported = true; });
        } catch (Error const&) {
            supported = false;
        }
    }
    if (!supported) {
        throw ConfigMismatch(info.name + " type: file has " + type_name(info.type) +
                             ", which the host kernels do not read");
    }
    require_dims(info, static_cast<std::uint64_t>(ne0), static_cast<std::uint64_t>(ne1));
    if (ne0 % kernels::dispatch_weight_type(
                  *dtype, []<DType T>() { return kernels::block_elements<T>(); }) !=
        0) {
        throw ConfigMismatch(info.name + ": row length " + std::to_string(ne0) +
                             " is not a whole number of " + std::string(name_of(*dtype)) +
                             " blocks");
    }
    return {*dtype, ne1, ne0, info.data.data()};
}

inline kernels::WeightMatrix bind_matrix(gguf::File const& file, std::string const& name, int ne0,
                                         int ne1) {
    return bind_matrix(require_tensor(file, name), ne0, ne1);
}

// An f32 vector (a norm's weight or a bias) of `width` elements.
inline std::span<float const> bind_vector(gguf::File const& file, std::string const& name,
                                          int width) {
    gguf::TensorInfo const& info = require_tensor(file, name);
    if (info.type != gguf::TensorType::f32) {
        throw ConfigMismatch(name + " type: file has " + type_name(info.type) + ", config has f32");
    }
    require_dims(info, static_cast<std::uint64_t>(width), 1);
    return {reinterpret_cast<float const*>(info.data.data()), static_cast<std::size_t>(width)};
}

// A tensor the architecture does not use must not be in the file: its presence means a model
// the config does not describe.
inline void require_absent(gguf::File const& file, std::string const& name, char const* part) {
    if (file.find_tensor(name) != nullptr) {
        throw ConfigMismatch(name + ": present in the file, the config has no " + part);
    }
}

}  // namespace detail

template <ModelConfig Cfg>
requires ModelShape<Cfg>
struct ModelWeights {
    kernels::WeightMatrix token_embedding;  // [vocab][hidden], the file's encoding
    kernels::WeightMatrix output;        // [vocab][hidden]: output.weight, or the embedding (tied)
    std::span<float const> output_norm;  // [hidden]
    std::array<LayerWeights, Cfg.layers> layers;
    // The file mapping the tensors view (gguf::File::mapped_bytes), empty if they view memory
    // the caller owns.
    std::span<std::byte const> file_mapping;

    // Checks every hyperparameter and every tensor against Cfg (ConfigMismatch naming the
    // field, the file's value and the config's) and views the tensors in place: the File's
    // mapping must outlive the weights.
    static ModelWeights bind(gguf::File const& file) {
        check_hyperparameters(file, Cfg);
        constexpr Architecture arch = Cfg.arch;
        ModelWeights w;
        w.file_mapping = file.mapped_bytes();
        w.token_embedding = detail::bind_matrix(file, "token_embd.weight", Cfg.hidden, Cfg.vocab);
        if constexpr (arch.lm_head == LmHead::separate) {
            w.output = detail::bind_matrix(file, "output.weight", Cfg.hidden, Cfg.vocab);
        } else {
            detail::require_absent(file, "output.weight", "separate LM head (lm_head is tied)");
            w.output = w.token_embedding;
        }
        w.output_norm = detail::bind_vector(file, "output_norm.weight", Cfg.hidden);
        for (int i = 0; i < Cfg.layers; ++i) {
            std::string const prefix = "blk." + std::to_string(i) + ".";
            auto const matrix = [&](char const* name, int ne0, int ne1) {
                return detail::bind_matrix(file, prefix + name, ne0, ne1);
            };
            auto const vector = [&](char const* name, int width) {
                return detail::bind_vector(file, prefix + name, width);
            };
            auto const optional_part = [&](bool used, char const* name, int width,
                                           char const* part) -> std::span<float const> {
                if (used) return vector(name, width);
                detail::require_absent(file, prefix + name, part);
                return {};
            };
            LayerWeights& layer = w.layers[static_cast<std::size_t>(i)];
            layer.attention_norm = vector("attn_norm.weight", Cfg.hidden);
            layer.q = matrix("attn_q.weight", Cfg.hidden, Cfg.q_width());
            layer.k = matrix("attn_k.weight", Cfg.hidden, Cfg.kv_width());
            layer.v = matrix("attn_v.weight", Cfg.hidden, Cfg.kv_width());
            layer.q_bias = optional_part(arch.qkv_bias, "attn_q.bias", Cfg.q_width(), "qkv_bias");
            layer.k_bias = optional_part(arch.qkv_bias, "attn_k.bias", Cfg.kv_width(), "qkv_bias");
            layer.v_bias = optional_part(arch.qkv_bias, "attn_v.bias", Cfg.kv_width(), "qkv_bias");
            layer.q_norm =
                optional_part(arch.qk_norm, "attn_q_norm.weight", Cfg.head_dim, "qk_norm");
            layer.k_norm =
                optional_part(arch.qk_norm, "attn_k_norm.weight", Cfg.head_dim, "qk_norm");
            layer.output = matrix("attn_output.weight", Cfg.q_width(), Cfg.hidden);
            bool const sandwich = arch.norms == NormPlacement::sandwich;
            layer.post_attention_norm =
                optional_part(sandwich, "post_attention_norm.weight", Cfg.hidden, "sandwich norms");
            layer.ffn_norm = vector("ffn_norm.weight", Cfg.hidden);
            layer.gate = matrix("ffn_gate.weight", Cfg.hidden, Cfg.ffn);
            layer.up = matrix("ffn_up.weight", Cfg.hidden, Cfg.ffn);
            layer.down = matrix("ffn_down.weight", Cfg.ffn, Cfg.hidden);
            layer.post_ffn_norm =
                optional_part(sandwich, "post_ffw_norm.weight", Cfg.hidden, "sandwich norms");
        }
        // A file with more layers than the config would have failed block_count already; a
        // tensor beyond them would mean a file this reader does not understand.
        if (file.find_tensor("blk." + std::to_string(Cfg.layers) + ".attn_q.weight") != nullptr) {
            throw ConfigMismatch("blk." + std::to_string(Cfg.layers) +
                                 ".attn_q.weight: present in the file, config has " +
                                 std::to_string(Cfg.layers) + " layers");
        }
        return w;
    }
};

}  // namespace tinfer::model
