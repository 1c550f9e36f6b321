#pragma once
// Builds the tokenizer and chat template from a GGUF file's tokenizer.* metadata.
#include <cstdint>
#include <string>

#include <tinfer/core/error.hpp>
#include <tinfer/format/chat_template.hpp>
#include <tinfer/format/gguf.hpp>
#include <tinfer/format/tokenizer.hpp>

namespace tinfer::tok {

inline PreTokenizer pre_tokenizer_named(std::string const& name) {
    // llama.cpp's names; "smollm" and "starcoder" are the same pre-tokenizer.
    if (name == "smollm" || name == "starcoder") return PreTokenizer::smollm;
    if (name == "gpt2" || name == "default") return PreTokenizer::gpt2;
    throw Error("tokenizer.ggml.pre '" + name +
                "' is not supported (supported: smollm, starcoder, gpt2, default)");
}

inline Tokenizer tokenizer_from_gguf(gguf::File const& file) {
    auto const model = file.get<std::string>("tokenizer.ggml.model");
    if (model != "gpt2") {
        throw Error("tokenizer.ggml.model '" + model +
                    "' is not supported: tinfer implements byte-level BPE ('gpt2') only");
    }
    TokenizerSpec spec;
    spec.tokens = file.get_strings("tokenizer.ggml.tokens");
    if (file.find("tokenizer.ggml.token_type")) {
        spec.token_types = file.get_array<std::int32_t>("tokenizer.ggml.token_type");
    }
    spec.merges = file.get_strings("tokenizer.ggml.merges");
    spec.pre_tokenizer = pre_tokenizer_named(
        file.get_optional<std::string>("tokenizer.ggml.pre").value_or("default"));
    spec.bos = file.get_optional<TokenId>("tokenizer.ggml.bos_token_id");
    spec.eos = file.get_optional<TokenId>("tokenizer.ggml.eos_token_id");
    spec.unknown = file.get_optional<TokenId>("tokenizer.ggml.unknown_token_id");
    spec.padding = file.get_optional<TokenId>("tokenizer.ggml.padding_token_id");
    spec.add_bos = file.get_optional<bool>("tokenizer.ggml.add_bos_token").value_or(false);
    return Tokenizer(spec);
}

// The file's chat template; plain ChatML when the file carries none (llama.cpp's fallback too).
inline ChatTemplate chat_template_from_gguf(gguf::File const& file) {
    auto const source = file.get_optional<std::string>("tokenizer.chat_template");
    return source ? ChatTemplate::from_jinja(*source) : ChatTemplate();
}

}  // namespace tinfer::tok
