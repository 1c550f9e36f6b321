// libFuzzer target: the chat-template renderers. Fuzz-chosen messages (any role, contents with
// template-like syntax, ill-formed UTF-8) go through every template the project has: plain
// ChatML, SmolLM2's (built in, and its file's own run by the Jinja interpreter), Gemma's (built
// in, and Gemma 3's Jinja template), Qwen2.5's Jinja template, and fuzz-chosen Jinja source.
// Checked:
//   - each render is the format's documented text, built here independently (the Jinja
//     interpreter running SmolLM2's, Gemma 3's and Qwen2.5's templates against C++ written from
//     those templates; Gemma's alternation rule raising where the template raises);
//   - the render, tokenized by the model the template belongs to, starts a turn exactly where
//     the template did when no message brings a '<' of its own (so no turn marker is lost or
//     made up by the tokenizer), and decodes back as the tokenizer promises;
//   - fuzz-chosen Jinja source is either refused at load with tinfer::Error or renders, twice
//     alike, or fails with tinfer::RequestError: never a crash, a hang or another exception.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fstream>
#include <iterator>

#include <fuzzer/FuzzedDataProvider.h>

#include <tinfer/tokenizer/chat_template.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>

#include "tokenizer_fuzz.hpp"

namespace {

using tinfer::tok::ChatFormat;
using tinfer::tok::ChatMessage;
using tinfer::tok::ChatTemplate;
using tinfer::tok::Tokenizer;

struct Model {
    Tokenizer tokenizer;
    ChatTemplate chat;
};
Model const* smollm2 = nullptr;
Model const* gemma3 = nullptr;
ChatTemplate const* gemma3_jinja = nullptr;  // Gemma 3's own template (its GGUF has none)
ChatTemplate const* qwen25_jinja = nullptr;

// run_fuzz.sh passes the test data folder (tests/data) at compile time.
ChatTemplate const* load_template(char const* name) {
    std::ifstream in(std::string(TINFER_TEST_DATA_DIR) + "/tokenizer/chat_templates/" + name);
    FUZZ_CHECK(static_cast<bool>(in), std::string("cannot read the template ") + name);
    std::string const source{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    return new ChatTemplate(ChatTemplate::from_jinja(source));
}

Model const* load(char const* variable) {
    auto const file = fuzz::open_model(variable);
    return new Model{tinfer::tok::tokenizer_from_gguf(file),
                     tinfer::tok::chat_template_from_gguf(file)};
}

// The documented renders, written from chat_template.hpp's description.
std::string chatml_reference(std::optional<std::string> const& default_system,
                             std::vector<ChatMessage> const& messages, bool generation_prompt) {
    std::string out;
    auto const turn = [&](std::string const& role, std::string const& content) {
        out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
    };
    if (default_system && !messages.empty() && messages[0].role != "system")
        turn("system", *default_system);
    for (ChatMessage const& m : messages) turn(m.role, m.content);
    if (generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

// Python's str.strip(), which Jinja's trim calls, on UTF-8 bytes: the encodings of the code
// points str.isspace() accepts, removed from both ends.
std::string python_stripped(std::string const& s) {
    static constexpr std::string_view spaces[] = {
        "\t",           "\n",           "\v",           "\f",           "\r",
        "\x1c",         "\x1d",         "\x1e",         "\x1f",         " ",
        "\xc2\x85",     "\xc2\xa0",     "\xe1\x9a\x80", "\xe2\x80\x80", "\xe2\x80\x81",
        "\xe2\x80\x82", "\xe2\x80\x83", "\xe2\x80\x84", "\xe2\x80\x85", "\xe2\x80\x86",
        "\xe2\x80\x87", "\xe2\x80\x88", "\xe2\x80\x89", "\xe2\x80\x8a", "\xe2\x80\xa8",
        "\xe2\x80\xa9", "\xe2\x80\xaf", "\xe2\x81\x9f", "\xe3\x80\x80"};
    std::string_view rest = s;
    for (bool changed = true; changed;) {
        changed = false;
        for (std::string_view space : spaces) {
            if (rest.starts_with(space)) rest.remove_prefix(space.size()), changed = true;
            if (rest.ends_with(space)) rest.remove_suffix(space.size()), changed = true;
        }
    }
    return std::string(rest);
}

std::string gemma_reference(std::vector<ChatMessage> const& messages, bool generation_prompt) {
    std::string out;
    std::size_t first = 0;
    std::string prefix;
    if (!messages.empty() && messages[0].role == "system") {
        prefix = messages[0].content + "\n\n";
        first = 1;
    }
    for (std::size_t i = first; i < messages.size(); ++i) {
        std::string const role = messages[i].role == "assistant" ? "model" : messages[i].role;
        out += "<start_of_turn>" + role + "\n" + (i == first ? prefix : "") +
               python_stripped(messages[i].content) + "<end_of_turn>\n";
    }
    if (generation_prompt) out += "<start_of_turn>model\n";
    return out;
}

// Gemma 3's template raises unless the turns after a leading system message go user, other,
// user, other... (it checks each turn's role == "user" against its position), and on none.
bool gemma_alternates(std::vector<ChatMessage> const& messages) {
    if (messages.empty()) return false;
    std::size_t const first = messages[0].role == "system" ? 1 : 0;
    for (std::size_t i = first; i < messages.size(); ++i)
        if ((messages[i].role == "user") != ((i - first) % 2 == 0)) return false;
    return true;
}

// Qwen2.5-Instruct's template without tools, as its source reads.
std::string qwen25_reference(std::vector<ChatMessage> const& messages, bool generation_prompt) {
    std::string out = "<|im_start|>system\n";
    out += messages[0].role == "system"
               ? messages[0].content
               : "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    out += "<|im_end|>\n";
    for (std::size_t i = 0; i < messages.size(); ++i) {
        std::string const& role = messages[i].role;
        if (role == "user" || (role == "system" && i > 0) || role == "assistant") {
            out += "<|im_start|>" + role + "\n" + messages[i].content + "<|im_end|>\n";
        } else if (role == "tool") {
            if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
            out += "\n<tool_response>\n" + messages[i].content + "\n</tool_response>";
            if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
        }
    }
    if (generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

std::size_t count(std::string_view text, std::string_view what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// The rendered prompt through the tokenizer of the model whose template it is.
void check_tokenized(Model const& model, std::string const& rendered,
                     std::vector<ChatMessage> const& messages, bool gemma_turns) {
    Tokenizer const& t = model.tokenizer;
    std::vector<std::int32_t> const ids = t.encode_prompt(rendered);
    fuzz::check_ids_in_vocabulary(t, ids, rendered);
    std::vector<std::int32_t> const body = t.encode(rendered);
    if (auto const expected = fuzz::promised_round_trip(t, rendered, body)) {
        FUZZ_CHECK(t.decode(body) == *expected,
                   "the rendered prompt does not decode back: " + fuzz::c_literal(rendered));
    }
    bool const plain = std::none_of(messages.begin(), messages.end(), [](ChatMessage const& m) {
        return m.role.find('<') != std::string::npos || m.content.find('<') != std::string::npos;
    });
    if (!plain) return;
    std::string_view const marker = gemma_turns ? "<start_of_turn>" : "<|im_start|>";
    auto const marker_id = t.find_token_text(marker);
    FUZZ_CHECK(marker_id.has_value(), "the tokenizer has no token " + std::string(marker));
    auto const tokens = static_cast<std::size_t>(std::count(body.begin(), body.end(), *marker_id));
    FUZZ_CHECK(tokens == count(rendered, marker),
               std::to_string(count(rendered, marker)) + " turns rendered but " +
                   std::to_string(tokens) + " " + std::string(marker) + " tokens in " +
                   fuzz::c_literal(rendered));
}

// Fuzz-chosen source: refused at load (tinfer::Error), or rendered twice alike, or failing
// with a RequestError; anything else escapes and is reported by libFuzzer.
void check_jinja_source(std::string const& source, std::vector<ChatMessage> const& messages,
                        bool generation_prompt) {
    std::optional<ChatTemplate> chat;
    try {
        chat = ChatTemplate::from_jinja(source, {"<s>", "</s>"});
    } catch (tinfer::Error const& e) {
        FUZZ_CHECK(std::string_view(e.what()).starts_with("chat template refused: "),
                   "from_jinja's refusal does not say so: " + std::string(e.what()));
        return;
    }
    chat->set_clock([] { return std::time_t{1764547200}; });
    std::optional<std::string> first;
    try {
        first = chat->render(messages, generation_prompt);
    } catch (tinfer::RequestError const&) {
    }
    std::optional<std::string> second;
    try {
        second = chat->render(messages, generation_prompt);
    } catch (tinfer::RequestError const&) {
    }
    FUZZ_CHECK(first == second, "two renders of one template differ: " + fuzz::c_literal(source));
    // Text without a tag renders as itself (less one trailing newline, jinja2's default).
    if (first && source.find_first_of("{") == std::string::npos &&
        source.find('\r') == std::string::npos) {
        std::string expected = source;
        if (expected.ends_with('\n')) expected.pop_back();
        FUZZ_CHECK(*first == expected,
                   "plain text does not render as itself: " + fuzz::c_literal(source));
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    smollm2 = load("TINFER_MODEL_PATH");
    gemma3 = load("TINFER_GEMMA3_PATH");
    gemma3_jinja = load_template("gemma3.jinja");
    qwen25_jinja = load_template("qwen2.5.jinja");
    FUZZ_CHECK(smollm2->chat.format() == ChatFormat::jinja,
               "SmolLM2's file template is not run by the Jinja interpreter");
    FUZZ_CHECK(gemma3->chat.format() == ChatFormat::gemma,
               "Gemma 3's file is not given Gemma's built-in template");
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size) {
    FuzzedDataProvider input(data, size);
    static constexpr char const* roles[] = {"system", "user", "assistant", "tool", "developer"};
    std::uint8_t const which = input.ConsumeIntegral<std::uint8_t>();
    bool const generation_prompt = input.ConsumeBool();
    std::vector<ChatMessage> messages(input.ConsumeIntegralInRange<std::size_t>(0, 8));
    for (ChatMessage& m : messages) {
        std::uint8_t const r = input.ConsumeIntegral<std::uint8_t>();
        m.role = r < 5 * 48 ? roles[r % 5] : input.ConsumeRandomLengthString(32);
        m.content = input.ConsumeRandomLengthString(1024);
    }
    switch (which % 8) {
        case 0: {  // plain ChatML, no default system message
            std::string const out = ChatTemplate().render(messages, generation_prompt);
            FUZZ_CHECK(out == chatml_reference(std::nullopt, messages, generation_prompt),
                       "ChatML render differs: " + fuzz::c_literal(out));
            check_tokenized(*smollm2, out, messages, false);
            break;
        }
        case 1:    // SmolLM2, built in
        case 2: {  // SmolLM2, its file's Jinja template
            ChatTemplate const chat = which % 8 == 1 ? ChatTemplate::smollm2() : smollm2->chat;
            std::string const out = chat.render(messages, generation_prompt);
            FUZZ_CHECK(out == chatml_reference(std::string(tinfer::tok::smollm2_default_system),
                                               messages, generation_prompt),
                       "SmolLM2 render differs: " + fuzz::c_literal(out));
            FUZZ_CHECK(out == tinfer::tok::render_chat(messages, generation_prompt),
                       "render_chat differs from SmolLM2's template");
            check_tokenized(*smollm2, out, messages, false);
            break;
        }
        case 3:    // Gemma, built in
        case 4: {  // Gemma, the file's (built in: its GGUF carries no template)
            ChatTemplate const chat = which % 8 == 3 ? ChatTemplate::gemma() : gemma3->chat;
            std::string const out = chat.render(messages, generation_prompt);
            FUZZ_CHECK(out == gemma_reference(messages, generation_prompt),
                       "Gemma render differs: " + fuzz::c_literal(out));
            check_tokenized(*gemma3, out, messages, true);
            break;
        }
        case 5: {  // Gemma 3's own Jinja template: the built-in's text, or the template's raise
            std::optional<std::string> out;
            try {
                out = gemma3_jinja->render(messages, generation_prompt);
            } catch (tinfer::RequestError const&) {
            }
            FUZZ_CHECK(out.has_value() == gemma_alternates(messages),
                       out ? "Gemma 3's template rendered roles that do not alternate"
                           : "Gemma 3's template raised on alternating roles");
            if (out) {
                FUZZ_CHECK(*out == gemma_reference(messages, generation_prompt),
                           "Gemma 3's Jinja render differs: " + fuzz::c_literal(*out));
                check_tokenized(*gemma3, *out, messages, true);
            }
            break;
        }
        case 6: {  // Qwen2.5's Jinja template (it reads messages[0]: none raises)
            std::optional<std::string> out;
            try {
                out = qwen25_jinja->render(messages, generation_prompt);
            } catch (tinfer::RequestError const&) {
            }
            FUZZ_CHECK(out.has_value() == !messages.empty(),
                       "Qwen2.5's template raised, or rendered no messages");
            if (out) {
                FUZZ_CHECK(*out == qwen25_reference(messages, generation_prompt),
                           "Qwen2.5's Jinja render differs: " + fuzz::c_literal(*out));
                check_tokenized(*smollm2, *out, messages, false);
            }
            break;
        }
        default:  // Jinja source of the fuzzer's own
            check_jinja_source(input.ConsumeRemainingBytesAsString(), messages, generation_prompt);
            break;
    }
    return 0;
}
