#pragma once
// Chat rendering: a file's own tokenizer.chat_template run by tinfer's Jinja interpreter
// (jinja.hpp), or, for a file without one, one of the two formats tinfer has built in:
//
// ChatML ("<|im_start|>{role}\n{content}<|im_end|>\n"), the chat format of SmolLM2 and of the
//   other ChatML models, with the optional default system message some templates insert.
// Gemma ("<start_of_turn>{role}\n{content}<end_of_turn>\n", the assistant's role is "model"),
//   as Gemma 3's own template renders it: contents trimmed (Python's Unicode whitespace), a leading
//   system message folded into the first turn ("{system}\n\n{content}"), generation prompt
//   "<start_of_turn>model\n".
//
// BOS is added once, by whoever adds it: where Tokenizer::encode_prompt adds BOS (the file's
// add_bos_token), a template's {{ bos_token }} renders as nothing, as llama.cpp's built-in
// templates leave it out; where the tokenizer does not, it renders as the BOS token's text,
// which encode_prompt parses back into the token. eos_token is always the EOS token's text.
// The built-in formats never write BOS.
//
// A template the interpreter does not understand is refused when it is loaded, naming the
// construct; the examples' --chat-template FILE (or chatml / gemma) replaces it.
#include <cstdint>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <tinfer/core/error.hpp>
#include <tinfer/jinja/jinja.hpp>

namespace tinfer::tok {

struct ChatMessage {
    std::string role;  // "system", "user", "assistant", ...
    std::string content;
};

inline constexpr std::string_view smollm2_default_system =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

enum class ChatFormat : std::uint8_t { chatml, gemma, jinja };

// The texts a Jinja template sees as bos_token and eos_token (see BOS above).
struct ChatSpecialTokens {
    std::string bos;
    std::string eos;
};

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

    // ChatML, SmolLM2's default system message, or Gemma by name (what --chat-template
    // chatml / gemma choose); nullopt for another name.
    static std::optional<ChatTemplate> builtin(std::string_view name) {
        if (name == "chatml") return ChatTemplate();
        if (name == "smollm2") return smollm2();
        if (name == "gemma") return gemma();
        return std::nullopt;
    }

    // A Jinja template (tokenizer.chat_template), parsed now: what the interpreter does not
    // implement is refused here (tinfer::Error naming the construct and its line), not when a
    // conversation is rendered.
    static ChatTemplate from_jinja(std::string_view source, ChatSpecialTokens tokens = {}) {
        ChatTemplate chat;
        chat.format_ = ChatFormat::jinja;
        try {
            chat.jinja_ = std::make_shared<jinja::Template const>(source);
        } catch (RequestError const& e) {
            std::string_view reason = e.what();
            if (reason.starts_with("chat template: ")) reason.remove_prefix(15);
            throw Error("chat template refused: " + std::string(reason));
        }
        chat.tokens_ = std::move(tokens);
        return chat;
    }

    // What strftime_now() formats (seconds since the epoch, rendered in UTC); empty: the time
    // of the render. Tests fix it so a date-stamped template (Llama 3.2) renders reproducibly.
    void set_clock(std::function<std::time_t()> clock) { clock_ = std::move(clock); }

    std::optional<std::string> const& default_system() const { return default_system_; }
    ChatFormat format() const { return format_; }

    std::string render(std::span<ChatMessage const> messages, bool add_generation_prompt) const {
        if (format_ == ChatFormat::gemma) return render_gemma(messages, add_generation_prompt);
        if (format_ == ChatFormat::jinja) return render_jinja(messages, add_generation_prompt);
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
            out.append(jinja::detail::strip(messages[i].content, true, true))
                .append("<end_of_turn>\n");
        }
        if (add_generation_prompt) out += "<start_of_turn>model\n";
        return out;
    }

    // The template's globals as transformers' apply_chat_template gives them (no tools, no
    // documents: tinfer's messages are role and content).
    std::string render_jinja(std::span<ChatMessage const> messages,
                             bool add_generation_prompt) const {
        jinja::List list;
        list.reserve(messages.size());
        for (ChatMessage const& m : messages) {
            list.push_back(jinja::TemplateValue::from(jinja::Dict{
                {"role", jinja::TemplateValue::from(m.role)}, {"content", jinja::TemplateValue::from(m.content)}}));
        }
        jinja::Dict const variables{
            {"messages", jinja::TemplateValue::from(std::move(list))},
            {"add_generation_prompt", jinja::TemplateValue::from(add_generation_prompt)},
            {"bos_token", jinja::TemplateValue::from(tokens_.bos)},
            {"eos_token", jinja::TemplateValue::from(tokens_.eos)}};
        return jinja_->render(variables, clock_);
    }

    std::optional<std::string> default_system_;
    ChatFormat format_ = ChatFormat::chatml;
    std::shared_ptr<jinja::Template const> jinja_;  // ChatFormat::jinja
    ChatSpecialTokens tokens_;
    std::function<std::time_t()> clock_;
};

// SmolLM2-Instruct's chat format.
inline std::string render_chat(std::span<ChatMessage const> messages, bool add_generation_prompt) {
    return ChatTemplate::smollm2().render(messages, add_generation_prompt);
}

}  // namespace tinfer::tok
