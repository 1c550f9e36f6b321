// BPE merging and special-token splitting on small hand-made vocabularies, against a naive
// reference BPE written here.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <tinfer/tokenizer/tokenizer.hpp>
#include "testing.hpp"

namespace tok = tinfer::tok;

namespace {

std::string spell(std::string_view bytes) {  // bytes -> byte-level spelling
    std::string out;
    for (unsigned char c : bytes) tinfer::append_utf8(out, tok::byte_to_code_point(c));
    return out;
}

// A vocabulary of the 256 byte tokens followed by `extra` (given as raw bytes), `merges` as
// pairs of raw byte strings, and `specials` (raw text, type) appended at the end.
using Merges = std::vector<std::pair<std::string, std::string>>;
using Specials = std::vector<std::pair<std::string, tok::TokenType>>;

struct ToyVocab {
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    std::vector<std::string> merges;

    explicit ToyVocab(Merges const& merge_pairs, Specials const& specials = {},
                      bool with_all_bytes = true) {
        for (unsigned b = 0; b < 256; ++b) {
            if (with_all_bytes || b == 'a' || b == 'b')
                add(spell(std::string(1, char(b))), tok::TokenType::normal);
        }
        for (auto const& [left, right] : merge_pairs) {
            merges.push_back(spell(left) + " " + spell(right));
            if (!id_of(spell(left + right))) add(spell(left + right), tok::TokenType::normal);
        }
        for (auto const& [text, type] : specials) add(text, type);
    }
    void add(std::string text, tok::TokenType type) {
        tokens.push_back(std::move(text));
        types.push_back(static_cast<std::int32_t>(type));
    }
    std::optional<tok::TokenId> id_of(std::string const& text) const {
        auto const it = std::find(tokens.begin(), tokens.end(), text);
        if (it == tokens.end()) return std::nullopt;
        return static_cast<tok::TokenId>(it - tokens.begin());
    }
    tok::TokenId id(std::string_view raw) const { return id_of(spell(raw)).value(); }
    tok::TokenizerSpec spec() const {
        tok::TokenizerSpec s;
        s.tokens.assign(tokens.begin(), tokens.end());
        s.token_types = types;
        s.merges.assign(merges.begin(), merges.end());
        return s;
    }
    tok::Tokenizer tokenizer() const { return tok::Tokenizer(spec()); }
};

// The textbook algorithm: find the adjacent pair with the lowest rank (leftmost on ties), merge
// it, repeat. Quadratic, obviously right.
std::vector<std::string> naive_bpe(
    std::string const& piece,
    std::map<std::pair<std::string, std::string>, std::size_t> const& ranks) {
    std::vector<std::string> parts;
    for (char c : piece) parts.emplace_back(1, c);
    for (;;) {
        std::size_t best_rank = std::numeric_limits<std::size_t>::max(), best_at = 0;
        for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
            auto const it = ranks.find({parts[i], parts[i + 1]});
            if (it != ranks.end() && it->second < best_rank) best_rank = it->second, best_at = i;
        }
        if (best_rank == std::numeric_limits<std::size_t>::max()) return parts;
        parts[best_at] += parts[best_at + 1];
        parts.erase(parts.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(bpe)

BOOST_AUTO_TEST_CASE(lowest_rank_merges_first) {
    ToyVocab const bc_first(Merges{{"b", "c"}, {"a", "b"}});
    BOOST_TEST(bc_first.tokenizer().encode("abc") ==
               (std::vector<tok::TokenId>{bc_first.id("a"), bc_first.id("bc")}));
    ToyVocab const ab_first(Merges{{"a", "b"}, {"b", "c"}});
    BOOST_TEST(ab_first.tokenizer().encode("abc") ==
               (std::vector<tok::TokenId>{ab_first.id("ab"), ab_first.id("c")}));
    ToyVocab const chained(Merges{{"b", "c"}, {"a", "b"}, {"a", "bc"}});
    BOOST_TEST(chained.tokenizer().encode("abc") == (std::vector<tok::TokenId>{chained.id("abc")}));
}

BOOST_AUTO_TEST_CASE(equal_ranks_merge_leftmost_first) {
    ToyVocab const v(Merges{{"a", "a"}, {"aa", "aa"}});
    auto const t = v.tokenizer();
    BOOST_TEST(t.encode("aaa") == (std::vector<tok::TokenId>{v.id("aa"), v.id("a")}));
    BOOST_TEST(t.encode("aaaa") == (std::vector<tok::TokenId>{v.id("aaaa")}));
    BOOST_TEST(t.encode("aaaaa") == (std::vector<tok::TokenId>{v.id("aaaa"), v.id("a")}));
}

BOOST_AUTO_TEST_CASE(matches_naive_bpe_on_random_vocabularies) {
    auto rng = tinfer::testing::seeded_rng(2024);
    std::string const alphabet = "abc d\xC3\xA9";
    for (int vocab_trial = 0; vocab_trial < 20; ++vocab_trial) {
        // Merges grown like a trainer would: each joins two existing pieces.
        std::vector<std::string> pieces;
        for (char c : alphabet) pieces.emplace_back(1, c);
        Merges merges;
        std::map<std::pair<std::string, std::string>, std::size_t> ranks;
        std::uniform_int_distribution<std::size_t> count(5, 120);
        for (std::size_t m = count(rng); merges.size() < m;) {
            std::uniform_int_distribution<std::size_t> pick(0, pieces.size() - 1);
            auto const left = pieces[pick(rng)], right = pieces[pick(rng)];
            if (ranks.contains({left, right})) continue;
            ranks[{left, right}] = merges.size();
            merges.emplace_back(left, right);
            if (std::find(pieces.begin(), pieces.end(), left + right) == pieces.end()) {
                pieces.push_back(left + right);
            }
        }
        ToyVocab const v(merges);
        auto const t = v.tokenizer();
        std::uniform_int_distribution<std::size_t> length(0, 80), letter(0, alphabet.size() - 1);
        for (int text_trial = 0; text_trial < 200; ++text_trial) {
            std::string text;
            for (std::size_t n = length(rng); text.size() < n;) text += alphabet[letter(rng)];
            std::vector<tok::TokenId> expected;
            for (auto const piece : tok::pre_tokenize(tok::PreTokenizer::smollm, text)) {
                for (auto const& part : naive_bpe(std::string(piece), ranks))
                    expected.push_back(v.id(part));
            }
            BOOST_REQUIRE_MESSAGE(t.encode(text) == expected, "text '" << text << "'");
            BOOST_REQUIRE(t.decode(t.encode(text)) == text);
        }
    }
}

BOOST_AUTO_TEST_CASE(specials_split_leftmost_longest_and_can_be_plain_text) {
    ToyVocab const v(Merges{{"a", "b"}}, Specials{{"<a>", tok::TokenType::control},
                                                  {"<a><b>", tok::TokenType::control},
                                                  {"hello world", tok::TokenType::user_defined}});
    auto const t = v.tokenizer();
    auto const control_a = *v.id_of("<a>"), control_ab = *v.id_of("<a><b>");
    auto const user = *v.id_of("hello world");
    std::string const text = "x<a><b>y<a>hello world<a";
    auto const ids = t.encode(text);
    std::vector<tok::TokenId> const expected{v.id("x"), control_ab, v.id("y"), control_a,
                                             user,      v.id("<"),  v.id("a")};
    BOOST_TEST(ids == expected);
    BOOST_TEST(t.decode(ids) == text);
    BOOST_TEST(t.decode(ids, tok::SpecialText::skip) == "xyhello world<a");

    // As plain text, control-token text is merged like any other; user-defined tokens are
    // content and are still split out, as llama.cpp and HF `tokenizers` do.
    auto const plain = t.encode(text, tok::SpecialTokens::as_text);
    for (auto const id : plain) BOOST_TEST((t.token_type(id) != tok::TokenType::control));
    BOOST_TEST(std::count(plain.begin(), plain.end(), user) == 1);
    BOOST_TEST(t.decode(plain) == text);
    BOOST_TEST(t.token_bytes(user) == "hello world");
}

BOOST_AUTO_TEST_CASE(normal_tokens_decode_from_the_byte_alphabet) {
    ToyVocab const v(Merges{{" ", "a"}, {"\n", "\n"}});
    auto const t = v.tokenizer();
    BOOST_TEST(t.token_text(v.id(" a")) ==
               "\xC4\xA0"
               "a");  // "Ġa"
    BOOST_TEST(t.token_bytes(v.id(" a")) == " a");
    BOOST_TEST(t.token_bytes(v.id("\n\n")) == "\n\n");
    BOOST_TEST(t.encode("\n\n") == (std::vector<tok::TokenId>{v.id("\n\n")}));
}

BOOST_AUTO_TEST_CASE(a_copy_outlives_its_original) {
    ToyVocab const v(Merges{{"a", "b"}});
    std::optional<tok::Tokenizer> original(v.tokenizer());
    tok::Tokenizer const copy = *original;
    original.reset();
    BOOST_TEST(copy.encode("abab") == (std::vector<tok::TokenId>{v.id("ab"), v.id("ab")}));
    BOOST_TEST((copy.find_token_text("ab") == std::optional<tok::TokenId>(v.id("ab"))));
}

BOOST_AUTO_TEST_CASE(bad_vocabularies_are_refused) {
    ToyVocab v(Merges{{"a", "b"}});
    auto spec = v.spec();
    spec.token_types.pop_back();
    BOOST_CHECK_THROW(tok::Tokenizer{spec}, tinfer::Error);

    spec = v.spec();
    std::string const bad_merge = "a zz";
    spec.merges.push_back(bad_merge);
    BOOST_CHECK_THROW(tok::Tokenizer{spec}, tinfer::Error);

    spec = v.spec();
    spec.eos = static_cast<tok::TokenId>(v.tokens.size());
    BOOST_CHECK_THROW(tok::Tokenizer{spec}, tinfer::Error);

    auto const t = v.tokenizer();
    std::vector<tok::TokenId> const out_of_range{static_cast<tok::TokenId>(v.tokens.size())};
    BOOST_CHECK_THROW(t.decode(out_of_range), tinfer::Error);
    std::vector<tok::TokenId> const negative{-1};
    BOOST_CHECK_THROW(t.decode(negative), tinfer::Error);
}

BOOST_AUTO_TEST_CASE(bytes_the_vocabulary_cannot_spell_are_dropped) {
    // HF `tokenizers` gives [ab], [ab], [] for these three (BPE without an unknown token).
    ToyVocab const v(Merges{{"a", "b"}}, Specials{{"<unk>", tok::TokenType::unknown}},
                     /*with_all_bytes=*/false);
    auto spec = v.spec();
    spec.unknown = *v.id_of("<unk>");
    tok::Tokenizer const t(spec);
    BOOST_TEST(t.spells_byte('a'));
    BOOST_TEST(!t.spells_byte('c'));
    BOOST_TEST(t.encode("abc") == (std::vector<tok::TokenId>{v.id("ab")}));
    BOOST_TEST(t.encode("acb") == (std::vector<tok::TokenId>{v.id("ab")}));
    BOOST_TEST(t.encode("cc").empty());
}

BOOST_AUTO_TEST_SUITE_END()
