#pragma once
// The checks both tokenizer fuzz targets run on a real model's tokenizer. The first input byte
// picks what the rest is:
//   text  (two of four values): encode it both ways (control tokens parsed and as text), check
//         every id is in the vocabulary, a second encode gives the same ids (the piece cache),
//         as_text never yields a control token, the round trip the tokenizer promises, and the
//         pre-tokenizer's pieces partition the text (byte-level BPE).
//   ids   : the rest as little-endian int32 token ids, raw or folded onto the vocabulary's
//         edges; decode must throw tinfer::Error exactly when an id is outside the vocabulary,
//         and otherwise streaming decode must hand out pieces that add up to the same bytes,
//         each whole UTF-8 when those bytes are.
//   ids -> text -> ids: decoded text encodes back to tokens that decode to it again.
// Anything else escaping, a sanitizer report or a failed check is a crash.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/unicode.hpp>
#include <tinfer/tokenizer/tokenizer.hpp>
#include <tinfer/tokenizer/tokenizer_stream.hpp>

#include "fuzz_support.hpp"

namespace fuzz {

using tinfer::tok::SpecialText;
using tinfer::tok::SpecialTokens;
using tinfer::tok::TokenId;
using tinfer::tok::Tokenizer;
using tinfer::tok::TokenizerModel;
using tinfer::tok::TokenType;

inline std::string show_ids(std::vector<TokenId> const& ids, std::size_t max = 40) {
    std::string out = "[";
    for (std::size_t i = 0; i < ids.size() && i < max; ++i) {
        if (i) out += ' ';
        out += std::to_string(ids[i]);
    }
    return out + (ids.size() > max ? " ...]" : "]");
}

inline bool in_vocabulary(Tokenizer const& t, TokenId id) {
    return id >= 0 && static_cast<std::size_t>(id) < t.vocab_size();
}

// Token bytes as they come, with no prefix space taken off (what the streaming decoder sees).
inline std::string raw_bytes(Tokenizer const& t, std::vector<TokenId> const& ids,
                             SpecialText specials) {
    std::string out;
    for (TokenId const id : ids) t.append_token(out, id, specials);
    return out;
}

// What decode(encode(text)) must give back, when the tokenizer promises anything
// (tokenizer.hpp's header): byte-level BPE drops the bytes the vocabulary cannot spell and
// keeps the rest; SentencePiece gives the text back if it has no U+2581 of its own (that
// decodes as a space), every byte is spelled (else the unknown token stands in), and no prefix
// space was added after a special token (only the one at the start is taken off again).
inline std::optional<std::string> promised_round_trip(Tokenizer const& t, std::string_view text,
                                                      std::vector<TokenId> const& ids) {
    if (t.model() == TokenizerModel::byte_level_bpe) {
        std::string kept;
        for (char const c : text)
            if (t.spells_byte(static_cast<std::uint8_t>(c))) kept += c;
        return kept;
    }
    if (text.find(tinfer::tok::sentencepiece_space) != std::string_view::npos) return std::nullopt;
    for (char const c : text)
        if (!t.spells_byte(static_cast<std::uint8_t>(c))) return std::nullopt;
    if (t.add_space_prefix()) {
        for (TokenId const id : ids)
            if (t.token_type(id) == TokenType::control ||
                t.token_type(id) == TokenType::user_defined)
                return std::nullopt;
    }
    return std::string(text);
}

inline void check_ids_in_vocabulary(Tokenizer const& t, std::vector<TokenId> const& ids,
                                    std::string_view text) {
    for (TokenId const id : ids)
        FUZZ_CHECK(in_vocabulary(t, id), "encode gave id " + std::to_string(id) +
                                             " outside the vocabulary for " + c_literal(text));
}

inline void check_text(Tokenizer const& t, std::string_view text) {
    for (SpecialTokens const specials : {SpecialTokens::parse, SpecialTokens::as_text}) {
        char const* const how = specials == SpecialTokens::parse ? "parse" : "as_text";
        std::vector<TokenId> const ids = t.encode(text, specials);
        check_ids_in_vocabulary(t, ids, text);
        FUZZ_CHECK(t.encode(text, specials) == ids,
                   std::string("a second encode (") + how + ") differs for " + c_literal(text));
        if (specials == SpecialTokens::as_text) {
            for (TokenId const id : ids)
                FUZZ_CHECK(t.token_type(id) != TokenType::control,
                           "encode(as_text) gave control token " + std::to_string(id) + " " +
                               c_literal(t.token_text(id)) + " for " + c_literal(text));
        }
        std::string const decoded = t.decode(ids);
        if (auto const expected = promised_round_trip(t, text, ids)) {
            FUZZ_CHECK(decoded == *expected, std::string("decode(encode(s, ") + how +
                                                 ")) != s: s = " + c_literal(text) + ", ids " +
                                                 show_ids(ids) + ", got " + c_literal(decoded) +
                                                 ", expected " + c_literal(*expected));
        }
        (void)t.decode(ids, SpecialText::skip);
    }
    std::vector<TokenId> const prompt = t.encode_prompt(text);
    check_ids_in_vocabulary(t, prompt, text);
    if (t.model() == TokenizerModel::byte_level_bpe) {
        // The pieces are consecutive substrings of the text that cover all of it.
        char const* next = text.data();
        tinfer::tok::pre_tokenize(t.pre_tokenizer(), text, [&](std::string_view piece) {
            FUZZ_CHECK(!piece.empty() && piece.data() == next,
                       "pre-tokenizer pieces do not partition " + c_literal(text));
            next += piece.size();
        });
        FUZZ_CHECK(next == text.data() + text.size(),
                   "pre-tokenizer pieces do not cover " + c_literal(text));
    }
}

// Ids from the input: raw int32 values (mostly far outside the vocabulary), or folded onto
// [-32, vocab + 32) so that most decode and the edges are hit.
inline std::vector<TokenId> ids_from(Tokenizer const& t, std::uint8_t const* data, std::size_t size,
                                     bool raw) {
    std::vector<TokenId> ids;
    for (std::size_t i = 0; i + 4 <= size; i += 4) {
        std::uint32_t v;
        std::memcpy(&v, data + i, 4);
        if (raw) {
            ids.push_back(static_cast<TokenId>(v));
        } else {
            auto const span = static_cast<std::uint32_t>(t.vocab_size() + 64);
            ids.push_back(static_cast<TokenId>(v % span) - 32);
        }
    }
    return ids;
}

inline void check_ids(Tokenizer const& t, std::vector<TokenId> const& ids) {
    bool const valid =
        std::all_of(ids.begin(), ids.end(), [&](TokenId id) { return in_vocabulary(t, id); });
    for (SpecialText const specials : {SpecialText::keep, SpecialText::skip}) {
        std::string decoded;
        try {
            decoded = t.decode(ids, specials);
            FUZZ_CHECK(valid, "decode accepted an id outside the vocabulary: " + show_ids(ids));
        } catch (tinfer::Error const& e) {
            FUZZ_CHECK(!valid, std::string("decode refused ids that are all in the vocabulary: ") +
                                   e.what() + " " + show_ids(ids));
            FUZZ_CHECK(
                std::string_view(e.what()).find("outside the vocabulary") != std::string_view::npos,
                std::string("decode's error does not say what is wrong: ") + e.what());
            continue;
        }
        // Streaming decode: the same bytes in all and, when they are well-formed UTF-8, whole
        // characters in every piece (ill-formed bytes are handed out as soon as the next byte
        // shows they can never complete, so a piece may then end in a broken sequence).
        std::string const raw = raw_bytes(t, ids, specials);
        bool const well_formed = valid_utf8(raw);
        tinfer::tok::StreamDetokenizer stream(t, specials);
        std::string streamed;
        for (TokenId const id : ids) {
            std::string const piece = stream.push(id);
            FUZZ_CHECK(!well_formed || valid_utf8(piece),
                       "the streaming decoder handed out a broken character " + c_literal(piece) +
                           " from well-formed text, ids " + show_ids(ids));
            streamed += piece;
        }
        streamed += stream.finish();
        FUZZ_CHECK(streamed == raw,
                   "streamed text differs from the tokens' bytes for " + show_ids(ids));
        if (specials == SpecialText::keep) {
            // Decoded text encodes to tokens that decode to it again (the ids need not be the
            // same: many id sequences spell one text).
            std::vector<TokenId> const again = t.encode(decoded);
            if (auto const expected = promised_round_trip(t, decoded, again)) {
                std::string const redecoded = t.decode(again);
                FUZZ_CHECK(redecoded == *expected,
                           "decode(encode(decode(ids))) != decode(ids) for " + show_ids(ids) +
                               ": text " + c_literal(decoded) + ", re-encoded " + show_ids(again) +
                               ", got " + c_literal(redecoded));
            }
        }
    }
    for (TokenId const id : ids) {
        try {
            (void)t.token_bytes(id);
            (void)t.token_text(id);
            (void)t.token_type(id);
            (void)t.token_score(id);
            FUZZ_CHECK(in_vocabulary(t, id), "token_bytes accepted id " + std::to_string(id));
        } catch (tinfer::Error const&) {
            FUZZ_CHECK(!in_vocabulary(t, id), "token_bytes refused id " + std::to_string(id));
        }
        (void)t.ends_generation(id);
    }
}

inline void fuzz_tokenizer(Tokenizer const& t, std::uint8_t const* data, std::size_t size) {
    if (size == 0) return;
    std::uint8_t const mode = data[0];
    ++data;
    --size;
    switch (mode & 3) {
        case 0:
        case 1:
            check_text(t, std::string_view(reinterpret_cast<char const*>(data), size));
            break;
        case 2:
            check_ids(t, ids_from(t, data, size, /*raw=*/(mode & 4) != 0));
            break;
        default:
            // Decoded valid ids as text for the text checks (text the vocabulary can spell).
            std::vector<TokenId> ids = ids_from(t, data, size, /*raw=*/false);
            std::erase_if(ids, [&](TokenId id) { return !in_vocabulary(t, id); });
            check_text(t, t.decode(ids));
            break;
    }
}

}  // namespace fuzz
