#pragma once
// Chat rendering in the two formats tinfer knows:
//
// ChatML ("<|im_start|>{role}\n{content}<|im_end|>\n"), the chat format of SmolLM2 and of the
//   other ChatML models, with the optional default system message some templates insert.
// Gemma ("<start_of_turn>{role}\n{content}<end_of_turn>\n", the assistant's role is "model"),
//   as Gemma 3's own template renders it: contents trimmed, a leading system message folded
//   into the first turn ("{system}\n\n{content}"), generation prompt "<start_of_turn>model\n".
//   The template's leading {{ bos_token }} is left to Tokenizer::encode_prompt, as llama.cpp's
//   built-in Gemma template does, so BOS is never there twice.
//
// The GGUF stores the template as Jinja source; tinfer does not run Jinja but recognises
// ChatML and Gemma sources (and reads ChatML's default system message out of them), and the
// tests compare its output with the template run by jinja2.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <tinfer/core/error.hpp>

namespace tinfer::tok {

struct ChatMessage {
    std::string role;  // "system", "user", "assistant", ...
    std::string content;
};

inline constexpr std::string_view smollm2_default_system =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

enum class ChatFormat : std::uint8_t { chatml, gemma };

class ChatTemplate {
  public:
    // ChatML; when `default_system` is set and a non-empty conversation does not begin with a
    // system message, a system message with that text goes first.
    explicit ChatTemplate(std::optional<std::string> default_system = std::nullopt)
        : default_system_(std::move(default_system)) {}

    static ChatTemplate smollm2() { return ChatTemplate(std::string(smollm2_default_system)); }

    static ChatTemplate gemma() {
        ChatTemplate chat;
        chat.format_ = ChatFormat::gemma;
        return chat;
    }

    // Recognises a Gemma or ChatML Jinja template (tokenizer.chat_template), and the ChatML
    // default system message written in it as a literal "<|im_start|>system\n...<|im_end|>".
    static ChatTemplate from_jinja(std::string_view source) {
        if (source.find("<start_of_turn>") != std::string_view::npos &&
            source.find("<end_of_turn>") != std::string_view::npos) {
            return gemma();
        }
        if (source.find("<|im_start|>") == std::string_view::npos ||
            source.find("<|im_end|>") == std::string_view::npos) {
            throw Error(
                "chat template is neither ChatML (<|im_start|>/<|im_end|>) nor Gemma "
                "(<start_of_turn>/<end_of_turn>); tinfer renders those two only");
        }
        constexpr std::string_view system_open = "<|im_start|>system";
        for (auto at = source.find(system_open); at != std::string_view::npos;
             at = source.find(system_open, at + 1)) {
            std::string_view rest = source.substr(at + system_open.size());
            // The newline is a real one or a Jinja string escape, depending on the converter.
            if (rest.starts_with('\n')) {
                rest.remove_prefix(1);
            } else if (rest.starts_with("\\n")) {
                rest.remove_prefix(2);
            } else {
                continue;
            }
            auto const end = rest.find("<|im_end|>");
            if (end == std::string_view::npos) continue;
            std::string_view const text = rest.substr(0, end);
            // A literal message, not the start of an expression such as "' + message['content']".
            if (text.empty() || text.find_first_of("'\"{}") != std::string_view::npos) continue;
            return ChatTemplate(std::string(text));
        }
        return ChatTemplate();
    }

    std::optional<std::string> const& default_system() const { return default_system_; }
    ChatFormat format() const { return format_; }

    std::string render(std::span<ChatMessage const> messages, bool add_generation_prompt) const {
        if (format_ == ChatFormat::gemma) return render_gemma(messages, add_generation_prompt);
        std::string out;
        if (default_system_ && !messages.empty() && messages.front().role != "system") {
            append_turn(out, "system", *default_system_);
        }
        for (ChatMessage const& message : messages) append_turn(out, message.role, message.content);
        if (add_generation_prompt) out += "<|im_start|>assistant\n";
        return out;
    }

  private:
    static void append_turn(std::string& out, std::string_view role, std::string_view content) {
        out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
    }

    // Jinja's `trim` on ASCII whitespace (Python's strip() also takes Unicode spaces).
    static std::string_view trimmed(std::string_view text) {
        constexpr std::string_view spaces = " \t\n\r\v\f";
        auto const first = text.find_first_not_of(spaces);
        if (first == std::string_view::npos) return {};
        return text.substr(first, text.find_last_not_of(spaces) - first + 1);
    }

    // Gemma 3's template: roles are not checked for alternation (the template raises), and only
    // a system message at the front is folded; its text is not trimmed, as in the template.
    static std::string render_gemma(std::span<ChatMessage const> messages,
                                    bool add_generation_prompt) {
        std::string out;
        std::string first_user_prefix;
        if (!messages.empty() && messages.front().role == "system") {
            first_user_prefix = messages.front().content + "\n\n";
            messages = messages.subspan(1);
        }
        for (std::size_t i = 0; i < messages.size(); ++i) {
            std::string_view const role =
                messages[i].role == "assistant" ? std::string_view("model") : messages[i].role;
            out.append("<start_of_turn>").append(role).append("\n");
            if (i == 0) out += first_user_prefix;
            out.append(trimmed(messages[i].content)).append("<end_of_turn>\n");
        }
        if (add_generation_prompt) out += "<start_of_turn>model\n";
        return out;
    }

    std::optional<std::string> default_system_;
    ChatFormat format_ = ChatFormat::chatml;
};

// SmolLM2-Instruct's chat format.
inline std::string render_chat(std::span<ChatMessage const> messages, bool add_generation_prompt) {
    return ChatTemplate::smollm2().render(messages, add_generation_prompt);
}

}  // namespace tinfer::tok
