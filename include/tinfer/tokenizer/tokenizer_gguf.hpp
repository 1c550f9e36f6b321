#pragma once
// Builds the tokenizer and chat template from a GGUF file's tokenizer.* metadata.
#include <cstdint>
#include <string>
#include <string_view>

#include <tinfer/core/error.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/tokenizer/chat_template.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>

namespace tinfer::tok {

// The names of tokenizer.ggml.pre tinfer implements, as llama.cpp writes them.
inline constexpr std::string_view supported_pre_tokenizers = "gpt-2, smollm, starcoder";

// A byte-level BPE pre-tokenizer by its llama.cpp name. llama.cpp knows many more (llama3,
// qwen2, deepseek-coder, ...) with patterns of their own; tinfer refuses those rather than
// split text the way the vocabulary was not trained on.
inline PreTokenizer pre_tokenizer_named(std::string_view name) {
    if (name == "smollm" || name == "starcoder") return PreTokenizer::smollm;  // one pattern
    if (name == "gpt-2") return PreTokenizer::gpt2;
    std::string const why =
        name == "default"
            ? " (llama.cpp's 'default' is a pattern of its own, not GPT-2's, and is not "
              "implemented)"
            : "";
    throw Error("tokenizer.ggml.pre '" + std::string(name) + "' is not supported" + why +
                "; supported: " + std::string(supported_pre_tokenizers));
}

// A tokenizer model by its tokenizer.ggml.model name.
inline TokenizerModel tokenizer_model_named(std::string_view name) {
    if (name == "gpt2") return TokenizerModel::byte_level_bpe;
    if (name == "llama") return TokenizerModel::sentencepiece;
    throw Error("tokenizer.ggml.model '" + std::string(name) +
                "' is not supported; supported: gpt2 (byte-level BPE), llama (SentencePiece)");
}

inline Tokenizer tokenizer_from_gguf(gguf::File const& file) {
    TokenizerSpec spec;
    spec.model = tokenizer_model_named(file.get<std::string>("tokenizer.ggml.model"));
    spec.tokens = file.get_strings("tokenizer.ggml.tokens");
    if (file.find("tokenizer.ggml.token_type")) {
        spec.token_types = file.get_array<std::int32_t>("tokenizer.ggml.token_type");
    }
    if (spec.model == TokenizerModel::byte_level_bpe) {
        spec.merges = file.get_strings("tokenizer.ggml.merges");
        auto const pre = file.get_optional<std::string>("tokenizer.ggml.pre");
        // llama.cpp falls back to its 'default' pattern, which tinfer does not implement.
        if (!pre) {
            throw Error("tokenizer.ggml.pre is missing; supported: " +
                        std::string(supported_pre_tokenizers));
        }
        spec.pre_tokenizer = pre_tokenizer_named(*pre);
    } else {
        // llama.cpp reads no pre-tokenizer for SentencePiece, whatever tokenizer.ggml.pre says
        // (converters write "default").
        if (file.find("tokenizer.ggml.scores")) {
            spec.scores = file.get_array<float>("tokenizer.ggml.scores");
        }
    }
    spec.bos = file.get_optional<TokenId>("tokenizer.ggml.bos_token_id");
    spec.eos = file.get_optional<TokenId>("tokenizer.ggml.eos_token_id");
    spec.unknown = file.get_optional<TokenId>("tokenizer.ggml.unknown_token_id");
    spec.padding = file.get_optional<TokenId>("tokenizer.ggml.padding_token_id");
    for (char const* key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
        if (auto const id = file.get_optional<TokenId>(key)) spec.end_of_turn.push_back(*id);
    }
    // The defaults are llama.cpp's when the file says nothing: SentencePiece vocabularies add
    // BOS and a prefix space, byte-level BPE ones neither.
    bool const sentencepiece = spec.model == TokenizerModel::sentencepiece;
    spec.add_bos = file.get_optional<bool>("tokenizer.ggml.add_bos_token").value_or(sentencepiece);
    spec.add_eos = file.get_optional<bool>("tokenizer.ggml.add_eos_token").value_or(false);
    spec.add_space_prefix =
        sentencepiece && file.get_optional<bool>("tokenizer.ggml.add_space_prefix").value_or(true);
    return Tokenizer(spec);
}

// The texts of the file's BOS and EOS tokens as its template sees them: BOS empty where the
// tokenizer adds it itself (chat_template.hpp), so BOS is never there twice.
inline ChatSpecialTokens chat_special_tokens(gguf::File const& file) {
    auto const tokens = file.get_strings("tokenizer.ggml.tokens");
    auto const text_of = [&](char const* key) {
        auto const id = file.get_optional<TokenId>(key);
        return id && *id >= 0 && static_cast<std::size_t>(*id) < tokens.size()
                   ? std::string(tokens[static_cast<std::size_t>(*id)])
                   : std::string();
    };
    // The tokenizer's own rule (tokenizer_from_gguf): SentencePiece adds BOS unless told not to.
    bool const sentencepiece = file.get_optional<std::string>("tokenizer.ggml.model") == "llama";
    bool const tokenizer_adds_bos =
        file.get_optional<bool>("tokenizer.ggml.add_bos_token").value_or(sentencepiece);
    return {.bos = tokenizer_adds_bos ? std::string() : text_of("tokenizer.ggml.bos_token_id"),
            .eos = text_of("tokenizer.ggml.eos_token_id")};
}

// The file's chat template, run by the Jinja interpreter (refused at load, naming the
// construct, when it uses what the interpreter lacks). Without one: Gemma's for the
// architectures that use its turn format (Gemma 3 270M's file carries no template), plain
// ChatML otherwise (llama.cpp's fallback too). Gemma 4 has a turn format of its own and is
// not among them.
inline ChatTemplate chat_template_from_gguf(gguf::File const& file) {
    if (auto const source = file.get_optional<std::string>("tokenizer.chat_template")) {
        return ChatTemplate::from_jinja(*source, chat_special_tokens(file));
    }
    auto const architecture = file.get_optional<std::string>("general.architecture").value_or("");
    for (std::string_view const gemma : {"gemma", "gemma2", "gemma3", "gemma3n"}) {
        if (architecture == gemma) return ChatTemplate::gemma();
    }
    return ChatTemplate();
}

}  // namespace tinfer::tok
