// SentencePiece merging, byte fallback, the prefix space and special tokens on small hand-made
// vocabularies, against a naive reference merge written here; and the names GGUF loading
// accepts or refuses.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/unicode.hpp>
#include <tinfer/gguf/gguf.hpp>
#include <tinfer/gguf/gguf_writer.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>
#include <tinfer/tokenizer/tokenizer_gguf.hpp>
#include "golden_io.hpp"
#include "testing.hpp"

namespace tok = tinfer::tok;

namespace {

std::string const space = std::string(tok::sentencepiece_space);

// A SentencePiece vocabulary: `pieces` (▁-spelled, with scores) and `specials` (raw text, type),
// optionally the 256 <0xNN> byte tokens first.
struct ToyVocab {
    std::vector<std::string> tokens;
    std::vector<std::int32_t> types;
    std::vector<float> scores;

    ToyVocab(std::vector<std::pair<std::string, float>> const& pieces,
             std::vector<std::pair<std::string, tok::TokenType>> const& specials,
             bool byte_tokens = true) {
        for (auto const& [text, type] : specials) add(text, type, 0.f);
        if (byte_tokens) {
            for (unsigned b = 0; b < 256; ++b)
                add(tok::byte_fallback_text(static_cast<std::uint8_t>(b)), tok::TokenType::byte,
                    0.f);
        }
        for (auto const& [text, score] : pieces) add(text, tok::TokenType::normal, score);
    }
    void add(std::string text, tok::TokenType type, float score) {
        tokens.push_back(std::move(text));
        types.push_back(static_cast<std::int32_t>(type));
        scores.push_back(score);
    }
    std::optional<tok::TokenId> id_of(std::string_view text) const {
        auto const it = std::find(tokens.begin(), tokens.end(), text);
        if (it == tokens.end()) return std::nullopt;
        return static_cast<tok::TokenId>(it - tokens.begin());
    }
    tok::TokenId id(std::string_view text) const { return id_of(text).value(); }
    tok::TokenId byte(unsigned b) const {
        return id(tok::byte_fallback_text(static_cast<std::uint8_t>(b)));
    }
    tok::Tokenizer tokenizer(bool add_space_prefix = false, bool add_bos = false,
                             bool add_eos = false) const {
        tok::TokenizerSpec s;
        s.model = tok::TokenizerModel::sentencepiece;
        s.tokens.assign(tokens.begin(), tokens.end());
        s.token_types = types;
        s.scores = scores;
        s.bos = id_of("<s>");
        s.eos = id_of("</s>");
        s.unknown = id_of("<unk>");
        s.add_space_prefix = add_space_prefix;
        s.add_bos = add_bos;
        s.add_eos = add_eos;
        return tok::Tokenizer(s);
    }
};

// The merge written the slow, obvious way: among the current adjacent symbol pairs whose text
// is a normal token, merge the one with the highest score (leftmost on ties), until none is.
std::vector<tok::TokenId> naive_merge(ToyVocab const& v, std::string_view text) {
    std::map<std::string, std::pair<tok::TokenId, float>, std::less<>> normal;
    for (std::size_t i = 0; i < v.tokens.size(); ++i) {
        if (v.types[i] == static_cast<std::int32_t>(tok::TokenType::normal))
            normal[v.tokens[i]] = {static_cast<tok::TokenId>(i), v.scores[i]};
    }
    std::vector<std::string> symbols;
    std::vector<bool> bad;
    for (std::size_t pos = 0; pos < text.size();) {
        auto const unit = tinfer::decode_utf8(text, pos);
        symbols.emplace_back(text.substr(pos, unit.length));
        bad.push_back(!unit.valid);
        pos += unit.length;
    }
    for (;;) {
        std::optional<std::size_t> best;
        float best_score = 0;
        for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
            if (bad[i] || bad[i + 1]) continue;
            auto const it = normal.find(symbols[i] + symbols[i + 1]);
            if (it == normal.end()) continue;
            if (!best || it->second.second > best_score) {
                best = i;
                best_score = it->second.second;
            }
        }
        if (!best) break;
        symbols[*best] += symbols[*best + 1];
        symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(*best) + 1);
        bad.erase(bad.begin() + static_cast<std::ptrdiff_t>(*best) + 1);
    }
    std::vector<tok::TokenId> ids;
    for (std::size_t i = 0; i < symbols.size(); ++i) {
        auto const it = normal.find(symbols[i]);
        if (!bad[i] && it != normal.end()) {
            ids.push_back(it->second.first);
            continue;
        }
        for (unsigned char const c : symbols[i]) ids.push_back(v.byte(c));
    }
    return ids;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sentencepiece)

BOOST_AUTO_TEST_CASE(merges_by_score_not_by_position) {
    // "abc": "ab" and "bc" are both tokens; the higher score wins wherever it is.
    ToyVocab const v({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -5}, {"bc", -2}}, {});
    BOOST_TEST(v.tokenizer().encode("abc") == (std::vector{v.id("a"), v.id("bc")}));
    ToyVocab const w({{"a", -1}, {"b", -1}, {"c", -1}, {"ab", -2}, {"bc", -5}}, {});
    BOOST_TEST(w.tokenizer().encode("abc") == (std::vector{w.id("ab"), w.id("c")}));
    // Equal scores: the leftmost pair first.
    ToyVocab const tie({{"a", -1}, {"aa", -3}}, {});
    BOOST_TEST(tie.tokenizer().encode("aaa") == (std::vector{tie.id("aa"), tie.id("a")}));
}

BOOST_AUTO_TEST_CASE(equals_a_naive_merge_on_random_vocabularies) {
    auto rng = tinfer::testing::seeded_rng(611);
    std::vector<std::string> const alphabet{"a", "b", "c", space, "\xC3\xA9", "\xE6\x97\xA5"};
    std::uniform_int_distribution<std::size_t> letter(0, alphabet.size() - 1);
    std::uniform_int_distribution<int> piece_length(2, 5), text_length(0, 40), score(-20, 0);
    std::size_t merged_tokens = 0;
    for (int vocab = 0; vocab < 40; ++vocab) {
        std::vector<std::pair<std::string, float>> pieces;
        for (std::size_t i = 0; i + 1 < alphabet.size(); ++i) {  // the last letter: bytes only
            pieces.push_back({alphabet[i], -100.f});
        }
        for (int i = 0; i < 60; ++i) {
            std::string piece;
            for (int n = piece_length(rng); n > 0; --n) piece += alphabet[letter(rng)];
            if (std::none_of(pieces.begin(), pieces.end(),
                             [&](auto const& p) { return p.first == piece; }))
                pieces.push_back({piece, static_cast<float>(score(rng))});  // ties are common
        }
        ToyVocab const v(pieces, {});
        auto const t = v.tokenizer();
        for (int trial = 0; trial < 50; ++trial) {
            std::string text;
            for (int n = text_length(rng); n > 0; --n) text += alphabet[letter(rng)];
            auto const ids = t.encode(tok::unescape_spaces(text));
            BOOST_REQUIRE_MESSAGE(ids == naive_merge(v, text),
                                  "text hex " << tinfer::testing::to_hex(text));
            merged_tokens += std::ranges::count_if(ids, [&](tok::TokenId id) {
                return t.token_type(id) == tok::TokenType::normal && t.token_score(id) > -100.f;
            });
        }
    }
    BOOST_TEST(merged_tokens > 1000u);  // the vocabularies do merge
}

BOOST_AUTO_TEST_CASE(spaces_are_u2581_and_missing_characters_fall_back_to_bytes) {
    ToyVocab const v({{space, -1}, {"a", -1}, {space + "a", -2}}, {});
    auto const t = v.tokenizer();
    // "日" has no token: its three bytes.
    auto const ids = t.encode(" a \xE6\x97\xA5");
    BOOST_TEST(ids == (std::vector{v.id(space + "a"), v.id(space), v.byte(0xE6), v.byte(0x97),
                                   v.byte(0xA5)}));
    BOOST_TEST(t.decode(ids) == " a \xE6\x97\xA5");
    BOOST_TEST(t.token_bytes(v.id(space + "a")) == " a");
    // Each ill-formed byte is its own byte token, even where its neighbours would merge.
    BOOST_TEST(t.encode(" \xFF"
                        "a") == (std::vector{v.id(space), v.byte(0xFF), v.id("a")}));
    BOOST_TEST(t.decode(t.encode("\xC3\x28\xE2\x82")) == "\xC3\x28\xE2\x82");
}

BOOST_AUTO_TEST_CASE(without_byte_tokens_bytes_fall_back_to_unknown) {
    ToyVocab const v({{"a", -1}}, {{"<unk>", tok::TokenType::unknown}}, /*byte_tokens=*/false);
    auto const t = v.tokenizer();
    BOOST_TEST(t.encode("ab") == (std::vector{v.id("a"), v.id("<unk>")}));
    BOOST_TEST(t.spells_byte('a'));   // a one-character token spells its byte
    BOOST_TEST(!t.spells_byte('b'));  // only <unk> stands for it, as in llama.cpp
    BOOST_TEST(t.decode(t.encode("ab"), tok::SpecialText::skip) == "a");
}

BOOST_AUTO_TEST_CASE(merges_never_make_control_tokens) {
    // <x> is a control token; the pieces that would merge into it are normal.
    ToyVocab const v({{"<", -1}, {"x", -1}, {">", -1}, {"<x", -2}},
                     {{"<x>", tok::TokenType::control}, {"[u]", tok::TokenType::user_defined}});
    auto const t = v.tokenizer();
    BOOST_TEST(t.encode("<x>") == (std::vector{v.id("<x>")}));
    auto const plain = t.encode("<x>[u]", tok::SpecialTokens::as_text);
    // As text, <x> is spelled from pieces; the user-defined [u] is content and still split out.
    BOOST_TEST(plain == (std::vector{v.id("<x"), v.id(">"), v.id("[u]")}));
}

BOOST_AUTO_TEST_CASE(many_specials_with_one_first_byte_split_the_same) {
    // Past 32 special tokens with one first byte (Gemma: <unused0>.. <unused6241>) they are
    // looked up by length instead of scanned; the split must stay leftmost-longest.
    std::vector<std::pair<std::string, tok::TokenType>> specials;
    for (int i = 0; i < 40; ++i)
        specials.push_back({"<c" + std::to_string(i) + ">", tok::TokenType::control});
    specials.push_back({"<u>", tok::TokenType::user_defined});
    specials.push_back({"<c1", tok::TokenType::user_defined});
    ToyVocab const v({{"<", -1}, {"c", -1}, {"1", -1}, {"2", -1}, {">", -1}, {"u", -1}}, specials);
    auto const t = v.tokenizer();
    BOOST_TEST(t.encode("<c12><u><c1>") == (std::vector{v.id("<c12>"), v.id("<u>"), v.id("<c1>")}));
    // <c12> is control: as text the user-defined <c1 matches instead.
    BOOST_TEST(
        t.encode("<c12><u><c1>", tok::SpecialTokens::as_text) ==
        (std::vector{v.id("<c1"), v.id("2"), v.id(">"), v.id("<u>"), v.id("<c1"), v.id(">")}));
    BOOST_TEST(t.encode("<c3") == (std::vector{v.id("<"), v.id("c"), v.byte('3')}));
}

BOOST_AUTO_TEST_CASE(prefix_space_before_each_fragment_and_off_again_at_the_start) {
    ToyVocab const v({{space, -1}, {"h", -1}, {"i", -1}, {space + "h", -2}, {space + "hi", -3}},
                     {{"<s>", tok::TokenType::control}, {"</s>", tok::TokenType::control}});
    auto const t = v.tokenizer(/*add_space_prefix=*/true, /*add_bos=*/true, /*add_eos=*/true);
    BOOST_TEST(t.encode("hi") == (std::vector{v.id(space + "hi")}));
    BOOST_TEST(t.decode(t.encode("hi")) == "hi");
    BOOST_TEST(t.decode(t.encode(" hi")) == " hi");
    // After a special token the fragment gets its own prefix (llama.cpp), which decoding keeps:
    // only the text's first token loses its space.
    auto const ids = t.encode("hi</s>hi");
    BOOST_TEST(ids == (std::vector{v.id(space + "hi"), v.id("</s>"), v.id(space + "hi")}));
    BOOST_TEST(t.decode(ids) == "hi</s> hi");
    // A prompt: BOS and EOS around it; with BOS first, decoding keeps the prefix space.
    auto const prompt = t.encode_prompt("hi");
    BOOST_TEST(prompt == (std::vector{v.id("<s>"), v.id(space + "hi"), v.id("</s>")}));
    BOOST_TEST(t.decode(prompt, tok::SpecialText::skip) == " hi");
    BOOST_TEST(t.encode("").empty());

    auto const no_prefix = v.tokenizer();
    BOOST_TEST(no_prefix.encode("hi") == (std::vector{v.id("h"), v.id("i")}));
    BOOST_TEST(no_prefix.encode_prompt("hi") == no_prefix.encode("hi"));
}

BOOST_AUTO_TEST_CASE(end_of_generation_tokens_by_id_and_by_text) {
    ToyVocab const v({{"a", -1}}, {{"<s>", tok::TokenType::control},
                                   {"</s>", tok::TokenType::control},
                                   {"<end_of_turn>", tok::TokenType::control},
                                   {"<|im_end|>", tok::TokenType::control},
                                   {"<start_of_turn>", tok::TokenType::control}});
    auto const t = v.tokenizer();
    std::vector<tok::TokenId> const ends(t.end_of_generation().begin(),
                                         t.end_of_generation().end());
    BOOST_TEST(ends == (std::vector{v.id("</s>"), v.id("<end_of_turn>"), v.id("<|im_end|>")}));
    BOOST_TEST(!t.ends_generation(v.id("<start_of_turn>")));
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// A GGUF holding only tokenizer metadata (and the architecture).
struct TokenizerFile {
    tinfer::gguf::Writer writer;
    std::vector<std::byte> bytes;

    TokenizerFile(std::string const& model, std::vector<std::string> const& tokens,
                  std::string const& architecture = "llama") {
        writer.add("general.architecture", tinfer::gguf::Value(architecture));
        writer.add("tokenizer.ggml.model", tinfer::gguf::Value(model));
        writer.add_strings("tokenizer.ggml.tokens", tokens);
    }
    tinfer::gguf::File file() {
        bytes = writer.to_bytes();
        return tinfer::gguf::File::from_bytes(bytes);
    }
};

std::string error_of(auto&& load) {
    try {
        load();
    } catch (tinfer::Error const& e) {
        return e.what();
    }
    return "no error";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gguf_tokenizer_names)

BOOST_AUTO_TEST_CASE(files_pick_the_tokenizer_by_model) {
    std::vector<std::string> const pieces{"<unk>", "<s>", "</s>",      space,
                                          "h",     "i",   space + "h", space + "hi"};
    auto const sentencepiece_file = [&](std::string const& architecture) {
        TokenizerFile spm("llama", pieces, architecture);
        spm.writer.add_array<std::int32_t>("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1, 1, 1});
        spm.writer.add_array<float>("tokenizer.ggml.scores", {0, 0, 0, -1, -1, -1, -2, -3});
        spm.writer.add("tokenizer.ggml.bos_token_id", tinfer::gguf::Value(std::uint32_t{1}));
        spm.writer.add("tokenizer.ggml.eos_token_id", tinfer::gguf::Value(std::uint32_t{2}));
        return spm;
    };
    {
        // No flags in the file: llama.cpp's SentencePiece defaults, BOS and a prefix space.
        auto spm = sentencepiece_file("llama");
        auto const file = spm.file();
        auto const t = tok::tokenizer_from_gguf(file);
        BOOST_TEST((t.model() == tok::TokenizerModel::sentencepiece));
        BOOST_TEST(t.add_bos());
        BOOST_TEST(t.add_space_prefix());
        BOOST_TEST(t.encode_prompt("hi") == (std::vector<tok::TokenId>{1, 7}));
        BOOST_TEST((tok::chat_template_from_gguf(file).format() == tok::ChatFormat::chatml));
        // A template's {{ bos_token }} renders as nothing where the tokenizer adds BOS: one BOS.
        spm.writer.add("tokenizer.chat_template",
                       tinfer::gguf::Value(
                           std::string("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}")));
        auto const templated = spm.file();
        std::vector<tok::ChatMessage> const messages{{"user", "hi"}};
        std::string const rendered =
            tok::chat_template_from_gguf(templated).render(messages, false);
        BOOST_TEST(rendered == "hi</s>");
        BOOST_TEST(t.encode_prompt(rendered) == (std::vector<tok::TokenId>{1, 7, 2}));
    }
    {
        auto spm = sentencepiece_file("gemma3");
        spm.writer.add("tokenizer.ggml.add_space_prefix", tinfer::gguf::Value(false));
        spm.writer.add("tokenizer.ggml.add_bos_token", tinfer::gguf::Value(false));
        auto const file = spm.file();
        auto const t = tok::tokenizer_from_gguf(file);
        BOOST_TEST(!t.add_bos());
        BOOST_TEST(t.encode_prompt("hi") == (std::vector<tok::TokenId>{4, 5}));
        BOOST_TEST((tok::chat_template_from_gguf(file).format() == tok::ChatFormat::gemma));
        // Where it does not, {{ bos_token }} is the BOS token's text, parsed back into BOS: one
        // BOS.
        spm.writer.add(
            "tokenizer.chat_template",
            tinfer::gguf::Value(std::string("{{ bos_token }}{{ messages[0].content }}")));
        auto const templated = spm.file();
        std::vector<tok::ChatMessage> const messages{{"user", "hi"}};
        std::string const rendered =
            tok::chat_template_from_gguf(templated).render(messages, false);
        BOOST_TEST(rendered == "<s>hi");
        BOOST_TEST(t.encode_prompt(rendered) == (std::vector<tok::TokenId>{1, 4, 5}));
    }

    TokenizerFile bert("bert", pieces);
    BOOST_TEST(error_of([&] { tok::tokenizer_from_gguf(bert.file()); }) ==
               "tokenizer.ggml.model 'bert' is not supported; supported: gpt2 (byte-level BPE), "
               "llama (SentencePiece)");

    TokenizerFile bpe("gpt2", {"a", "b", "ab"});
    bpe.writer.add_strings("tokenizer.ggml.merges", {"a b"});
    BOOST_TEST(error_of([&] { tok::tokenizer_from_gguf(bpe.file()); }) ==
               "tokenizer.ggml.pre is missing; supported: gpt-2, smollm, starcoder");
    bpe.writer.add("tokenizer.ggml.pre", tinfer::gguf::Value(std::string("gpt-2")));
    auto const file = bpe.file();
    auto const t = tok::tokenizer_from_gguf(file);
    BOOST_TEST((t.pre_tokenizer() == tok::PreTokenizer::gpt2));
    BOOST_TEST(t.encode("ab") == (std::vector<tok::TokenId>{2}));
}

// Every tokenizer.ggml.pre name llama.cpp knows (src/llama-vocab.cpp, as vendored in
// llama-cpp-python 0.3.36): 91 names.
constexpr std::array<std::string_view, 91> llama_cpp_pre_tokenizers{"a.x-4.0",
                                                                    "afmoe",
                                                                    "bailingmoe",
                                                                    "bailingmoe2",
                                                                    "bloom",
                                                                    "chameleon",
                                                                    "chatglm-bpe",
                                                                    "codeshell",
                                                                    "cohere2moe",
                                                                    "command-r",
                                                                    "dbrx",
                                                                    "deepseek-coder",
                                                                    "deepseek-llm",
                                                                    "deepseek-r1-qwen",
                                                                    "deepseek-v3",
                                                                    "default",
                                                                    "exaone",
                                                                    "exaone-moe",
                                                                    "exaone4",
                                                                    "f2llmv2",
                                                                    "falcon",
                                                                    "falcon-h1",
                                                                    "falcon3",
                                                                    "gemma4",
                                                                    "gigachat",
                                                                    "glm4",
                                                                    "glm5",
                                                                    "gpt-2",
                                                                    "gpt-4o",
                                                                    "gpt3-finnish",
                                                                    "granite-docling",
                                                                    "granite-embed-multi-311m",
                                                                    "granite-embed-multi-97m",
                                                                    "grok-2",
                                                                    "hunyuan",
                                                                    "hunyuan-dense",
                                                                    "hy_v4",
                                                                    "jais",
                                                                    "jais-2",
                                                                    "jina-de",
                                                                    "jina-es",
                                                                    "jina-v1-en",
                                                                    "jina-v2-code",
                                                                    "jina-v2-de",
                                                                    "jina-v2-es",
                                                                    "jina-v5-nano",
                                                                    "joyai-llm",
                                                                    "kanana2",
                                                                    "kimi-k2",
                                                                    "kormo",
                                                                    "laguna",
                                                                    "lfm2",
                                                                    "llada-moe",
                                                                    "llama-bpe",
                                                                    "llama-v3",
                                                                    "llama3",
                                                                    "llama4",
                                                                    "megrez",
                                                                    "mellum",
                                                                    "mellum2",
                                                                    "midm-2.0",
                                                                    "minerva-7b",
                                                                    "minicpm5",
                                                                    "minimax-m2",
                                                                    "modern-bert",
                                                                    "mpt",
                                                                    "olmo",
                                                                    "phi-2",
                                                                    "pixtral",
                                                                    "poro-chat",
                                                                    "qwen2",
                                                                    "qwen35",
                                                                    "refact",
                                                                    "roberta-bpe",
                                                                    "sarvam-moe",
                                                                    "seed-coder",
                                                                    "smaug-bpe",
                                                                    "smollm",
                                                                    "solar-open",
                                                                    "spark2_5",
                                                                    "stablelm2",
                                                                    "starcoder",
                                                                    "superbpe",
                                                                    "talkie",
                                                                    "tekken",
                                                                    "tiny_aya",
                                                                    "trillion",
                                                                    "ufakzeka",
                                                                    "viking",
                                                                    "whitespace",
                                                                    "youtu"};

BOOST_AUTO_TEST_CASE(every_llama_cpp_pre_tokenizer_is_supported_or_refused) {
    std::size_t accepted = 0;
    for (std::string_view const name : llama_cpp_pre_tokenizers) {
        try {
            auto const pre = tok::pre_tokenizer_named(name);
            ++accepted;
            BOOST_TEST(
                (pre == (name == "gpt-2" ? tok::PreTokenizer::gpt2 : tok::PreTokenizer::smollm)),
                name);
        } catch (tinfer::Error const& e) {
            std::string_view const what = e.what();
            BOOST_TEST(
                what.find("'" + std::string(name) + "' is not supported") != std::string_view::npos,
                what);
            BOOST_TEST(what.ends_with("supported: gpt-2, smollm, starcoder"), what);
        }
    }
    BOOST_TEST(accepted == 3u);  // gpt-2, smollm, starcoder
}

BOOST_AUTO_TEST_CASE(gpt2_and_smollm_pre_tokenizers_are_accepted) {
    BOOST_TEST((tok::pre_tokenizer_named("gpt-2") == tok::PreTokenizer::gpt2));
    BOOST_TEST((tok::pre_tokenizer_named("smollm") == tok::PreTokenizer::smollm));
    BOOST_TEST((tok::pre_tokenizer_named("starcoder") == tok::PreTokenizer::smollm));
    BOOST_TEST((tok::tokenizer_model_named("gpt2") == tok::TokenizerModel::byte_level_bpe));
    BOOST_TEST((tok::tokenizer_model_named("llama") == tok::TokenizerModel::sentencepiece));
}

BOOST_AUTO_TEST_CASE(other_names_are_refused_with_the_supported_ones) {
    // llama.cpp's names for pre-tokenizers tinfer does not implement, its "default" (not
    // GPT-2's pattern), and a spelling llama.cpp never writes.
    for (std::string const name : {"llama3", "qwen2", "deepseek-coder", "default", "gpt2", ""}) {
        std::string const what = error_of([&] { tok::pre_tokenizer_named(name); });
        BOOST_TEST(what.starts_with("tokenizer.ggml.pre '" + name + "' is not supported"), what);
        BOOST_TEST(what.ends_with("supported: gpt-2, smollm, starcoder"), what);
    }
    std::string const what = error_of([] { tok::tokenizer_model_named("bert"); });
    BOOST_TEST(what ==
               "tokenizer.ggml.model 'bert' is not supported; supported: gpt2 (byte-level BPE), "
               "llama (SentencePiece)");
}

BOOST_AUTO_TEST_SUITE_END()
