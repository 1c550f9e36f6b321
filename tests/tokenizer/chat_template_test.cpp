// Chat rendering. The Jinja interpreter against the jinja2 package: SmolLM2's, Gemma 3's,
// Llama 3.2's and Qwen2.5's own templates and one small template per construct, rendered by
// jinja2 as transformers runs it (tests/reference/make_chat_template_golden.py writes
// chat_template_golden.tsv; the chat_template_golden_is_current CTest checks it against the
// installed jinja2). The built-in fallbacks against their templates run by jinja2 (chat.tsv:
// SmolLM2's ChatML, gemma3_chat.tsv: Gemma's).
#include <boost/test/unit_test.hpp>

#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include <tinfer/jinja/jinja.hpp>
#include <tinfer/tokenizer/chat_template.hpp>
#include "golden_io.hpp"
#include "testing.hpp"

namespace tok = tinfer::tok;
using tinfer::testing::from_hex;
using tinfer::testing::split;

namespace {

constexpr std::time_t golden_now = 1764547200;  // FIXED_NOW of the golden script

std::string template_file(std::string const& name) {
    auto const path =
        tinfer::testing::data_dir() / "tokenizer" / "chat_templates" / (name + ".jinja");
    std::ifstream in(path, std::ios::binary);
    BOOST_REQUIRE_MESSAGE(in, "cannot open " << path.string());
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct GoldenRender {
    std::string name;  // a model template's file name, or "feature"
    std::string source;
    bool add_generation_prompt;
    tok::ChatSpecialTokens tokens;
    std::vector<tok::ChatMessage> messages;
    std::string rendered;  // "!message": jinja2 raised
};

std::vector<GoldenRender> read_golden_renders() {
    std::vector<GoldenRender> renders;
    std::map<std::string, std::string> sources;
    for (auto const& line : tinfer::testing::read_lines("chat_template_golden.tsv")) {
        auto const fields = split(line, '\t');
        BOOST_REQUIRE_EQUAL(fields.size(), 6u);
        GoldenRender r;
        std::string const name(fields[0]);
        if (name.starts_with("feature:")) {
            r.name = "feature";
            r.source = from_hex(std::string_view(name).substr(8));
        } else {
            r.name = name;
            if (!sources.contains(name)) sources[name] = template_file(name);
            r.source = sources[name];
        }
        r.add_generation_prompt = fields[1] == "1";
        r.tokens = {from_hex(fields[2]), from_hex(fields[3])};
        if (!fields[4].empty()) {
            for (auto const message : split(fields[4], ',')) {
                auto const parts = split(message, ':');
                BOOST_REQUIRE_EQUAL(parts.size(), 2u);
                r.messages.push_back({from_hex(parts[0]), from_hex(parts[1])});
            }
        }
        r.rendered = from_hex(fields[5]);
        renders.push_back(std::move(r));
    }
    return renders;
}

std::string error_of(auto&& f) {
    try {
        f();
    } catch (std::exception const& e) {
        return e.what();
    }
    return "(no error)";
}

std::string render_source(std::string_view source,
                          std::vector<tok::ChatMessage> const& messages = {{"user", "hi"}}) {
    return tok::ChatTemplate::from_jinja(source).render(messages, true);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(chat_template)

BOOST_AUTO_TEST_CASE(jinja_renders_like_jinja2) {
    auto const renders = read_golden_renders();
    std::map<std::string, int> rendered, raised;
    for (auto const& r : renders) {
        auto chat = tok::ChatTemplate::from_jinja(r.source, r.tokens);
        chat.set_clock([] { return golden_now; });
        BOOST_TEST((chat.format() == tok::ChatFormat::jinja));
        if (r.rendered.starts_with('!')) {
            std::string const message =
                error_of([&] { chat.render(r.messages, r.add_generation_prompt); });
            BOOST_TEST(message == "chat template raised: " + r.rendered.substr(1),
                       r.name << ": " << r.source.substr(0, 80));
            ++raised[r.name];
        } else {
            std::string out;
            BOOST_CHECK_NO_THROW(out = chat.render(r.messages, r.add_generation_prompt));
            BOOST_TEST(out == r.rendered,
                       r.name << " (add_generation_prompt " << r.add_generation_prompt << ", "
                              << r.messages.size() << " messages): " << r.source.substr(0, 120));
            ++rendered[r.name];
        }
    }
    // What the comparison covered: every model template over the conversation set, both
    // generation-prompt settings, Gemma's alternation check raising, and every construct.
    for (char const* name : {"smollm2", "gemma3", "llama3.2", "qwen2.5"})
        BOOST_TEST(rendered[name] >= 30, name);
    BOOST_TEST(raised["gemma3"] >= 2);
    BOOST_TEST(rendered["feature"] >= 100);
    BOOST_TEST(raised["feature"] >= 1);
}

// trim strips what Python's str.strip() strips, by code point; an ill-formed sequence is no
// character: the overlong C0 9F spells U+001F (a Python space) and stays, as does a stray A0
// byte, while the well-formed C2 A0 (U+00A0) goes. Found by chat_template_fuzz.
BOOST_AUTO_TEST_CASE(trim_keeps_ill_formed_bytes) {
    std::vector<tok::ChatMessage> const messages = {{"user", "  \xc0\x9f\n hi \xa0\xc2\xa0"}};
    BOOST_TEST(tok::ChatTemplate::gemma().render(messages, false) ==
               "<start_of_turn>user\n\xc0\x9f\n hi \xa0<end_of_turn>\n");
}

BOOST_AUTO_TEST_CASE(the_stored_templates_are_the_model_files) {
    // Qwen2.5 and Llama 3.2 instruct templates name their models' special tokens; SmolLM2's is
    // byte for byte what its GGUF stores (tokenizer_model_test checks against the file).
    BOOST_TEST(template_file("qwen2.5").find("You are Qwen, created by Alibaba Cloud.") !=
               std::string::npos);
    BOOST_TEST(template_file("llama3.2").find("<|start_header_id|>") != std::string::npos);
    BOOST_TEST(template_file("gemma3").find("<start_of_turn>") != std::string::npos);
    BOOST_TEST(template_file("smollm2").find("named SmolLM, trained by Hugging Face") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(bos_token_renders_as_given) {
    // chat_special_tokens gives an empty BOS where the tokenizer adds BOS itself, so a leading
    // {{ bos_token }} never doubles it (sentencepiece_test checks the file's side).
    auto const with =
        tok::ChatTemplate::from_jinja("{{ bos_token }}[{{ eos_token }}]", {"<s>", "</s>"});
    BOOST_TEST(with.render({}, false) == "<s>[</s>]");
    auto const without =
        tok::ChatTemplate::from_jinja("{{ bos_token }}[{{ eos_token }}]", {"", "</s>"});
    BOOST_TEST(without.render({}, false) == "[</s>]");
}

BOOST_AUTO_TEST_CASE(unsupported_constructs_are_refused_at_load_naming_them) {
    struct Case {
        char const* source;
        char const* named;
    };
    for (Case const c : std::initializer_list<Case>{
             {"{% macro f(x) %}{{ x }}{% endmacro %}", "unsupported Jinja construct '{% macro %}'"},
             {"a\n{% call f() %}{% endcall %}", "line 2: unsupported Jinja construct '{% call %}'"},
             {"{% include 'x' %}", "'{% include %}'"},
             {"{% extends 'x' %}", "'{% extends %}'"},
             {"{% generation %}x{% endgeneration %}", "'{% generation %}'"},
             {"{% raw %}x{% endraw %}", "'{% raw %}'"},
             {"{{ messages | wordcount }}", "filter 'wordcount'"},
             {"{{ x is callable }}", "test 'is callable'"},
             {"{{ 'a'.format(1) }}", "method '.format()'"},
             {"{{ cycler(1, 2) }}", "function 'cycler()'"},
             {"{% set a, b = 1, 2 %}", "'{% set a, b = ... %}'"},
             {"{% for m in messages recursive %}{% endfor %}", "'{% for ... recursive %}'"},
         }) {
        std::string const message = error_of([&] { tok::ChatTemplate::from_jinja(c.source); });
        BOOST_TEST(message.starts_with("chat template refused: "), c.source << " -> " << message);
        BOOST_TEST(message.find(c.named) != std::string::npos, c.source << " -> " << message);
    }
    // Syntax errors are refused at load too, never at render.
    for (char const* source :
         {"{% if x %}", "{{ 1 + }}", "{% endfor %}", "{{ 'open }}", "{% for %}", "{{ x",
          "{% break %}", "{{ (1 }}", "{{ a.b( }}", "{{ '\\x4' }}"}) {
        BOOST_CHECK_THROW(tok::ChatTemplate::from_jinja(source), tinfer::Error);
    }
}

BOOST_AUTO_TEST_CASE(bad_renders_fail_with_request_errors) {
    // Errors jinja2 raises at render time (undefined.attr, type errors) are RequestErrors, and
    // hostile templates meet the render limits instead of hanging or exhausting memory.
    struct Case {
        char const* source;
        char const* says;
    };
    for (Case const c : std::initializer_list<Case>{
             {"{{ nothing.attr }}", "'nothing' is undefined"},
             {"{{ 'a' + 1 }}", "unsupported operand types for +: str and int"},
             {"{{ 1 // 0 }}", "division by zero"},
             {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
             {"{% set x = 1 %}{% set x.y = 2 %}", "only a namespace() takes attributes"},
             {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
              "steps"},
             {"{{ 'x' * 1000000000 }}", "exceeds"},
             {"{{ range(1000000) }}", "range() longer than"},
             {"{{ raise_exception('no ' ~ messages[0].role) }}", "chat template raised: no user"},
         }) {
        std::string const message = error_of([&] { render_source(c.source); });
        BOOST_TEST(message.find(c.says) != std::string::npos, c.source << " -> " << message);
    }
    // Nesting past the parser's depth is refused, not a stack overflow.
    BOOST_CHECK_THROW(tok::ChatTemplate::from_jinja("{{ " + std::string(5000, '(') + "1" +
                                                    std::string(5000, ')') + " }}"),
                      tinfer::Error);
    BOOST_CHECK_THROW(tok::ChatTemplate::from_jinja("{{ " + std::string(5000, '-') + "1 }}"),
                      tinfer::Error);
}

BOOST_AUTO_TEST_CASE(chatml_fallback_renders_like_the_jinja_template) {
    auto const cases = tinfer::testing::read_golden_chats();
    BOOST_REQUIRE_GE(cases.size(), 10u);
    auto const smollm2 = tok::ChatTemplate::from_jinja(template_file("smollm2"));
    for (auto const& c : cases) {
        BOOST_TEST(tok::render_chat(c.messages, c.add_generation_prompt) == c.rendered);
        BOOST_TEST(smollm2.render(c.messages, c.add_generation_prompt) == c.rendered);
    }
    BOOST_TEST(*tok::ChatTemplate::smollm2().default_system() == tok::smollm2_default_system);
    std::vector<tok::ChatMessage> const messages{{"user", "hi"}};
    BOOST_TEST(tok::ChatTemplate().render(messages, true) ==
               "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

BOOST_AUTO_TEST_CASE(builtins_by_name) {
    BOOST_TEST((tok::ChatTemplate::builtin("chatml")->format() == tok::ChatFormat::chatml));
    BOOST_TEST(!tok::ChatTemplate::builtin("chatml")->default_system().has_value());
    BOOST_TEST(tok::ChatTemplate::builtin("smollm2")->default_system().has_value());
    BOOST_TEST((tok::ChatTemplate::builtin("gemma")->format() == tok::ChatFormat::gemma));
    BOOST_TEST(!tok::ChatTemplate::builtin("llama3").has_value());
}

BOOST_AUTO_TEST_CASE(gemma_fallback_renders_like_its_jinja_template) {
    auto const cases = tinfer::testing::read_golden_chats("gemma3_chat.tsv");
    BOOST_REQUIRE_GE(cases.size(), 10u);
    auto const gemma = tok::ChatTemplate::gemma();
    auto const jinja = tok::ChatTemplate::from_jinja(template_file("gemma3"));
    BOOST_TEST((gemma.format() == tok::ChatFormat::gemma));
    for (auto const& c : cases) {
        BOOST_TEST(gemma.render(c.messages, c.add_generation_prompt) == c.rendered);
        BOOST_TEST(jinja.render(c.messages, c.add_generation_prompt) == c.rendered);
    }
    // The system message folds into the first user turn; the assistant is "model".
    std::vector<tok::ChatMessage> const messages{
        {"system", "Be brief."}, {"user", " hi \n"}, {"assistant", "hello"}};
    BOOST_TEST(gemma.render(messages, true) ==
               "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n"
               "<start_of_turn>model\nhello<end_of_turn>\n<start_of_turn>model\n");
    BOOST_TEST(jinja.render(messages, true) == gemma.render(messages, true));
}

BOOST_AUTO_TEST_SUITE_END()
