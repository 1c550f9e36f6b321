#pragma once
// GPT-2's byte <-> unicode table. Byte-level BPE vocabularies spell every byte as a printable
// code point so tokens are valid text: printable Latin-1 bytes stand for themselves and the
// other 68 bytes (controls, space, DEL, NBSP, soft hyphen) for U+0100.. in byte order.
#include <array>
#include <cstdint>
#include <optional>

namespace tinfer::tok {

namespace detail {

constexpr bool byte_is_printable_latin1(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char16_t, 256> make_byte_to_code_point() {
    std::array<char16_t, 256> table{};
    unsigned next_unprintable = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
        table[b] = static_cast<char16_t>(byte_is_printable_latin1(b) ? b : next_unprintable++);
    }
    return table;
}

inline constexpr std::array<char16_t, 256> byte_to_code_point_table = make_byte_to_code_point();

}  // namespace detail

constexpr char32_t byte_to_code_point(std::uint8_t byte) {
    return detail::byte_to_code_point_table[byte];
}

// The byte a code point of the table stands for; nullopt for code points outside the table.
constexpr std::optional<std::uint8_t> code_point_to_byte(char32_t cp) {
    if (cp < 0x100) {
        if (detail::byte_is_printable_latin1(static_cast<unsigned>(cp))) {
            return static_cast<std::uint8_t>(cp);
        }
        return std::nullopt;
    }
    if (cp < 0x100 + 68) {
        unsigned index = 0x100;
        for (unsigned b = 0; b < 256; ++b) {
            if (!detail::byte_is_printable_latin1(b) && index++ == cp) {
                return static_cast<std::uint8_t>(b);
            }
        }
    }
    return std::nullopt;
}

}  // namespace tinfer::tok
