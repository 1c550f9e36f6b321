// ChatML rendering against the GGUF's own template run by jinja2 (tests/data/tokenizer/chat.tsv),
// Gemma's against Gemma 3's template run by jinja2 (gemma3_chat.tsv).
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include <tinfer/format/chat_template.hpp>
#include "golden_io.hpp"
#include "testing.hpp"

namespace tok = tinfer::tok;

// SmolLM2-135M-Instruct's tokenizer.chat_template, as stored in the GGUF.
constexpr std::string_view smollm2_jinja =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

BOOST_AUTO_TEST_SUITE(chat_template)

BOOST_AUTO_TEST_CASE(renders_like_the_jinja_template) {
    auto const cases = tinfer::testing::read_golden_chats();
    BOOST_REQUIRE_GE(cases.size(), 10u);
    auto const from_source = tok::ChatTemplate::from_jinja(smollm2_jinja);
    for (auto const& c : cases) {
        BOOST_TEST(tok::render_chat(c.messages, c.add_generation_prompt) == c.rendered);
        BOOST_TEST(from_source.render(c.messages, c.add_generation_prompt) == c.rendered);
    }
}

BOOST_AUTO_TEST_CASE(default_system_message_is_read_from_the_template) {
    auto const from_source = tok::ChatTemplate::from_jinja(smollm2_jinja);
    BOOST_REQUIRE(from_source.default_system().has_value());
    BOOST_TEST(*from_source.default_system() == tok::smollm2_default_system);

    // The same template with the newline written as a Jinja escape.
    std::string escaped(smollm2_jinja);
    for (std::size_t at; (at = escaped.find('\n')) != std::string::npos;)
        escaped.replace(at, 1, "\\n");
    BOOST_TEST((tok::ChatTemplate::from_jinja(escaped).default_system() ==
                std::optional<std::string>(tok::smollm2_default_system)));
}

BOOST_AUTO_TEST_CASE(plain_chatml_has_no_default_system_message) {
    constexpr std::string_view plain =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt "
        "%}{{ '<|im_start|>assistant\n' }}{% endif %}";
    auto const t = tok::ChatTemplate::from_jinja(plain);
    BOOST_TEST(!t.default_system().has_value());
    std::vector<tok::ChatMessage> const messages{{"user", "hi"}};
    BOOST_TEST(t.render(messages, true) ==
               "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    // A system turn built from message content is not a default message.
    constexpr std::string_view qwen_like =
        "{% if messages[0]['role'] == 'system' %}{{ '<|im_start|>system\n' + "
        "messages[0]['content'] + '<|im_end|>\n' }}{% endif %}<|im_start|><|im_end|>";
    BOOST_TEST(!tok::ChatTemplate::from_jinja(qwen_like).default_system().has_value());
}

BOOST_AUTO_TEST_CASE(other_templates_are_refused) {
    BOOST_CHECK_THROW(tok::ChatTemplate::from_jinja("[INST] {{ messages[0]['content'] }} [/INST]"),
                      tinfer::Error);
}

BOOST_AUTO_TEST_CASE(gemma_renders_like_its_jinja_template) {
    auto const cases = tinfer::testing::read_golden_chats("gemma3_chat.tsv");
    BOOST_REQUIRE_GE(cases.size(), 10u);
    auto const gemma = tok::ChatTemplate::gemma();
    BOOST_TEST((gemma.format() == tok::ChatFormat::gemma));
    for (auto const& c : cases) {
        BOOST_TEST(gemma.render(c.messages, c.add_generation_prompt) == c.rendered);
    }
    // The system message folds into the first user turn; the assistant is "model".
    std::vector<tok::ChatMessage> const messages{
        {"system", "Be brief."}, {"user", " hi \n"}, {"assistant", "hello"}};
    BOOST_TEST(gemma.render(messages, true) ==
               "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n"
               "<start_of_turn>model\nhello<end_of_turn>\n<start_of_turn>model\n");
}

BOOST_AUTO_TEST_CASE(gemma_templates_are_recognised) {
    constexpr std::string_view source =
        "{{ bos_token }}{%- for message in messages -%}{{ '<start_of_turn>' + message['role'] + "
        "'\n' + message['content'] | trim + '<end_of_turn>\n' }}{%- endfor -%}";
    BOOST_TEST((tok::ChatTemplate::from_jinja(source).format() == tok::ChatFormat::gemma));
    BOOST_TEST((tok::ChatTemplate::from_jinja(smollm2_jinja).format() == tok::ChatFormat::chatml));
}

BOOST_AUTO_TEST_SUITE_END()
