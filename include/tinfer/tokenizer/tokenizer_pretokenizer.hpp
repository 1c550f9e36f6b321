#pragma once
// The pre-tokenizers of byte-level BPE vocabularies: text -> pieces that BPE merges within.
//
// gpt2:   the GPT-2 pattern
//           's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// smollm: (llama.cpp's "smollm" and "starcoder") first every \p{N} character is a piece of its
//         own, then the GPT-2 pattern runs inside each remaining span.
//
// The pattern is scanned by hand over code points classified by utf8proc, with the leftmost-
// first alternation and backtracking semantics of a regex engine. A byte that is not well-formed
// UTF-8 is a piece character like U+FFFD would be ([^\s\p{L}\p{N}]) but keeps its own byte, so
// every piece is a substring of the input and the pieces concatenate back to it.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <tinfer/core/error.hpp>
#include <tinfer/core/unicode.hpp>

namespace tinfer::tok {

enum class PreTokenizer : std::uint8_t { gpt2, smollm };

namespace detail {

struct ClassifiedUnit {
    std::uint32_t offset;  // byte offset of the unit in the text
    CharClass cls;
};

// Units of `text` with a sentinel whose offset is text.size().
inline void classify_units(std::string_view text, std::vector<ClassifiedUnit>& units) {
    if (text.size() > UINT32_MAX) throw Error("pre-tokenizer: text longer than 4 GiB");
    units.clear();
    units.reserve(text.size() + 1);
    for (std::size_t pos = 0; pos < text.size();) {
        Utf8Unit const unit = decode_utf8(text, pos);
        units.push_back({static_cast<std::uint32_t>(pos),
                         unit.valid ? classify(unit.code_point) : CharClass::other});
        pos += unit.length;
    }
    units.push_back({static_cast<std::uint32_t>(text.size()), CharClass::other});
}

// Length of the contraction ('s 't 're 've 'm 'll 'd, case-sensitive like the pattern) that
// starts at the apostrophe text[pos], or 0.
inline std::size_t contraction_length(std::string_view text, std::size_t pos, std::size_t end) {
    std::string_view const rest = text.substr(pos + 1, end - pos - 1);
    if (rest.empty()) return 0;
    char const c = rest[0];
    if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
    if (rest.size() >= 2 &&
        (rest.starts_with("re") || rest.starts_with("ve") || rest.starts_with("ll"))) {
        return 3;
    }
    return 0;
}

// The GPT-2 pattern over units [begin, end), which the caller treats as a whole string: the
// lookahead of \s+(?!\S) sees the end of the span as the end of the text.
template <class Emit>
void scan_gpt2(std::string_view text, std::vector<ClassifiedUnit> const& units, std::size_t begin,
               std::size_t end, Emit& emit) {
    auto const piece = [&](std::size_t from, std::size_t to) {
        emit(text.substr(units[from].offset, units[to].offset - units[from].offset));
    };
    std::size_t const end_byte = units[end].offset;
    std::size_t i = begin;
    while (i < end) {
        char const byte = text[units[i].offset];
        if (byte == '\'') {
            if (std::size_t const n = contraction_length(text, units[i].offset, end_byte)) {
                piece(i, i + n);  // contraction characters are ASCII: one unit per byte
                i += n;
                continue;
            }
        }
        // " ?X+" for X in {\p{L}, \p{N}, [^\s\p{L}\p{N}]}: the optional space is taken only when
        // the run it precedes is one of those classes, never whitespace.
        std::size_t run_start = i;
        if (byte == ' ' && i + 1 < end && units[i + 1].cls != CharClass::whitespace)
            run_start = i + 1;
        CharClass const cls = units[run_start].cls;
        std::size_t k = run_start;
        while (k < end && units[k].cls == cls) ++k;
        if (cls != CharClass::whitespace) {
            piece(i, k);
        } else if (k == end || k - i == 1) {
            // \s+(?!\S) takes a run that reaches the end; a single whitespace before \S falls
            // through to \s+.
            piece(i, k);
        } else {
            // \s+(?!\S) backtracks one character so the last whitespace stays with what follows.
            piece(i, k - 1);
            k = k - 1;
        }
        i = k;
    }
}

}  // namespace detail

// Calls emit(std::string_view piece) for each piece of `text`, in order; the pieces are
// consecutive substrings covering the whole text.
template <class Emit>
void pre_tokenize(PreTokenizer kind, std::string_view text, Emit&& emit) {
    std::vector<detail::ClassifiedUnit> units;
    detail::classify_units(text, units);
    std::size_t const n = units.size() - 1;
    if (kind == PreTokenizer::gpt2) {
        detail::scan_gpt2(text, units, 0, n, emit);
        return;
    }
    std::size_t span_start = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (units[i].cls != CharClass::number) continue;
        if (span_start < i) detail::scan_gpt2(text, units, span_start, i, emit);
        emit(text.substr(units[i].offset, units[i + 1].offset - units[i].offset));
        span_start = i + 1;
    }
    if (span_start < n) detail::scan_gpt2(text, units, span_start, n, emit);
}

inline std::vector<std::string_view> pre_tokenize(PreTokenizer kind, std::string_view text) {
    std::vector<std::string_view> pieces;
    pre_tokenize(kind, text, [&](std::string_view piece) { pieces.push_back(piece); });
    return pieces;
}

}  // namespace tinfer::tok
