// The SmolLM2 vocabulary read from the real GGUF: ids identical to HF `tokenizers` built from
// the same vocabulary and merges (tests/data/tokenizer/golden.tsv), byte-exact round trips, and
// streaming detokenization.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include <tinfer/core/unicode.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>
#include <tinfer/tokenizer/tokenizer_stream.hpp>
#include "golden_io.hpp"
#include "testing.hpp"

namespace tok = tinfer::tok;
using tinfer::testing::to_hex;

namespace {

struct SmolLM2 {
    tinfer::gguf::File file = tinfer::gguf::File::open(tinfer::testing::model_path());
    tok::Tokenizer tokenizer = tok::tokenizer_from_gguf(file);
};

SmolLM2 const& smollm2() {
    static SmolLM2 const model;  // parsing 49152 tokens once is enough
    return model;
}

// What decode(encode(text)) gives back: the text without the bytes the vocabulary lacks.
std::string spellable(tok::Tokenizer const& t, std::string_view text) {
    std::string out;
    for (char const c : text) {
        if (t.spells_byte(static_cast<std::uint8_t>(c))) out += c;
    }
    return out;
}

bool is_well_formed_utf8(std::string_view text) {
    for (std::size_t pos = 0; pos < text.size();) {
        auto const unit = tinfer::decode_utf8(text, pos);
        if (!unit.valid) return false;
        pos += unit.length;
    }
    return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(smollm2_tokenizer)

BOOST_AUTO_TEST_CASE(vocabulary_matches_the_file) {
    auto const& t = smollm2().tokenizer;
    BOOST_TEST(t.vocab_size() == 49152u);
    BOOST_TEST((t.pre_tokenizer() == tok::PreTokenizer::smollm));
    BOOST_TEST((t.bos_id() == std::optional<tok::TokenId>(1)));
    BOOST_TEST((t.eos_id() == std::optional<tok::TokenId>(2)));
    // <|im_end|> is EOS; <|endoftext|> also ends generation, as in llama.cpp.
    std::vector<tok::TokenId> const ends(t.end_of_generation().begin(),
                                         t.end_of_generation().end());
    BOOST_TEST(ends == (std::vector<tok::TokenId>{0, 2}));
    BOOST_TEST((t.model() == tok::TokenizerModel::byte_level_bpe));
    BOOST_TEST(t.encode_prompt("hi") == t.encode("hi"));  // add_bos is false
    BOOST_TEST(!t.add_bos());
    BOOST_TEST(t.token_text(1) == "<|im_start|>");
    BOOST_TEST((t.token_type(2) == tok::TokenType::control));
    BOOST_TEST((t.token_type(17) == tok::TokenType::normal));
    BOOST_TEST(t.token_bytes(*t.find_token_text("\xC4\xA0the")) == " the");
}

BOOST_AUTO_TEST_CASE(ids_match_hf_tokenizers) {
    auto const& t = smollm2().tokenizer;
    auto const cases = tinfer::testing::read_golden_encodings();
    std::size_t parsed = 0, plain = 0, invalid = 0, mismatches = 0;
    for (auto const& c : cases) {
        (c.specials == tok::SpecialTokens::parse ? parsed : plain) += 1;
        invalid += !is_well_formed_utf8(c.text);
        auto const ids = t.encode(c.text, c.specials);
        if (ids != c.ids) ++mismatches;
        BOOST_TEST(ids == c.ids, "input hex " << to_hex(c.text)
                                              << (c.specials == tok::SpecialTokens::parse
                                                      ? " (specials parsed)"
                                                      : " (specials as text)"));
    }
    BOOST_TEST_MESSAGE(cases.size() << " golden encodings, " << mismatches << " mismatches");
    BOOST_TEST(parsed >= 300u);
    BOOST_TEST(plain >= 300u);
    BOOST_TEST(invalid >= 40u);
}

BOOST_AUTO_TEST_CASE(only_bytes_missing_from_the_vocabulary_are_dropped) {
    auto const& t = smollm2().tokenizer;
    // The 21 bytes SmolLM2's vocabulary has no token for; all other text round-trips exactly.
    std::vector<unsigned> const missing{0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0,
                                        0xC1, 0xF1, 0xF2, 0xF5, 0xF6, 0xF7, 0xF8,
                                        0xF9, 0xFA, 0xFB, 0xFC, 0xFD, 0xFE, 0xFF};
    for (unsigned b = 0; b < 256; ++b) {
        bool const is_missing = std::find(missing.begin(), missing.end(), b) != missing.end();
        BOOST_TEST(t.spells_byte(static_cast<std::uint8_t>(b)) == !is_missing, "byte " << b);
        std::string const one(1, static_cast<char>(b));
        BOOST_TEST(t.decode(t.encode(one)) == (is_missing ? "" : one), "byte " << b);
    }
}

BOOST_AUTO_TEST_CASE(decode_inverts_encode_on_golden_texts) {
    auto const& t = smollm2().tokenizer;
    for (auto const& c : tinfer::testing::read_golden_encodings()) {
        auto const expected = spellable(t, c.text);
        BOOST_TEST(t.decode(t.encode(c.text, c.specials)) == expected,
                   "input hex " << to_hex(c.text));
        BOOST_TEST(t.decode(c.ids) == expected, "golden ids of input hex " << to_hex(c.text));
    }
}

BOOST_AUTO_TEST_CASE(decode_inverts_encode_on_random_bytes) {
    auto const& t = smollm2().tokenizer;
    auto rng = tinfer::testing::seeded_rng(77);
    std::vector<std::string> const fragments{
        "<|im_start|>", "<|im_end|>",       " ",  "  ", "\n", "the",
        "\xE6\x97\xA5", "\xF0\x9F\x98\x80", "'s", "42", "\t"};
    std::uniform_int_distribution<int> byte(0, 255), length(0, 60), choice(0, 3);
    std::uniform_int_distribution<std::size_t> fragment(0, fragments.size() - 1);
    for (int trial = 0; trial < 2000; ++trial) {
        std::string text;
        for (int n = length(rng); static_cast<int>(text.size()) < n;) {
            if (choice(rng) == 0)
                text += fragments[fragment(rng)];
            else
                text += static_cast<char>(byte(rng));
        }
        for (auto const mode : {tok::SpecialTokens::parse, tok::SpecialTokens::as_text}) {
            auto const ids = t.encode(text, mode);
            BOOST_REQUIRE_MESSAGE(t.decode(ids) == spellable(t, text),
                                  "input hex " << to_hex(text));
        }
    }
}

BOOST_AUTO_TEST_CASE(special_tokens_parse_only_when_asked) {
    auto const& t = smollm2().tokenizer;
    std::string const text = "<|im_start|>user\nhi<|im_end|>";
    BOOST_TEST(t.encode(text) == (std::vector<tok::TokenId>{1, 4093, 198, 6004, 2}));
    auto const plain = t.encode(text, tok::SpecialTokens::as_text);
    BOOST_TEST(std::none_of(plain.begin(), plain.end(), [&](tok::TokenId id) {
        return t.token_type(id) == tok::TokenType::control;
    }));
    BOOST_TEST(t.decode(t.encode(text), tok::SpecialText::skip) == "user\nhi");
}

BOOST_AUTO_TEST_CASE(chat_template_from_the_file) {
    // The file's own template, run by the Jinja interpreter: the one stored in tests/data
    // (which chat_template_test compares with jinja2), byte for byte.
    auto const chat = tok::chat_template_from_gguf(smollm2().file);
    BOOST_TEST((chat.format() == tok::ChatFormat::jinja));
    std::ifstream stored(tinfer::testing::data_dir() / "tokenizer/chat_templates/smollm2.jinja");
    BOOST_TEST(smollm2().file.get<std::string>("tokenizer.chat_template") ==
               std::string(std::istreambuf_iterator<char>(stored), {}));
    for (auto const& c : tinfer::testing::read_golden_chats()) {
        BOOST_TEST(chat.render(c.messages, c.add_generation_prompt) == c.rendered);
    }
}

BOOST_AUTO_TEST_CASE(stream_hands_out_only_whole_characters) {
    auto const& t = smollm2().tokenizer;
    std::string const text =
        "Emoji \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 and "
        "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 "
        "\xF0\x9F\xA7\xAA\xF0\x9F\xA6\x80<|im_end|>";
    auto const ids = t.encode(text);
    // The test only means something if some token ends inside a character.
    std::size_t split_characters = 0;
    std::string so_far;
    for (auto const id : ids) {
        so_far += t.token_bytes(id);
        split_characters += tinfer::utf8_complete_prefix(so_far) != so_far.size();
    }
    BOOST_REQUIRE_GE(split_characters, 3u);

    tok::StreamDetokenizer stream(t, tok::SpecialText::keep);
    std::string streamed;
    for (auto const id : ids) {
        std::string const piece = stream.push(id);
        BOOST_TEST(is_well_formed_utf8(piece), "piece hex " << to_hex(piece));
        streamed += piece;
    }
    BOOST_TEST(stream.held_back().empty());
    BOOST_TEST(stream.finish().empty());
    BOOST_TEST(streamed == text);

    tok::StreamDetokenizer skipping(t, tok::SpecialText::skip);
    std::string shown;
    for (auto const id : ids) shown += skipping.push(id);
    BOOST_TEST(shown == text.substr(0, text.size() - std::string_view("<|im_end|>").size()));
}

BOOST_AUTO_TEST_CASE(stream_releases_an_unfinished_character_at_the_end) {
    auto const& t = smollm2().tokenizer;
    std::string const truncated = "ok \xF0\x9F\x98";  // the first 3 bytes of an emoji
    tok::StreamDetokenizer stream(t, tok::SpecialText::keep);
    std::string streamed;
    for (auto const id : t.encode(truncated)) streamed += stream.push(id);
    BOOST_TEST(streamed == "ok ");
    BOOST_TEST(stream.held_back() == "\xF0\x9F\x98");
    BOOST_TEST(stream.finish() == "\xF0\x9F\x98");
    BOOST_TEST(stream.held_back().empty());
}

BOOST_AUTO_TEST_SUITE_END()
