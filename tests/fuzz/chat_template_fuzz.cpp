// libFuzzer target: the chat-template renderer. Fuzz-chosen messages (any role, contents with
// template-like syntax, ill-formed UTF-8) go through every template the project has: plain
// ChatML, SmolLM2's (from its model file and built in), Gemma's (from its model file and built
// in), and ChatTemplate::from_jinja of fuzz-chosen Jinja source. Checked:
//   - the render is the format's documented text (chat_template.hpp), built here independently;
//   - the model files' templates are recognised as what they are;
//   - the render, tokenized by the model the template belongs to, starts a turn exactly where
//     the template did when no message brings a '<' of its own (so no turn marker is lost or
//     made up by the tokenizer), and decodes back as the tokenizer promises;
//   - from_jinja refuses exactly the sources that are neither ChatML nor Gemma, with an Error.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include <tinfer/format/chat_template.hpp>
#include <tinfer/format/tokenizer_gguf.hpp>

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

std::string ascii_trimmed(std::string const& s) {
    auto const space = [](char c) {
        return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
    };
    std::size_t begin = 0, end = s.size();
    while (begin < end && space(s[begin])) ++begin;
    while (end > begin && space(s[end - 1])) --end;
    return s.substr(begin, end - begin);
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
               ascii_trimmed(messages[i].content) + "<end_of_turn>\n";
    }
    if (generation_prompt) out += "<start_of_turn>model\n";
    return out;
}

std::size_t count(std::string_view text, std::string_view what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) ++n;
    return n;
}

// The rendered prompt through the tokenizer of the model whose template it is.
void check_tokenized(Model const& model, std::string const& rendered,
                     std::vector<ChatMessage> const& messages) {
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
    std::string_view const marker =
        model.chat.format() == ChatFormat::gemma ? "<start_of_turn>" : "<|im_start|>";
    auto const marker_id = t.find_token_text(marker);
    FUZZ_CHECK(marker_id.has_value(), "the tokenizer has no token " + std::string(marker));
    auto const tokens = static_cast<std::size_t>(std::count(body.begin(), body.end(), *marker_id));
    FUZZ_CHECK(tokens == count(rendered, marker),
               std::to_string(count(rendered, marker)) + " turns rendered but " +
                   std::to_string(tokens) + " " + std::string(marker) + " tokens in " +
                   fuzz::c_literal(rendered));
}

void check_from_jinja(std::string const& source) {
    bool const gemma = source.find("<start_of_turn>") != std::string::npos &&
                       source.find("<end_of_turn>") != std::string::npos;
    bool const chatml = source.find("<|im_start|>") != std::string::npos &&
                        source.find("<|im_end|>") != std::string::npos;
    try {
        ChatTemplate const chat = ChatTemplate::from_jinja(source);
        FUZZ_CHECK(gemma || chatml, "from_jinja accepted " + fuzz::c_literal(source));
        FUZZ_CHECK((chat.format() == ChatFormat::gemma) == gemma,
                   "from_jinja took the wrong format for " + fuzz::c_literal(source));
        if (auto const& system = chat.default_system()) {
            FUZZ_CHECK(!system->empty() && system->find_first_of("'\"{}") == std::string::npos &&
                           source.find(*system) != std::string::npos,
                       "from_jinja's default system message is not a literal of the source: " +
                           fuzz::c_literal(*system));
        }
    } catch (tinfer::Error const&) {
        FUZZ_CHECK(!gemma && !chatml, "from_jinja refused " + fuzz::c_literal(source));
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    smollm2 = load("TINFER_MODEL_PATH");
    gemma3 = load("TINFER_GEMMA3_PATH");
    FUZZ_CHECK(
        smollm2->chat.format() == ChatFormat::chatml &&
            smollm2->chat.default_system() == std::string(tinfer::tok::smollm2_default_system),
        "SmolLM2's file template is not read as ChatML with its default system message");
    FUZZ_CHECK(gemma3->chat.format() == ChatFormat::gemma,
               "Gemma 3's file is not given Gemma's template");
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
    switch (which % 6) {
        case 0: {  // plain ChatML, no default system message
            std::string const out = ChatTemplate().render(messages, generation_prompt);
            FUZZ_CHECK(out == chatml_reference(std::nullopt, messages, generation_prompt),
                       "ChatML render differs: " + fuzz::c_literal(out));
            check_tokenized(*smollm2, out, messages);
            break;
        }
        case 1:    // SmolLM2, built in
        case 2: {  // SmolLM2, from its file
            ChatTemplate const chat = which % 6 == 1 ? ChatTemplate::smollm2() : smollm2->chat;
            std::string const out = chat.render(messages, generation_prompt);
            FUZZ_CHECK(out == chatml_reference(std::string(tinfer::tok::smollm2_default_system),
                                               messages, generation_prompt),
                       "SmolLM2 render differs: " + fuzz::c_literal(out));
            FUZZ_CHECK(out == tinfer::tok::render_chat(messages, generation_prompt),
                       "render_chat differs from SmolLM2's template");
            check_tokenized(*smollm2, out, messages);
            break;
        }
        case 3:    // Gemma, built in
        case 4: {  // Gemma, from its file
            ChatTemplate const chat = which % 6 == 3 ? ChatTemplate::gemma() : gemma3->chat;
            std::string const out = chat.render(messages, generation_prompt);
            FUZZ_CHECK(out == gemma_reference(messages, generation_prompt),
                       "Gemma render differs: " + fuzz::c_literal(out));
            check_tokenized(*gemma3, out, messages);
            break;
        }
        default: {  // Jinja source of the fuzzer's own, then a render through what it gave
            std::string const source = input.ConsumeRemainingBytesAsString();
            check_from_jinja(source);
            try {
                (void)ChatTemplate::from_jinja(source).render(messages, generation_prompt);
            } catch (tinfer::Error const&) {
            }
            break;
        }
    }
    return 0;
}
