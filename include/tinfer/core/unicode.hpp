#pragma once
// UTF-8 decoding that never fails (invalid bytes come back one at a time, flagged) and the
// Unicode character classes the pre-tokenizer needs, taken from utf8proc's tables.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <utf8proc.h>

namespace tinfer {

// One step of decoding: a code point, or one byte that does not start a well-formed sequence.
struct Utf8Unit {
    char32_t code_point;  // U+FFFD for an invalid byte
    std::uint8_t length;  // bytes consumed: 1..4
    bool valid;
};

// Decodes the unit at `text[pos]` (pos < text.size()). Well-formed means the Unicode standard's
// table 3-7: no overlong forms, no surrogates, nothing above U+10FFFF. An ill-formed sequence
// consumes exactly one byte, so decoding resumes at the next byte; this splits bad input into
// the same units as the standard's "maximal subpart" rule does, because a continuation byte
// can never start a well-formed sequence.
constexpr Utf8Unit decode_utf8(std::string_view text, std::size_t pos) {
    auto const byte = [&](std::size_t i) { return static_cast<std::uint8_t>(text[i]); };
    std::uint8_t const lead = byte(pos);
    Utf8Unit const invalid{U'\uFFFD', 1, false};
    if (lead < 0x80) return {lead, 1, true};
    std::size_t length = 0;
    char32_t value = 0;
    std::uint8_t second_lo = 0x80, second_hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
        value = lead & 0x1Fu;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        value = lead & 0x0Fu;
        if (lead == 0xE0) second_lo = 0xA0;  // overlong
        if (lead == 0xED) second_hi = 0x9F;  // surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        value = lead & 0x07u;
        if (lead == 0xF0) second_lo = 0x90;  // overlong
        if (lead == 0xF4) second_hi = 0x8F;  // above U+10FFFF
    } else {
        return invalid;
    }
    if (pos + length > text.size()) return invalid;
    for (std::size_t i = 1; i < length; ++i) {
        std::uint8_t const lo = i == 1 ? second_lo : 0x80, hi = i == 1 ? second_hi : 0xBF;
        std::uint8_t const b = byte(pos + i);
        if (b < lo || b > hi) return invalid;
        value = (value << 6) | (b & 0x3Fu);
    }
    return {value, static_cast<std::uint8_t>(length), true};
}

inline void append_utf8(std::string& out, char32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// How many leading bytes of `bytes` can be shown now: everything except a trailing sequence
// that is a proper prefix of a well-formed one, since the next bytes may complete it. Bytes
// that can never become well-formed are not held back.
constexpr std::size_t utf8_complete_prefix(std::string_view bytes) {
    std::size_t const n = bytes.size();
    // A well-formed sequence is at most 4 bytes, so only the last 3 can be an unfinished one.
    for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
        std::size_t const start = n - back;
        auto const lead = static_cast<std::uint8_t>(bytes[start]);
        if (lead >= 0x80 && lead < 0xC0) continue;  // continuation: its lead is further back
        if (lead < 0xC2 || lead > 0xF4) return n;
        std::size_t const needed = lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
        if (needed <= back) return n;
        // Unfinished only if what is there so far is a valid beginning: the byte after the
        // lead has a narrower range for E0, ED, F0 and F4 (overlongs, surrogates, > U+10FFFF).
        if (back >= 2) {
            auto const second = static_cast<std::uint8_t>(bytes[start + 1]);
            std::uint8_t const lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
            std::uint8_t const hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
            if (second < lo || second > hi) return n;
        }
        return start;
    }
    return n;
}

// The classes of the GPT-2 pattern: \p{L}, \p{N}, \s, and everything else.
enum class CharClass : std::uint8_t { letter, number, whitespace, other };

// \s is Unicode's White_Space property, which is exactly the separators (Zs, Zl, Zp) plus the
// controls TAB..CR and NEL; HF's Oniguruma pattern uses the same set.
inline CharClass classify(char32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CharClass::letter;
        if (cp >= '0' && cp <= '9') return CharClass::number;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CharClass::whitespace;
        return CharClass::other;
    }
    if (cp == 0x85) return CharClass::whitespace;
    switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
        case UTF8PROC_CATEGORY_LU:
        case UTF8PROC_CATEGORY_LL:
        case UTF8PROC_CATEGORY_LT:
        case UTF8PROC_CATEGORY_LM:
        case UTF8PROC_CATEGORY_LO:
            return CharClass::letter;
        case UTF8PROC_CATEGORY_ND:
        case UTF8PROC_CATEGORY_NL:
        case UTF8PROC_CATEGORY_NO:
            return CharClass::number;
        case UTF8PROC_CATEGORY_ZS:
        case UTF8PROC_CATEGORY_ZL:
        case UTF8PROC_CATEGORY_ZP:
            return CharClass::whitespace;
        default:
            return CharClass::other;
    }
}

}  // namespace tinfer
