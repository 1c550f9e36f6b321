#pragma once
// SentencePiece BPE (the GGUF "llama" tokenizer model, used by Llama 2, Mistral, Gemma): spaces
// are spelled U+2581 ("▁") inside tokens, and a text is merged from its characters by score
// rather than by a merge list: repeatedly, the adjacent pair whose concatenation is a token
// with the highest score (leftmost among equal scores) becomes one symbol. This is
// SentencePiece's bpe_model.cc and llama.cpp's llm_tokenizer_spm; symbols that end up not being
// tokens are spelled byte by byte with the <0xNN> tokens (byte fallback).
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/unicode.hpp>

namespace tinfer::tok {

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
inline constexpr std::string_view sentencepiece_space = "\xE2\x96\x81";

// How a byte-fallback token is spelled: "<0x0A>" (upper-case hex, as SentencePiece writes it).
inline std::string byte_fallback_text(std::uint8_t byte) {
    static constexpr char digits[] = "0123456789ABCDEF";
    return std::string{'<', '0', 'x', digits[byte >> 4], digits[byte & 15], '>'};
}

// The byte a byte-fallback token stands for, or nullopt when `text` is not "<0xNN>".
inline std::optional<std::uint8_t> byte_of_fallback_text(std::string_view text) {
    if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return std::nullopt;
    auto const nibble = [](char c) -> int {
        if (c >= '0' && c <= '9') return c - '0';
        if (c >= 'A' && c <= 'F') return c - 'A' + 10;
        if (c >= 'a' && c <= 'f') return c - 'a' + 10;
        return -1;
    };
    int const hi = nibble(text[3]), lo = nibble(text[4]);
    if (hi < 0 || lo < 0) return std::nullopt;
    return static_cast<std::uint8_t>(hi * 16 + lo);
}

// Every ' ' as U+2581, the way the vocabulary spells spaces.
inline std::string escape_spaces(std::string_view text) {
    std::string out;
    out.reserve(text.size() + text.size() / 4);
    for (char const c : text) {
        if (c == ' ')
            out += sentencepiece_space;
        else
            out += c;
    }
    return out;
}

// Every U+2581 as ' '.
inline std::string unescape_spaces(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
        if (text.substr(pos).starts_with(sentencepiece_space)) {
            out += ' ';
            pos += sentencepiece_space.size();
        } else {
            out += text[pos++];
        }
    }
    return out;
}

// A token the merge may produce, with its score.
struct ScoredToken {
    std::int32_t id;
    float score;
};

// Appends the tokens of `text` (spaces already escaped) to `ids`. `find(std::string_view)`
// returns the ScoredToken spelled exactly so, or nullopt; it decides which tokens merges may
// produce (SentencePiece leaves control and byte tokens out, so plain text can never become
// one). `byte_tokens[b]` is the token for byte b, or -1 to drop a byte the vocabulary cannot
// spell. A byte that is not well-formed UTF-8 stays a symbol of its own that never merges, so
// it comes out as its own byte token.
template <class Find>
void sentencepiece_merge(std::string_view text, Find const& find,
                         std::array<std::int32_t, 256> const& byte_tokens,
                         std::vector<std::int32_t>& ids) {
    if (text.empty()) return;
    if (text.size() > INT32_MAX) throw Error("sentencepiece: text longer than 2 GiB");
    struct Symbol {
        std::int32_t start, length;  // bytes of text; length 0 once merged into its left
        std::int32_t prev, next;     // neighbours in the chain, -1 at the ends
        bool frozen;                 // an ill-formed byte
    };
    struct Candidate {
        float score;
        std::int32_t left, right, length;  // length: both symbols' bytes when it was pushed
        bool operator<(Candidate const& o) const {
            // std::priority_queue pops the largest: highest score, then leftmost.
            return score != o.score ? score < o.score : left > o.left;
        }
    };
    std::vector<Symbol> symbols;
    symbols.reserve(text.size());
    for (std::size_t pos = 0; pos < text.size();) {
        Utf8Unit const unit = decode_utf8(text, pos);
        auto const i = static_cast<std::int32_t>(symbols.size());
        symbols.push_back({static_cast<std::int32_t>(pos), unit.length, i - 1, i + 1, !unit.valid});
        pos += unit.length;
    }
    symbols.back().next = -1;

    std::priority_queue<Candidate> queue;
    auto const consider = [&](std::int32_t left, std::int32_t right) {
        if (left < 0 || right < 0 || symbols[left].frozen || symbols[right].frozen) return;
        std::int32_t const length = symbols[left].length + symbols[right].length;
        auto const token = find(text.substr(symbols[left].start, length));
        if (token) queue.push({token->score, left, right, length});
    };
    for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(symbols.size()); ++i) {
        consider(i, i + 1);
    }
    while (!queue.empty()) {
        Candidate const c = queue.top();
        queue.pop();
        Symbol& left = symbols[c.left];
        Symbol& right = symbols[c.right];
        // Symbols only grow, so an unchanged total length means neither side has merged since.
        if (left.length == 0 || right.length == 0 || left.length + right.length != c.length) {
            continue;
        }
        left.length += right.length;
        right.length = 0;
        left.next = right.next;
        if (left.next >= 0) symbols[left.next].prev = c.left;
        consider(left.prev, c.left);
        consider(c.left, left.next);
    }
    for (std::int32_t i = 0; i >= 0; i = symbols[i].next) {
        std::string_view const piece = text.substr(symbols[i].start, symbols[i].length);
        if (auto const token = symbols[i].frozen ? std::nullopt : find(piece)) {
            ids.push_back(token->id);
            continue;
        }
        for (char const c : piece) {
            std::int32_t const id = byte_tokens[static_cast<std::uint8_t>(c)];
            if (id >= 0) ids.push_back(id);
        }
    }
}

}  // namespace tinfer::tok
