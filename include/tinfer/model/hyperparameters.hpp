#pragma once
// A GGUF file's model description, read into a ModelConfig (read_config), and its comparison
// with a compile-time config field by field: a mismatch names the GGUF key (or the tensor that
// shows the part), the file's value and the config's.
//
// What the file does not state, the architecture does: for "gemma3" the layer pattern (every
// 6th layer global), the sliding layers' RoPE base (10,000) and the parts (sandwich norms,
// GeGLU, QK-norm, NeoX RoPE, scaled embeddings) are llama.cpp's constants for that name. Parts a
// file shows by its tensors (QKV bias, QK-norm, a separate LM head) are read from the tensors.
// What tinfer does not implement (RoPE scaling, partial rotary, another architecture) is
// refused here, naming the key.
#include <charconv>
#include <cstdint>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include <tinfer/config/model_config.hpp>
#include <tinfer/core/error.hpp>
#include <tinfer/gguf/gguf.hpp>

namespace tinfer::model {

// Architectures (general.architecture) whose tensors and metadata tinfer composes.
inline constexpr Family supported_families[] = {Family::llama, Family::qwen2, Family::gemma3};

inline std::string supported_families_text() {
    std::string text;
    for (Family f : supported_families)
        text += (text.empty() ? "" : ", ") + std::string(name_of(f));
    return text;
}

// The file's general.architecture as a Family; another name raises ConfigMismatch listing the
// supported ones.
inline Family family_of(gguf::File const& file) {
    std::string const arch = file.get<std::string>("general.architecture");
    for (Family f : supported_families) {
        if (arch == name_of(f)) return f;
    }
    throw ConfigMismatch(
        "general.architecture: file has \"" + arch +
        "\", which tinfer does not compose (supported: " + supported_families_text() + ")");
}

// A tensor type in DType's spelling where it has one, so messages compare like with like.
inline std::string type_name(gguf::TensorType type) {
    auto const dtype = gguf::to_dtype(type);
    return std::string(dtype ? name_of(*dtype) : gguf::name_of(type));
}

namespace detail {

// Refuses what the file asks for that no part implements, naming the key.
inline void refuse_unimplemented(gguf::File const& file, std::string const& arch, int head_dim) {
    auto const key = [&](char const* suffix) { return arch + "." + suffix; };
    if (auto const type = file.get_optional<std::string>(key("rope.scaling.type"));
        type && *type != "none") {
        throw ConfigMismatch(key("rope.scaling.type") + ": file has \"" + *type +
                             "\"; tinfer implements no RoPE scaling (linear, YaRN, Llama 3)");
    }
    if (auto const factor = file.get_optional<double>(key("rope.scaling.factor"));
        factor && *factor != 0.0 && *factor != 1.0) {
        std::ostringstream text;
        text << *factor;
        throw ConfigMismatch(key("rope.scaling.factor") + ": file has " + text.str() +
                             "; tinfer implements no RoPE scaling");
    }
    if (file.find_tensor("rope_freqs.weight") != nullptr) {
        throw ConfigMismatch(
            "rope_freqs.weight: the file scales RoPE frequencies per dimension (Llama 3.1's "
            "rope_freqs); tinfer implements no RoPE scaling");
    }
    if (auto const rotated = file.get_optional<std::int64_t>(key("rope.dimension_count"));
        rotated && *rotated != head_dim) {
        throw ConfigMismatch(key("rope.dimension_count") + ": file has " +
                             std::to_string(*rotated) + ", head_dim is " +
                             std::to_string(head_dim) +
                             "; tinfer rotates whole heads (no partial rotary)");
    }
    if (auto const value_length = file.get_optional<std::int64_t>(key("attention.value_length"));
        value_length && *value_length != head_dim) {
        throw ConfigMismatch(key("attention.value_length") + ": file has " +
                             std::to_string(*value_length) + ", key_length is " +
                             std::to_string(head_dim) + "; tinfer needs them equal");
    }
}

// GGUF stores these constants as f32: the shortest decimal that reads back as the same float,
// so a file's 1e-6 reads as the config's 1e-6 rather than as 9.99999997e-07.
inline double shortest_decimal(double file_value) {
    char text[64];
    auto const [end, error] =
        std::to_chars(text, text + sizeof text, static_cast<float>(file_value));
    if (error != std::errc{}) return file_value;
    double value = file_value;
    std::from_chars(text, end, value);
    return value;
}

}  // namespace detail

// The file's model description as a ModelConfig. `weights` is the type of blk.0.attn_q.weight
// (the file's other matrices may differ; each is bound with its own type). The KV codecs are
// the cache's choice, not the file's (kv/codec_pairs.hpp).
inline ModelConfig read_config(gguf::File const& file) {
    Family const family = family_of(file);
    std::string const arch = name_of(family);
    auto const key = [&](char const* suffix) { return arch + "." + suffix; };
    auto const integer = [&](char const* suffix) {
        return static_cast<int>(file.get<std::int64_t>(key(suffix)));
    };
    ModelConfig c;
    c.arch.family = family;
    c.layers = integer("block_count");
    c.hidden = integer("embedding_length");
    c.heads = integer("attention.head_count");
    c.kv_heads = static_cast<int>(
        file.get_optional<std::int64_t>(key("attention.head_count_kv")).value_or(c.heads));
    c.head_dim = static_cast<int>(file.get_optional<std::int64_t>(key("attention.key_length"))
                                      .value_or(c.heads > 0 ? c.hidden / c.heads : 0));
    c.ffn = integer("feed_forward_length");
    if (auto const vocab = file.get_optional<std::int64_t>(key("vocab_size"))) {
        c.vocab = static_cast<int>(*vocab);
    } else {
        c.vocab = static_cast<int>(file.tensor("token_embd.weight").dims[1]);
    }
    c.max_context = integer("context_length");
    c.rope_base = detail::shortest_decimal(
        file.get_optional<double>(key("rope.freq_base")).value_or(10000.0));
    c.norm_eps =
        detail::shortest_decimal(file.get<double>(key("attention.layer_norm_rms_epsilon")));
    c.sliding_window = static_cast<int>(
        file.get_optional<std::int64_t>(key("attention.sliding_window")).value_or(0));
    if (gguf::TensorInfo const* q = file.find_tensor("blk.0.attn_q.weight")) {
        if (auto const dtype = gguf::to_dtype(q->type)) c.weights = *dtype;
    }
    detail::refuse_unimplemented(file, arch, c.head_dim);

    Architecture& a = c.arch;
    a.lm_head = file.find_tensor("output.weight") != nullptr ? LmHead::separate : LmHead::tied;
    a.qkv_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr;
    a.qk_norm = file.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
    a.final_logit_softcap = detail::shortest_decimal(
        file.get_optional<double>(key("final_logit_softcapping")).value_or(0.0));
    switch (family) {
        case Family::llama:
            break;
        case Family::qwen2:
            a.rope_pairing = RopePairing::neox;
            break;
        case Family::gemma3:
            // llama.cpp's gemma3 constants: the file states none of these.
            a.norms = NormPlacement::sandwich;
            a.activation = GatedActivation::gelu_tanh;
            a.rope_pairing = RopePairing::neox;
            a.scale_embedding = true;
            a.query_pre_attn_scalar = c.head_dim;
            if (c.sliding_window > 0) {
                a.global_every = 6;
                a.rope_base_sliding = 10000.0;
            }
            break;
    }
    return c;
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
    if constexpr (std::is_same_v<T, bool>) {
        out << (value ? "true" : "false");
    } else {
        out << value;
    }
    return out.str();
}
// GGUF stores these constants as f32: the config's double matches when it rounds to the same.
inline Hyperparameter float_parameter(std::string key, double file, double config) {
    return {std::move(key), text_of(file), text_of(config),
            static_cast<float>(file) == static_cast<float>(config)};
}
template <class T>
Hyperparameter exact_parameter(std::string key, T const& file, T const& config) {
    return {std::move(key), text_of(file), text_of(config), file == config};
}
template <class E>
Hyperparameter named_parameter(std::string key, E file, E config) {
    return {std::move(key), name_of(file), name_of(config), file == config};
}
}  // namespace detail

// Every hyperparameter and architectural part the forward pass depends on, as the file states
// it (or its architecture implies it), against `config`. Weight types are not compared: every
// matrix is bound with its own.
inline std::vector<Hyperparameter> compare_hyperparameters(gguf::File const& file,
                                                           ModelConfig const& config) {
    std::string const arch = file.get<std::string>("general.architecture");
    if (arch != name_of(config.arch.family)) {
        return {{"general.architecture", "\"" + arch + "\"",
                 "\"" + std::string(name_of(config.arch.family)) + "\"", false}};
    }
    ModelConfig const f = read_config(file);
    auto const key = [&](char const* suffix) { return arch + "." + suffix; };
    using detail::exact_parameter, detail::float_parameter, detail::named_parameter;
    std::vector<Hyperparameter> result;
    result.push_back(exact_parameter(key("block_count"), f.layers, config.layers));
    result.push_back(exact_parameter(key("embedding_length"), f.hidden, config.hidden));
    result.push_back(exact_parameter(key("attention.head_count"), f.heads, config.heads));
    result.push_back(exact_parameter(key("attention.head_count_kv"), f.kv_heads, config.kv_heads));
    result.push_back(exact_parameter(
        file.get_optional<std::int64_t>(key("attention.key_length"))
            ? key("attention.key_length")
            : key("embedding_length") + " / " + key("attention.head_count") + " (head_dim)",
        f.head_dim, config.head_dim));
    result.push_back(exact_parameter(key("feed_forward_length"), f.ffn, config.ffn));
    result.push_back(exact_parameter(file.get_optional<std::int64_t>(key("vocab_size"))
                                         ? key("vocab_size")
                                         : std::string("token_embd.weight rows (vocab)"),
                                     f.vocab, config.vocab));
    result.push_back(exact_parameter(key("context_length"), f.max_context, config.max_context));
    result.push_back(float_parameter(key("rope.freq_base"), f.rope_base, config.rope_base));
    result.push_back(
        float_parameter(key("attention.layer_norm_rms_epsilon"), f.norm_eps, config.norm_eps));
    result.push_back(
        exact_parameter(key("attention.sliding_window"), f.sliding_window, config.sliding_window));
    Architecture const& a = f.arch;
    Architecture const& b = config.arch;
    result.push_back(named_parameter("output.weight (lm_head)", a.lm_head, b.lm_head));
    result.push_back(exact_parameter("blk.0.attn_q.bias (qkv_bias)", a.qkv_bias, b.qkv_bias));
    result.push_back(exact_parameter("blk.0.attn_q_norm.weight (qk_norm)", a.qk_norm, b.qk_norm));
    result.push_back(float_parameter(key("final_logit_softcapping"), a.final_logit_softcap,
                                     b.final_logit_softcap));
    // Implied by the architecture's name.
    std::string const implied = " (" + arch + ")";
    result.push_back(named_parameter("norms" + implied, a.norms, b.norms));
    result.push_back(named_parameter("activation" + implied, a.activation, b.activation));
    result.push_back(named_parameter("rope_pairing" + implied, a.rope_pairing, b.rope_pairing));
    result.push_back(
        exact_parameter("scale_embedding" + implied, a.scale_embedding, b.scale_embedding));
    result.push_back(exact_parameter("query_pre_attn_scalar" + implied, f.query_scale_dim(),
                                     config.query_scale_dim()));
    result.push_back(exact_parameter("global_every" + implied, a.global_every, b.global_every));
    // Only the sliding layers' base matters, and only where some layer slides.
    bool const slides = f.has_layer_kind(LayerKind::sliding);
    result.push_back(float_parameter(
        "rope_base_sliding" + implied, slides ? f.rope_base_of(LayerKind::sliding) : 0.0,
        config.has_layer_kind(LayerKind::sliding) ? config.rope_base_of(LayerKind::sliding) : 0.0));
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

// A config as the C++ a researcher pastes to compile that shape (designated initializers,
// every field that differs from ModelConfig's defaults).
inline std::string cpp_initializer(ModelConfig const& c, std::string const& name = "my_model") {
    std::ostringstream out;
    out.precision(9);
    ModelConfig const d{};
    out << "constexpr tinfer::ModelConfig " << name << "{.layers = " << c.layers
        << ", .hidden = " << c.hidden << ", .heads = " << c.heads << ", .kv_heads = " << c.kv_heads
        << ", .head_dim = " << c.head_dim << ", .ffn = " << c.ffn << ", .vocab = " << c.vocab
        << ", .max_context = " << c.max_context << ", .rope_base = " << c.rope_base
        << ", .norm_eps = " << c.norm_eps << ", .weights = tinfer::DType::" << name_of(c.weights);
    if (c.sliding_window != d.sliding_window) out << ", .sliding_window = " << c.sliding_window;
    Architecture const& a = c.arch;
    Architecture const& da = d.arch;
    std::vector<std::string> parts;
    auto const part = [&](bool differs, std::string text) {
        if (differs) parts.push_back(std::move(text));
    };
    auto const number = [](double v) {
        std::ostringstream t;
        t.precision(9);
        t << v;
        std::string s = t.str();
        return s.find_first_of(".e") == std::string::npos ? s + ".0" : s;
    };
    part(a.family != da.family, ".family = tinfer::Family::" + std::string(name_of(a.family)));
    part(a.norms != da.norms, ".norms = tinfer::NormPlacement::" + std::string(name_of(a.norms)));
    part(a.activation != da.activation,
         ".activation = tinfer::GatedActivation::" + std::string(name_of(a.activation)));
    part(a.rope_pairing != da.rope_pairing,
         ".rope_pairing = tinfer::RopePairing::" + std::string(name_of(a.rope_pairing)));
    part(a.lm_head != da.lm_head, ".lm_head = tinfer::LmHead::" + std::string(name_of(a.lm_head)));
    part(a.qk_norm != da.qk_norm, ".qk_norm = true");
    part(a.qkv_bias != da.qkv_bias, ".qkv_bias = true");
    part(a.scale_embedding != da.scale_embedding, ".scale_embedding = true");
    part(a.query_pre_attn_scalar != da.query_pre_attn_scalar,
         ".query_pre_attn_scalar = " + std::to_string(a.query_pre_attn_scalar));
    part(a.final_logit_softcap != da.final_logit_softcap,
         ".final_logit_softcap = " + number(a.final_logit_softcap));
    part(a.global_every != da.global_every, ".global_every = " + std::to_string(a.global_every));
    part(a.rope_base_sliding != da.rope_base_sliding,
         ".rope_base_sliding = " + number(a.rope_base_sliding));
    if (!parts.empty()) {
        out << ", .arch = {";
        for (std::size_t i = 0; i < parts.size(); ++i) out << (i ? ", " : "") << parts[i];
        out << "}";
    }
    out << "};";
    return out.str();
}

// The file's shape in words, for messages: the C++ that would compile it.
inline std::string describe_hyperparameters(gguf::File const& file) {
    return cpp_initializer(read_config(file));
}

}  // namespace tinfer::model
