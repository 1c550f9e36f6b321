// Gemma 3's SentencePiece vocabulary read from the real GGUF: ids and decodes identical to
// Google's `sentencepiece` built from the same file (tests/data/tokenizer/gemma3_golden.tsv),
// ill-formed UTF-8 as one byte token per bad byte, BOS, end of turn, and Gemma's chat template
// against its Jinja source run by jinja2 (gemma3_chat.tsv).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include <tinfer/core/unicode.hpp>
#include <tinfer/engine/output_stream.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>
#include <tinfer/tokenizer/tokenizer_stream.hpp>
#include "golden_io.hpp"
#include "testing.hpp"

namespace tok = tinfer::tok;
using tinfer::testing::to_hex;

namespace {

struct Gemma3 {
    tinfer::gguf::File file = tinfer::gguf::File::open(tinfer::testing::gemma3_path());
    tok::Tokenizer tokenizer = tok::tokenizer_from_gguf(file);
};

Gemma3 const& gemma3() {
    static Gemma3 const model;  // 262144 tokens: parse them once
    return model;
}

std::vector<tinfer::testing::GoldenEncoding> const& golden() {
    static auto const cases = tinfer::testing::read_golden_encodings("gemma3_golden.tsv");
    return cases;
}

// What decoding gives back for a text: SentencePiece spells a space U+2581, so a U+2581 in the
// text comes back as a space.
std::string with_spaces(std::string_view text) {
    return tok::unescape_spaces(text);
}

tok::TokenId byte_token(tok::Tokenizer const& t, unsigned byte) {
    return t.find_token_text(tok::byte_fallback_text(static_cast<std::uint8_t>(byte))).value();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gemma3_tokenizer)

BOOST_AUTO_TEST_CASE(vocabulary_and_flags_match_the_file) {
    auto const& t = gemma3().tokenizer;
    BOOST_TEST((t.model() == tok::TokenizerModel::sentencepiece));
    BOOST_TEST(t.vocab_size() == 262144u);
    BOOST_TEST((t.bos_id() == std::optional<tok::TokenId>(2)));
    BOOST_TEST((t.eos_id() == std::optional<tok::TokenId>(1)));
    BOOST_TEST((t.unknown_id() == std::optional<tok::TokenId>(3)));
    BOOST_TEST((t.padding_id() == std::optional<tok::TokenId>(0)));
    BOOST_TEST(t.add_bos());
    BOOST_TEST(!t.add_eos());
    BOOST_TEST(!t.add_space_prefix());
    BOOST_TEST(t.token_text(105) == "<start_of_turn>");
    BOOST_TEST((t.token_type(106) == tok::TokenType::control));
    BOOST_TEST((t.token_type(107) == tok::TokenType::user_defined));  // "\n"
    BOOST_TEST(t.token_text(236743) == "\xE2\x96\x81");               // "▁"
    BOOST_TEST(t.token_bytes(236743) == " ");
    BOOST_TEST(t.token_bytes(byte_token(t, 0x41)) == "A");
    BOOST_TEST(t.token_score(236743) < 0.f);
    for (unsigned b = 0; b < 256; ++b) BOOST_TEST(t.spells_byte(static_cast<std::uint8_t>(b)));
}

BOOST_AUTO_TEST_CASE(end_of_generation_is_eos_and_end_of_turn) {
    auto const& t = gemma3().tokenizer;
    std::vector<tok::TokenId> const ends(t.end_of_generation().begin(),
                                         t.end_of_generation().end());
    BOOST_TEST(ends == (std::vector<tok::TokenId>{1, 106}));
    BOOST_TEST(t.ends_generation(106));
    BOOST_TEST(!t.ends_generation(105));
}

BOOST_AUTO_TEST_CASE(output_stream_stops_at_end_of_turn_like_at_eos) {
    auto const& t = gemma3().tokenizer;
    auto const hello = t.encode("Hello");
    for (tok::TokenId const end : {106, 1}) {
        tinfer::OutputStream out(t, {.max_new_tokens = 8});
        std::string text;
        for (auto const id : hello) {
            auto const step = out.accept(id);
            BOOST_TEST(!step.finish.has_value());
            text += step.text;
        }
        auto const last = out.accept(end);
        BOOST_TEST((last.finish == tinfer::FinishReason::stop_token), "token " << end);
        BOOST_TEST(text + last.text == "Hello");  // the stopping token has no text
    }
    // ignore_eos goes on past both.
    tinfer::OutputStream going_on(t, {.max_new_tokens = 8, .ignore_eos = true});
    BOOST_TEST(!going_on.accept(106).finish.has_value());
    BOOST_TEST(!going_on.accept(1).finish.has_value());
}

BOOST_AUTO_TEST_CASE(ids_match_sentencepiece) {
    auto const& t = gemma3().tokenizer;
    std::size_t parsed = 0, plain = 0, mismatches = 0, byte_fallbacks = 0;
    for (auto const& c : golden()) {
        (c.specials == tok::SpecialTokens::parse ? parsed : plain) += 1;
        auto const ids = t.encode(c.text, c.specials);
        if (ids != c.ids) ++mismatches;
        BOOST_TEST(ids == c.ids, "input hex " << to_hex(c.text)
                                              << (c.specials == tok::SpecialTokens::parse
                                                      ? " (specials parsed)"
                                                      : " (specials as text)"));
        byte_fallbacks += std::ranges::count_if(
            c.ids, [&](tok::TokenId id) { return t.token_type(id) == tok::TokenType::byte; });
    }
    BOOST_TEST_MESSAGE(golden().size() << " golden encodings, " << mismatches << " mismatches, "
                                       << byte_fallbacks << " byte-fallback tokens");
    BOOST_TEST(parsed >= 500u);
    BOOST_TEST(plain >= 500u);
    BOOST_TEST(byte_fallbacks >= 20u);  // the golden data exercises the fallback
}

BOOST_AUTO_TEST_CASE(decode_matches_sentencepiece_and_inverts_encode) {
    auto const& t = gemma3().tokenizer;
    for (auto const& c : golden()) {
        BOOST_REQUIRE(c.decoded.has_value());
        // The reference leaves control tokens out of its text, as SpecialText::skip does.
        BOOST_TEST(t.decode(c.ids, tok::SpecialText::skip) == *c.decoded,
                   "golden ids of input hex " << to_hex(c.text));
        BOOST_TEST(t.decode(t.encode(c.text, c.specials)) == with_spaces(c.text),
                   "input hex " << to_hex(c.text));
    }
}

BOOST_AUTO_TEST_CASE(ill_formed_utf8_is_one_byte_token_per_bad_byte) {
    auto const& t = gemma3().tokenizer;
    // A lone continuation byte, a truncated 3-byte character, bytes no UTF-8 has, a surrogate
    // and an overlong form, each between well-formed text.
    for (std::string const bad : {"\x80", "\xE6\x97", "\xFF\xFE", "\xED\xA0\x80", "\xC0\xAF"}) {
        std::string const text = "caf\xC3\xA9 " + bad + "\xE6\x97\xA5 ok";
        std::vector<tok::TokenId> expected = t.encode("caf\xC3\xA9 ");
        for (char const c : bad) expected.push_back(byte_token(t, static_cast<std::uint8_t>(c)));
        auto const tail = t.encode("\xE6\x97\xA5 ok");
        expected.insert(expected.end(), tail.begin(), tail.end());
        BOOST_TEST(t.encode(text) == expected, "bad bytes " << to_hex(bad));
        BOOST_TEST(t.decode(t.encode(text)) == text);
    }
}

BOOST_AUTO_TEST_CASE(random_bytes_round_trip) {
    auto const& t = gemma3().tokenizer;
    auto rng = tinfer::testing::seeded_rng(20261201);
    std::vector<std::string> const fragments{
        "<start_of_turn>", "<end_of_turn>",    " ",       "   ", "\n\n", "the",
        "\xE6\x97\xA5",    "\xF0\x9F\x98\x80", "<table>", "42",  "\t\t", "a b"};
    std::uniform_int_distribution<int> byte(0, 255), length(0, 60), choice(0, 3);
    std::uniform_int_distribution<std::size_t> fragment(0, fragments.size() - 1);
    std::size_t bad_bytes = 0;
    for (int trial = 0; trial < 1000; ++trial) {
        std::string text;
        for (int n = length(rng); static_cast<int>(text.size()) < n;) {
            if (choice(rng) == 0)
                text += fragments[fragment(rng)];
            else
                text += static_cast<char>(byte(rng));
        }
        for (std::size_t pos = 0; pos < text.size();) {
            auto const unit = tinfer::decode_utf8(text, pos);
            bad_bytes += !unit.valid;
            pos += unit.length;
        }
        for (auto const mode : {tok::SpecialTokens::parse, tok::SpecialTokens::as_text}) {
            BOOST_REQUIRE_MESSAGE(t.decode(t.encode(text, mode)) == with_spaces(text),
                                  "input hex " << to_hex(text));
        }
    }
    BOOST_TEST(bad_bytes >= 1000u);
}

BOOST_AUTO_TEST_CASE(prompts_start_with_bos) {
    auto const& t = gemma3().tokenizer;
    std::string const text = "<start_of_turn>user\nhi<end_of_turn>\n";
    auto const ids = t.encode(text);
    BOOST_TEST(ids.front() == 105);
    std::vector<tok::TokenId> expected{2};
    expected.insert(expected.end(), ids.begin(), ids.end());
    BOOST_TEST(t.encode_prompt(text) == expected);
    // Control-token text in untrusted content stays text.
    auto const plain = t.encode(text, tok::SpecialTokens::as_text);
    BOOST_TEST(std::ranges::none_of(
        plain, [&](tok::TokenId id) { return t.token_type(id) == tok::TokenType::control; }));
    BOOST_TEST(t.decode(t.encode_prompt(text), tok::SpecialText::skip) == "user\nhi\n");
}

BOOST_AUTO_TEST_CASE(stream_holds_back_byte_fallback_characters) {
    auto const& t = gemma3().tokenizer;
    // Characters the vocabulary spells only byte by byte, so tokens end inside them.
    std::string const text = "tag \xF3\xA0\x80\x81\xF3\xA0\x81\xA7 and \xF4\x8F\xBF\xBF.";
    auto const ids = t.encode(text);
    std::size_t split_characters = 0;
    std::string so_far;
    for (auto const id : ids) {
        so_far += t.token_bytes(id);
        split_characters += tinfer::utf8_complete_prefix(so_far) != so_far.size();
    }
    BOOST_REQUIRE_GE(split_characters, 3u);
    tok::StreamDetokenizer stream(t, tok::SpecialText::skip);
    std::string streamed;
    for (auto const id : ids) {
        std::string const piece = stream.push(id);
        BOOST_TEST(tinfer::utf8_complete_prefix(piece) == piece.size(), "piece " << to_hex(piece));
        streamed += piece;
    }
    BOOST_TEST(stream.finish().empty());
    BOOST_TEST(streamed == text);
}

BOOST_AUTO_TEST_CASE(chat_template_from_the_file) {
    // The file carries no tokenizer.chat_template: the architecture picks Gemma's.
    BOOST_TEST(!gemma3().file.find("tokenizer.chat_template"));
    auto const chat = tok::chat_template_from_gguf(gemma3().file);
    BOOST_TEST((chat.format() == tok::ChatFormat::gemma));
    auto const cases = tinfer::testing::read_golden_chats("gemma3_chat.tsv");
    BOOST_TEST(cases.size() >= 10u);
    for (auto const& c : cases) {
        BOOST_TEST(chat.render(c.messages, c.add_generation_prompt) == c.rendered);
    }
}

BOOST_AUTO_TEST_SUITE_END()
