#pragma once
// A GGUF file's model shape, read into a ModelConfig, and its comparison with a compile-time
// config field by field: a mismatch names the GGUF key, the file's value and the config's.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/format/gguf.hpp>

namespace tinfer::model {

// Architectures whose tensors and metadata follow llama.cpp's "llama" layout.
inline bool is_llama_architecture(std::string const& arch) {
    return arch == "llama";
}

inline std::string architecture_of(gguf::File const& file) {
    std::string const arch = file.get<std::string>("general.architecture");
    if (!is_llama_architecture(arch)) {
        throw ConfigMismatch("general.architecture: file has \"" + arch +
                             "\", Llama<Cfg> reads \"llama\"");
    }
    return arch;
}

// One hyperparameter: where the file keeps it, its value there, and the config's.
struct Hyperparameter {
    std::string key;
    std::string file_value;
    std::string config_value;
    bool matches;
};

namespace detail {
template <class T>
std::string text_of(T const& value) {
    std::ostringstream out;
    out.precision(9);
    out << value;
    return out.str();
}
// GGUF stores these constants as f32: the config's double matches when it rounds to the same.
inline Hyperparameter float_parameter(std::string key, double file, double config) {
    return {std::move(key), text_of(file), text_of(config),
            static_cast<float>(file) == static_cast<float>(config)};
}
inline Hyperparameter int_parameter(std::string key, std::int64_t file, int config) {
    return {std::move(key), text_of(file), text_of(config), file == config};
}
}  // namespace detail

// A tensor type in DType's spelling where it has one, so messages compare like with like.
inline std::string type_name(gguf::TensorType type) {
    auto const dtype = gguf::to_dtype(type);
    return std::string(dtype ? name_of(*dtype) : gguf::name_of(type));
}

// Every hyperparameter the forward pass depends on, as the file states it, against `config`.
// The weight type is that of the layers' matrices (blk.0.attn_q.weight).
inline std::vector<Hyperparameter> compare_hyperparameters(gguf::File const& file,
                                                           ModelConfig const& config) {
    std::string const arch = architecture_of(file);
    auto const key = [&](char const* suffix) { return arch + "." + suffix; };
    auto const integer = [&](std::string const& k) { return file.get<std::int64_t>(k); };

    std::int64_t const heads = integer(key("attention.head_count"));
    std::int64_t const hidden = integer(key("embedding_length"));
    std::vector<Hyperparameter> result;
    result.push_back(
        detail::int_parameter(key("block_count"), integer(key("block_count")), config.layers));
    result.push_back(detail::int_parameter(key("embedding_length"), hidden, config.hidden));
    result.push_back(detail::int_parameter(key("attention.head_count"), heads, config.heads));
    result.push_back(detail::int_parameter(
        key("attention.head_count_kv"),
        file.get_optional<std::int64_t>(key("attention.head_count_kv")).value_or(heads),
        config.kv_heads));
    // head_dim: stated as the key length, or implied by hidden / heads; RoPE must turn all of it.
    if (auto const key_length = file.get_optional<std::int64_t>(key("attention.key_length"))) {
        result.push_back(
            detail::int_parameter(key("attention.key_length"), *key_length, config.head_dim));
    } else {
        result.push_back(detail::int_parameter(
            key("embedding_length") + " / " + key("attention.head_count") + " (head_dim)",
            heads > 0 ? hidden / heads : 0, config.head_dim));
    }
    if (auto const rotated = file.get_optional<std::int64_t>(key("rope.dimension_count"))) {
        result.push_back(
            detail::int_parameter(key("rope.dimension_count"), *rotated, config.head_dim));
    }
    result.push_back(detail::int_parameter(key("feed_forward_length"),
                                           integer(key("feed_forward_length")), config.ffn));
    if (auto const vocab = file.get_optional<std::int64_t>(key("vocab_size"))) {
        result.push_back(detail::int_parameter(key("vocab_size"), *vocab, config.vocab));
    } else {
        auto const rows = static_cast<std::int64_t>(file.tensor("token_embd.weight").dims[1]);
        result.push_back(
            detail::int_parameter("token_embd.weight rows (vocab)", rows, config.vocab));
    }
    result.push_back(detail::int_parameter(key("context_length"), integer(key("context_length")),
                                           config.max_context));
    result.push_back(detail::float_parameter(
        key("rope.freq_base"), file.get_optional<double>(key("rope.freq_base")).value_or(10000.0),
        config.rope_base));
    result.push_back(detail::float_parameter(
        key("attention.layer_norm_rms_epsilon"),
        file.get<double>(key("attention.layer_norm_rms_epsilon")), config.norm_eps));
    result.push_back(detail::int_parameter(
        key("attention.sliding_window"),
        file.get_optional<std::int64_t>(key("attention.sliding_window")).value_or(0),
        config.sliding_window));
    gguf::TensorType const weight_type = file.tensor("blk.0.attn_q.weight").type;
    auto const dtype = gguf::to_dtype(weight_type);
    result.push_back({"blk.0.attn_q.weight type (weights)", type_name(weight_type),
                      std::string(name_of(config.weights)), dtype && *dtype == config.weights});
    return result;
}

// Raises ConfigMismatch listing every hyperparameter of the file that differs from `config`.
inline void check_hyperparameters(gguf::File const& file, ModelConfig const& config) {
    std::string message;
    for (Hyperparameter const& p : compare_hyperparameters(file, config)) {
        if (p.matches) continue;
        message += (message.empty() ? "" : "; ") + p.key + ": file has " + p.file_value +
                   ", config has " + p.config_value;
    }
    if (!message.empty()) throw ConfigMismatch(message);
}

inline bool matches_hyperparameters(gguf::File const& file, ModelConfig const& config) {
    for (Hyperparameter const& p : compare_hyperparameters(file, config)) {
        if (!p.matches) return false;
    }
    return true;
}

// The file's shape in words, for messages.
inline std::string describe_hyperparameters(gguf::File const& file) {
    std::string text;
    for (Hyperparameter const& p : compare_hyperparameters(file, ModelConfig{})) {
        text += (text.empty() ? "" : ", ") + p.key + " = " + p.file_value;
    }
    return text;
}

}  // namespace tinfer::model
