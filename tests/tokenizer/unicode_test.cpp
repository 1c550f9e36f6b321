// UTF-8 decoding, character classes, the GPT-2 byte table and the pre-tokenizer's pieces.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include <utf8proc.h>

#include <tinfer/core/unicode.hpp>
#include <tinfer/tokenizer/tokenizer_byte_level.hpp>
#include <tinfer/tokenizer/tokenizer_pretokenizer.hpp>
#include "golden_io.hpp"
#include "testing.hpp"

namespace tok = tinfer::tok;

namespace {

// utf8proc's own decoder is the independent reference for well-formedness. Returns whether
// both agree (plain bool: millions of calls, so no Boost assertion per call).
bool same_as_utf8proc(std::string const& bytes) {
    utf8proc_int32_t reference_cp = -1;
    auto const reference =
        utf8proc_iterate(reinterpret_cast<utf8proc_uint8_t const*>(bytes.data()),
                         static_cast<utf8proc_ssize_t>(bytes.size()), &reference_cp);
    tinfer::Utf8Unit const unit = tinfer::decode_utf8(bytes, 0);
    if (reference > 0) {
        return unit.valid && unit.length == reference &&
               unit.code_point == static_cast<char32_t>(reference_cp);
    }
    return !unit.valid && unit.length == 1 && unit.code_point == U'\uFFFD';
}

void expect_same_as_utf8proc(std::string const& bytes) {
    if (same_as_utf8proc(bytes)) return;
    BOOST_FAIL("decode_utf8 disagrees with utf8proc on bytes " << tinfer::testing::to_hex(bytes));
}

std::vector<std::string> pieces_of(tok::PreTokenizer kind, std::string const& text) {
    std::vector<std::string> out;
    for (auto const piece : tok::pre_tokenize(kind, text)) out.emplace_back(piece);
    return out;
}

using Pieces = std::vector<std::string>;

}  // namespace

BOOST_AUTO_TEST_SUITE(unicode)

BOOST_AUTO_TEST_CASE(decode_matches_utf8proc_on_every_sequence_up_to_three_bytes) {
    std::string bytes(3, '\0');
    for (unsigned a = 0; a < 256; ++a) {
        for (unsigned b = 0; b < 256; ++b) {
            for (unsigned c = 0; c < 256; ++c) {
                bytes[0] = static_cast<char>(a);
                bytes[1] = static_cast<char>(b);
                bytes[2] = static_cast<char>(c);
                expect_same_as_utf8proc(bytes);
            }
            expect_same_as_utf8proc(bytes.substr(0, 2));
        }
        expect_same_as_utf8proc(bytes.substr(0, 1));
    }
}

BOOST_AUTO_TEST_CASE(decode_matches_utf8proc_on_four_byte_sequences) {
    auto rng = tinfer::testing::seeded_rng(4);
    std::uniform_int_distribution<int> any(0, 255), tail(0x70, 0xC5);
    std::string bytes(4, '\0');
    for (unsigned lead = 0xE8; lead < 0x100; ++lead) {
        for (unsigned second = 0; second < 256; ++second) {
            for (int trial = 0; trial < 64; ++trial) {
                bytes[0] = static_cast<char>(lead);
                bytes[1] = static_cast<char>(second);
                bytes[2] = static_cast<char>(trial % 2 ? tail(rng) : any(rng));
                bytes[3] = static_cast<char>(tail(rng));
                expect_same_as_utf8proc(bytes);
            }
        }
    }
}

BOOST_AUTO_TEST_CASE(complete_prefix_holds_back_only_unfinished_characters) {
    BOOST_TEST(tinfer::utf8_complete_prefix("") == 0u);
    BOOST_TEST(tinfer::utf8_complete_prefix("ab") == 2u);
    // Every proper prefix of a character is held back; the whole character is not.
    for (char32_t const cp : {U'\u00E9', U'\u0800', U'\u20AC', U'\uD7FF', U'\uE000', U'\uFFFD',
                              U'\U00010000', U'\U0001F44B', U'\U00100000', U'\U0010FFFF'}) {
        std::string character;
        tinfer::append_utf8(character, cp);
        std::string text = "a";
        for (char const byte : character) {
            text += byte;
            std::size_t const expected = text.size() == 1 + character.size() ? text.size() : 1;
            BOOST_TEST(tinfer::utf8_complete_prefix(text) == expected,
                       "U+" << std::hex << std::uint32_t(cp) << " prefix of " << text.size() - 1);
        }
    }
    // Bytes that can never become well-formed are not held back.
    BOOST_TEST(tinfer::utf8_complete_prefix("a\x80") == 2u);
    BOOST_TEST(tinfer::utf8_complete_prefix("a\xFF") == 2u);
    BOOST_TEST(tinfer::utf8_complete_prefix("a\xC0") == 2u);
    BOOST_TEST(tinfer::utf8_complete_prefix("a\xED\xA0") == 3u);      // surrogate
    BOOST_TEST(tinfer::utf8_complete_prefix("a\xE0\x80") == 3u);      // overlong
    BOOST_TEST(tinfer::utf8_complete_prefix("a\xF4\x90\x80") == 4u);  // above U+10FFFF
    BOOST_TEST(tinfer::utf8_complete_prefix("a\xF4\x8F\x80") == 1u);
    BOOST_TEST(tinfer::utf8_complete_prefix("a\xC3\xA9\x80\x80\x80") == 6u);
}

BOOST_AUTO_TEST_CASE(classes_follow_unicode_categories) {
    using C = tinfer::CharClass;
    struct Case {
        char32_t cp;
        C expected;
    };
    for (auto const [cp, expected] : std::vector<Case>{
             {U'a', C::letter},          {U'Z', C::letter},          {U'\u00E9', C::letter},
             {U'\u65E5', C::letter},     {U'\u02B0', C::letter},     {U'\u01C5', C::letter},
             {U'7', C::number},          {U'\u0663', C::number},     {U'\u2167', C::number},
             {U'\u00BD', C::number},     {U'\u00B2', C::number},     {U'\uFF13', C::number},
             {U' ', C::whitespace},      {U'\t', C::whitespace},     {U'\n', C::whitespace},
             {U'\v', C::whitespace},     {U'\f', C::whitespace},     {U'\r', C::whitespace},
             {U'\u0085', C::whitespace}, {U'\u00A0', C::whitespace}, {U'\u1680', C::whitespace},
             {U'\u2000', C::whitespace}, {U'\u200A', C::whitespace}, {U'\u2028', C::whitespace},
             {U'\u2029', C::whitespace}, {U'\u202F', C::whitespace}, {U'\u205F', C::whitespace},
             {U'\u3000', C::whitespace}, {U'\u200B', C::other},      {U'\u180E', C::other},
             {U'\u0301', C::other},      {U'!', C::other},           {U'_', C::other},
             {U'\u00AD', C::other},      {U'\U0001F600', C::other},  {U'\u001F', C::other},
             {U'\u0000', C::other},      {U'\uFEFF', C::other}}) {
        BOOST_TEST((tinfer::classify(cp) == expected), "U+" << std::hex << std::uint32_t(cp));
    }
}

BOOST_AUTO_TEST_CASE(byte_table_is_gpt2s_bijection) {
    std::set<char32_t> seen;
    for (unsigned b = 0; b < 256; ++b) {
        char32_t const cp = tok::byte_to_code_point(static_cast<std::uint8_t>(b));
        BOOST_TEST(seen.insert(cp).second);
        BOOST_TEST((tinfer::classify(cp) != tinfer::CharClass::whitespace));
        auto const back = tok::code_point_to_byte(cp);
        BOOST_REQUIRE(back.has_value());
        BOOST_TEST(*back == b);
    }
    BOOST_TEST(std::uint32_t(tok::byte_to_code_point(' ')) == 0x120u);   // Ġ
    BOOST_TEST(std::uint32_t(tok::byte_to_code_point('\n')) == 0x10Au);  // Ċ
    BOOST_TEST(std::uint32_t(tok::byte_to_code_point('a')) == std::uint32_t('a'));
    BOOST_TEST(std::uint32_t(tok::byte_to_code_point(0xAD)) == 0x143u);
    BOOST_TEST(!tok::code_point_to_byte(U' ').has_value());
    BOOST_TEST(!tok::code_point_to_byte(0x144).has_value());
}

BOOST_AUTO_TEST_SUITE_END()

// Expected pieces below are what HF `tokenizers` (pre_tokenize_str) gives for the same input.
BOOST_AUTO_TEST_SUITE(pre_tokenizer)

BOOST_AUTO_TEST_CASE(whitespace_runs_leave_the_last_space_to_the_next_word) {
    auto const smollm = tok::PreTokenizer::smollm;
    BOOST_TEST(pieces_of(smollm, "hello  world\n\n hi  ") ==
               (Pieces{"hello", " ", " world", "\n\n", " hi", "  "}));
    BOOST_TEST(pieces_of(smollm, "   a") == (Pieces{"  ", " a"}));
    BOOST_TEST(pieces_of(smollm, "\n\nhello") == (Pieces{"\n", "\n", "hello"}));
    BOOST_TEST(pieces_of(smollm, "a \t b") == (Pieces{"a", " \t", " b"}));
    BOOST_TEST(pieces_of(smollm, " ") == (Pieces{" "}));
    BOOST_TEST(pieces_of(smollm, "").empty());
}

BOOST_AUTO_TEST_CASE(contractions_are_case_sensitive) {
    auto const smollm = tok::PreTokenizer::smollm;
    BOOST_TEST(pieces_of(smollm, "don't 'S") == (Pieces{"don", "'t", " '", "S"}));
    BOOST_TEST(pieces_of(smollm, "we'LL they'll") == (Pieces{"we", "'", "LL", " they", "'ll"}));
    BOOST_TEST(pieces_of(smollm, "x''s") == (Pieces{"x", "''", "s"}));
}

BOOST_AUTO_TEST_CASE(smollm_splits_every_number_character) {
    BOOST_TEST(pieces_of(tok::PreTokenizer::smollm, "a 123b") ==
               (Pieces{"a", " ", "1", "2", "3", "b"}));
    BOOST_TEST(pieces_of(tok::PreTokenizer::smollm, "x\u00B2\u00BD\u2167\u0663") ==
               (Pieces{"x", "\u00B2", "\u00BD", "\u2167", "\u0663"}));
    BOOST_TEST(pieces_of(tok::PreTokenizer::gpt2, "a 123b") == (Pieces{"a", " 123", "b"}));
}

BOOST_AUTO_TEST_CASE(invalid_bytes_act_as_symbols_and_keep_their_bytes) {
    BOOST_TEST(pieces_of(tok::PreTokenizer::smollm, "hello \xFF\x80! world") ==
               (Pieces{"hello", " \xFF\x80!", " world"}));
    BOOST_TEST(pieces_of(tok::PreTokenizer::smollm, "caf\xC3") == (Pieces{"caf", "\xC3"}));
}

BOOST_AUTO_TEST_CASE(pieces_always_cover_the_input) {
    auto rng = tinfer::testing::seeded_rng(11);
    std::uniform_int_distribution<int> byte(0, 255), length(0, 40);
    for (int trial = 0; trial < 3000; ++trial) {
        std::string text(static_cast<std::size_t>(length(rng)), '\0');
        for (auto& c : text) c = static_cast<char>(byte(rng));
        for (auto const kind : {tok::PreTokenizer::gpt2, tok::PreTokenizer::smollm}) {
            std::string joined;
            for (auto const piece : tok::pre_tokenize(kind, text)) {
                BOOST_REQUIRE(!piece.empty());
                joined += piece;
            }
            BOOST_REQUIRE(joined == text);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
