#pragma once
// ChatML rendering ("<|im_start|>{role}\n{content}<|im_end|>\n"), the chat format of SmolLM2
// and of the other ChatML models, with the optional default system message some templates
// insert. The GGUF stores the template as Jinja source; tinfer does not run Jinja but
// recognises ChatML sources and reads the default system message out of them, and the tests
// compare its output with the file's own template run by jinja2.
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

class ChatTemplate {
  public:
    // ChatML; when `default_system` is set and a non-empty conversation does not begin with a
    // system message, a system message with that text goes first.
    explicit ChatTemplate(std::optional<std::string> default_system = std::nullopt)
        : default_system_(std::move(default_system)) {}

    static ChatTemplate smollm2() { return ChatTemplate(std::string(smollm2_default_system)); }

    // Recognises a ChatML Jinja template (tokenizer.chat_template) and the default system
    // message written in it as a literal "<|im_start|>system\n...<|im_end|>".
    static ChatTemplate from_jinja(std::string_view source) {
        if (source.find("<|im_start|>") == std::string_view::npos ||
            source.find("<|im_end|>") == std::string_view::npos) {
            throw Error(
                "chat template is not ChatML (no <|im_start|>/<|im_end|>); tinfer "
                "renders ChatML only");
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

    std::string render(std::span<ChatMessage const> messages, bool add_generation_prompt) const {
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

    std::optional<std::string> default_system_;
};

// SmolLM2-Instruct's chat format.
inline std::string render_chat(std::span<ChatMessage const> messages, bool add_generation_prompt) {
    return ChatTemplate::smollm2().render(messages, add_generation_prompt);
}

}  // namespace tinfer::tok
